"""Who may talk to a Tessera cluster: the cluster CA and its certificates (pki), the TLS modes
and what a connection is admitted as (tls), and which roles may call each RPC (acl). README's
Security section gives the threat model."""
