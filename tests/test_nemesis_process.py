"""Process faults' target choice, against a fake DB (the real one is in test_nemeses_e2e)."""

import random
from collections import Counter

from nemeses.process import Kill, Pause


class FakeDB:
    def __init__(self, leader="n2", tablets=None):
        self.leader, self.tablets, self.log = leader, tablets or {"t1": "n4"}, []

    def leader_master(self):
        return self.leader

    def tablet_leaders(self):
        return self.tablets

    def kill(self, h):
        self.log.append(("kill", h))

    def start(self, h):
        self.log.append(("start", h))

    def pause(self, h):
        self.log.append(("pause", h))

    def resume(self, h):
        self.log.append(("resume", h))


def test_targets_include_the_primaries_and_every_fault_is_undone():
    db = FakeDB()
    k = Kill(db=db, hosts=["n1", "n2", "n3", "n4", "n5"])
    seen = Counter()
    for seed in range(60):
        done = k.start(random.Random(seed))
        seen[done["targets"]] += 1
        if done["targets"] == "leader-master":
            assert done["killed"] == ["n2"]
        if done["targets"] == "tablet-leader":
            assert done["killed"] == ["n4"]
        if done["targets"] == "minority":
            assert len(done["killed"]) == 2
        assert k.stop() == {"restarted": done["killed"]}
    assert set(seen) == {"one", "minority", "leader-master", "tablet-leader"}, seen
    kills = [h for a, h in db.log if a == "kill"]
    starts = [h for a, h in db.log if a == "start"]
    assert kills == starts


def test_no_known_leader_falls_back_to_one_host():
    db = FakeDB(leader=None, tablets={})
    p = Pause(db=db, hosts=["n1", "n2", "n3"], targets="one")
    for seed in range(20):
        done = p.start(random.Random(seed))
        assert len(done["paused"]) == 1 and done["signal"] == "SIGSTOP"
        p.stop()
