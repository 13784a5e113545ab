"""The Tessera engine: WAL, Raft core, tablets, tablet servers, masters and the client."""
