"""The disk fault against a fake deployment (the real one is in test_nemeses_e2e): it holds the
daemon it damaged until its answer to the damage is read, and repairs a daemon another fault
holds only at the heal, after that fault is undone. Both gaps left etcd runs of the nightly
matrix unknown: a pause took the restarted member before its answer was read, and a repair
killed and wiped a paused member whose replacement the pause then held."""

from __future__ import annotations

import json
from types import SimpleNamespace

from harness.deployment import Holds
from nemeses.disk import _DAMAGE, DiskCorruption, DiskLayout

DAMAGE = {"file": "/d/member/db", "group": "g", "mode": "bitflip", "offset": 7, "before": 0,
          "after": 1}


class Remote:
    def run(self, args, check=True):
        return SimpleNamespace(stdout=json.dumps(DAMAGE) if args[2] == _DAMAGE else "1",
                               exit_status=0)


class FakeDB(Holds):
    def __init__(self):
        self.held, self.log, self.claims_meanwhile = {}, [], []

    def _targets(self, host, daemon):
        return [daemon] if daemon else ["etcd"]

    def disk_layout(self):
        return DiskLayout(daemon="etcd", root="/d", files=(("member", "etcd-snap", "g"),),
                          modes=("bitflip",))

    def cannot_spare(self):
        return set()

    def kill(self, host, daemon=None):
        self.log.append(("kill", host))

    def start(self, host, daemon=None, by=""):
        if (holder := self.held_by(host, daemon, but=by)):
            return {"etcd": holder}
        self.log.append(("start", host, by))
        return {}

    def damaged(self, host, done):
        # the pause fault fires on the same host while the answer is being read
        self.claims_meanwhile.append(self.claim(host, "etcd", "pause"))
        return {"group": "g", "state": "REFUSED"}

    def repair(self, host, done, by=""):
        self.log.append(("repair", host, by))
        self.start(host, "etcd", by=by)
        return {"replaced": host}


def disk_fault(db):
    return DiskCorruption(db=db, hosts=["n1"], remotes={"n1": Remote()})


def test_no_other_fault_takes_the_daemon_before_its_answer_to_the_damage_is_read():
    db = FakeDB()
    done = disk_fault(db).start({"host": "n1", "damage_seed": 1})
    assert done["replica"]["state"] == "REFUSED" and done["observed"]["ok"]
    assert db.claims_meanwhile == ["disk"]  # the pause was refused: the disk fault held it
    assert db.log == [("kill", "n1"), ("start", "n1", "disk")] and db.held == {}


def test_a_repair_waits_while_another_fault_holds_the_daemon_and_runs_at_the_heal():
    db = FakeDB()
    fault = disk_fault(db)
    fault.start({"host": "n1", "damage_seed": 1})
    db.release("n1", "etcd", "disk")
    db.claim("n1", "etcd", "pause")  # the pause holds the member when the disk fault stops
    stopped = fault.stop()
    assert stopped["deferred"] == {"n1": "pause"} and stopped["repaired"] == []
    assert fault.active and not any(e[0] == "repair" for e in db.log)
    db.release("n1", "etcd", "pause")  # the heal undoes the pause first (heal_rank)
    healed = fault.heal()
    assert [r["replaced"] for r in healed["repaired"]] == ["n1"] and not fault.active
    assert db.log[-2:] == [("repair", "n1", "disk"), ("start", "n1", "disk")] and db.held == {}
