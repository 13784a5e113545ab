"""What etcd's API names, shared by the deployment (harness.systems.etcd.deployment) and its
leader transfers (harness.systems.etcd.transfers) without either importing the other: the one
replication group, as the nemeses' rules name it, and an error etcd answered."""

from __future__ import annotations

GROUP = "etcd"  # its one replication group, as the nemeses' tablet rules name it


class EtcdError(Exception):
    """An error etcd's gateway answered: its gRPC code and message."""

    def __init__(self, code: int, message: str):
        super().__init__(f"etcd error {code}: {message}")
        self.code, self.message = code, message
