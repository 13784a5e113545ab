"""etcd under test (Debian's etcd-server): its deployment and its client, over etcd's v3 JSON gateway."""
