"""The faults that take a replica from a group take turns (nemeses.redundancy), against a fake
deployment; the real race is in test_harness_e2e's `--nemesis all` run, which once failed on
it: the membership fault removed a voter while the disk fault had another of the same tablet
down for its damage, each having looked at the group before the other acted, and the tablet
kept one live voter of two (the add-back gave up: Stranded)."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

from harness.deployment import Holds
from nemeses.base import Context
from nemeses.disk import _DAMAGE, DiskCorruption, DiskLayout
from nemeses.membership import Membership

DAMAGE = {"file": "/d/t1/wal-000000001", "group": "t1", "mode": "bitflip", "offset": 7,
          "before": 0, "after": 1}


class Remote:
    def __init__(self):
        self.spared: list = []  # what each damage script was told to spare

    def run(self, args, check=True):
        if args[2] == _DAMAGE:
            self.spared.append(json.loads(args[4])["spared"])
        return SimpleNamespace(stdout=json.dumps(DAMAGE) if args[2] == _DAMAGE else "1",
                               exit_status=0)

    def sh(self, line, check=True):
        return SimpleNamespace(stdout="0")


class Members:
    """Tablet t1 on n1..n3; a removal that can be held in the middle (`hold`)."""

    def __init__(self):
        self.members = {("t1", "u1", "n1"), ("t1", "u2", "n2"), ("t1", "u3", "n3")}
        self.hold, self.inside = threading.Event(), threading.Event()
        self.hold.set()
        self.look, self.looking = threading.Event(), threading.Event()  # a look held likewise
        self.look.set()
        self.why_none, self.removed = "", []

    def removable(self):
        self.looking.set()
        self.look.wait(10)
        return sorted(self.members) if len(self.members) == 3 else []

    def remove(self, member, timeout):
        self.inside.set()
        self.hold.wait(10)
        self.members.discard(member)
        self.removed.append(member[2])
        return {}

    def present(self, member):
        return member in self.members

    def add(self, member, timeout):
        self.members.add(member)
        return {}


class FakeDB(Holds):
    def __init__(self):
        self.held, self.killed, self.members = {}, [], Members()

    def _targets(self, host, daemon):
        return ["tserver"]

    def membership(self):
        return self.members

    def disk_layout(self):
        return DiskLayout(daemon="tserver", root="/d", files=(("", "wal", "dir"),), modes=("bitflip",))

    def cannot_spare(self):
        return set()

    def kill(self, host, daemon=None):
        self.killed.append(host)

    def start(self, host, daemon=None, by=""):
        return {}

    def damaged(self, host, done):
        return {"group": done["group"], "state": "FAILED"}

    def repair(self, host, done, by=""):
        return {"replaced": host}


def faults() -> tuple[FakeDB, Membership, DiskCorruption]:
    db = FakeDB()
    ctx = Context(db=db)
    return (db, Membership(db=db, redundancy=ctx.redundancy),
            DiskCorruption(db=db, hosts=["n1"], remotes={"n1": Remote()}, redundancy=ctx.redundancy))


def test_a_damage_while_a_removal_looks_is_held_off_and_touches_nothing():
    db, membership, disk = faults()
    db.members.look.clear()
    removal = threading.Thread(target=membership.start, args=({"pick": 1},))
    removal.start()
    assert db.members.looking.wait(10)
    held = disk.start({"host": "n1", "damage_seed": 3})
    assert held["held_off"] and "membership is taking a replica" in held["skipped"]
    assert db.killed == [] and not db.held and not disk.damaged
    db.members.look.set()
    removal.join(10)
    assert db.members.removed == ["n2"]


def test_a_damage_while_a_removal_is_under_way_spares_the_group_it_takes_until_it_is_back():
    """The removal runs after the turn (it may wait half a minute for a leader), its group
    reserved: a damage then goes on, told to spare that group."""
    db, membership, disk = faults()
    remote = disk.remotes["n1"]
    db.members.hold.clear()
    removal = threading.Thread(target=membership.start, args=({"pick": 1},))
    removal.start()
    assert db.members.inside.wait(10)
    disk.start({"host": "n1", "damage_seed": 3})
    assert remote.spared == [["t1"]] and db.killed == ["n1"]
    db.members.hold.set()
    removal.join(10)
    assert db.members.removed == ["n2"]
    disk.start({"host": "n1", "damage_seed": 4})  # still out of its group: still spared
    membership.stop()  # added back
    disk.start({"host": "n1", "damage_seed": 5})
    assert remote.spared[1:] == [["t1"], []]


def test_a_removal_while_a_damage_is_under_way_is_held_off_then_spares_its_group():
    """While the damage script runs the turn is the disk fault's; once the damaged group is
    recorded the turn goes (the restart and the answer take seconds), and the group is spared."""
    db, membership, disk = faults()
    remote, seen = disk.remotes["n1"], {}
    run = remote.run

    def damaging(args, check=True):  # the membership fault fires while the script runs
        if args[2] == _DAMAGE:
            seen["during"] = membership.start({"pick": 0})
        return run(args, check)

    def damaged(host, done):  # and again while the damage's answer is read
        seen["after"] = membership.start({"pick": 0})
        return {"group": done["group"], "state": "FAILED"}

    remote.run, db.damaged = damaging, damaged
    disk.start({"host": "n1", "damage_seed": 3})
    assert seen["during"]["held_off"] and "disk is taking a replica" in seen["during"]["skipped"]
    assert seen["after"]["held_off"] and "lost a replica to one" in seen["after"]["skipped"]
    assert db.members.removed == []


def test_a_group_a_damage_took_a_replica_from_is_never_shrunk_until_its_repair():
    """A lost file fails its replica only when the daemon next reads it, so no look at the
    group sees the loss: the damage's record is what keeps the removal away."""
    db, membership, disk = faults()
    disk.start({"host": "n1", "damage_seed": 3})
    held = membership.start({"pick": 0})
    assert held["held_off"] and "lost a replica to one" in held["skipped"]
    assert db.members.removed == []
    disk.stop()  # the system's repair mends the group (etcd replaces the member)
    assert membership.start({"pick": 0})["removed"] == "n1"
