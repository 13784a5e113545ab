"""What the replication-group races (copy-race, membership-race) ask of a system that offers
"tablets": a view of one group as its newest replica reports it, one membership change with no
retry, and a tombstone of one replica. The system implements it (Tessera: its tablets, through
`ts.status`, the leader master and `ts.delete_tablet`); the nemeses know no system's RPCs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class GroupView:
    """One replication group as its running replicas report it: the leader is the replica of
    the newest term when it leads (not a deposed leader, cut off by a partition); the members
    are the newest committed config any of them holds."""

    leader: str | None  # the host of that replica when it leads the group, else None
    members: dict[str, str]  # member id -> kind ("VOTER", "NON_VOTER"): its committed config
    hosts: dict[str, str]  # member id -> host, for every server that answered

    def voters_but_leader(self) -> list[str]:
        """The hosts of the committed voters other than the leader, that answered."""
        return sorted(self.hosts[m] for m, kind in self.members.items()
                      if kind == "VOTER" and m in self.hosts and self.hosts[m] != self.leader)


class ReplicaGroups(Protocol):
    def view(self, group: str) -> GroupView | None:
        """None when no server reports a running replica of the group."""
        ...

    def change_once(self, group: str, op: str, member: str, timeout: float) -> str:
        """One change ("add" or "remove"), not retried: "ok", or "refused: <why>"."""
        ...

    def change(self, group: str, op: str, member: str, timeout: float = 30.0) -> object:
        """One change, retried until it is applied or the timeout passes."""
        ...

    def tombstone(self, host: str, group: str) -> bool:
        """Delete (tombstone) the group's replica on `host`; whether the host said it did."""
        ...
