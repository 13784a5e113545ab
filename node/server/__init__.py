"""What a master and a tablet server share, as Kudu's ServerBase: the server's lifecycle and
status endpoint (`base`, `http`), its identity on disk and the address book of peers (`daemon`),
the command line both daemons take (`daemon_cli`), and how a hosted replica's refusal becomes an
RPC error (`replica_errors`). The master imports this, never the tablet server's package."""
