"""The master-membership nemesis's steps on a stand-in deployment: which master it adds or
removes, and a removal the masters refuse as unsafe (other faults hold too many of them down)
skipped, not failed, with nothing changed. The real steps run in tests/test_harness_e2e.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from nemeses.master_membership import MasterMembership
from nemeses.membership import Refused


@dataclass
class _Host:
    name: str


@dataclass
class _Deployment:
    hosts: list = field(default_factory=lambda: [_Host(f"n{i}") for i in range(1, 6)])
    masters: list = field(default_factory=lambda: ["n1", "n2", "n3"])
    added_masters: list = field(default_factory=list)
    refuse: bool = False

    @property
    def master_hosts(self) -> list:
        return [_Host(m) for m in self.masters]

    def add_master(self, host: str) -> str:
        self.masters.append(host)
        self.added_masters.append(host)
        return f"uuid-{host}"

    def remove_master(self, host: str) -> str:
        if self.refuse:
            raise Refused("UnsafeChange: only 2 of the 4 remaining voters answered lately")
        self.masters.remove(host)
        self.added_masters.remove(host)
        return f"uuid-{host}"


def test_a_removal_the_masters_refuse_is_skipped_and_changes_nothing():
    db = _Deployment()
    nemesis = MasterMembership(db=db)
    assert nemesis.step(0)["added"] == "n4"
    assert nemesis.step(0)["added"] == "n5"
    db.refuse = True
    out = nemesis.step(0)
    assert "refused to remove n5's master" in out["skipped"], out
    assert db.added_masters == ["n4", "n5"] and nemesis.active
    db.refuse = False
    assert nemesis.step(0)["removed"] == "n5"
    assert nemesis.step(0)["removed"] == "n4" and not nemesis.active
