"""Process faults against a fake DB (the real one is in test_nemeses_e2e): the plan's target
rules are resolved when the fault fires, and every fault is undone."""

import random
from collections import Counter

from nemeses.base import Context
from nemeses.process import Kill, Pause, draw_process

HOSTS = ["n1", "n2", "n3", "n4", "n5"]


class H:
    def __init__(self, name):
        self.name = name


class FakeDB:
    def __init__(self, leader="n2", tablets=None):
        self.leader, self.tablets, self.log = leader, tablets or {"t1": "n4"}, []

    def leader_master(self):
        return self.leader

    def tablet_leaders(self):
        return self.tablets

    def kill(self, h, daemon=None):
        self.log.append(("kill", h))

    def start(self, h, daemon=None):
        self.log.append(("start", h))

    def pause(self, h, daemon=None):
        self.log.append(("pause", h))

    def resume(self, h, daemon=None):
        self.log.append(("resume", h))


def test_targets_include_the_primaries_and_every_fault_is_undone():
    db = FakeDB()
    k = Kill(ctx=Context(db, [H(h) for h in HOSTS], tablets={0: "t1"}))
    seen = Counter()
    for seed in range(60):
        done = k.start(draw_process(random.Random(seed), HOSTS))
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


def test_no_known_leader_falls_back_to_the_planned_host():
    db = FakeDB(leader=None, tablets={})
    p = Pause(ctx=Context(db, [H(h) for h in HOSTS]))
    for seed in range(20):
        choice = draw_process(random.Random(seed), HOSTS, share="one")
        done = p.start(choice)
        assert len(done["paused"]) == 1 and done["signal"] == "SIGSTOP"
        assert done["paused"] == choice["target"].get("hosts", choice["target"].get("fallback"))
        p.stop()
