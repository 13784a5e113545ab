"""Process faults against a fake DB (the real one is in test_nemeses_e2e): the plan's target
rules are resolved when the fault fires, and every fault is undone."""

import random
from collections import Counter

from harness.deployment import Holds
from nemeses.base import Context
from nemeses.process import Kill, Pause, draw_process

HOSTS = ["n1", "n2", "n3", "n4", "n5"]


class H:
    def __init__(self, name):
        self.name = name


class FakeDB(Holds):
    def __init__(self, leader="n2", tablets=None, idle=()):
        self.leader, self.tablets, self.log = leader, tablets or {"t1": "n4"}, []
        self.held, self.state, self.idle = {}, {}, set(idle)

    def _targets(self, host, daemon):
        return [daemon] if daemon else ["master", "tserver"]

    def daemons(self, host):
        return [] if host in self.idle else ["master", "tserver"]

    def process_states(self, h, daemon=None):
        return {d: self.state.get(h, "S") for d in self._targets(h, daemon)}

    def leader_master(self):
        return self.leader

    def tablet_leaders(self):
        return self.tablets

    def kill(self, h, daemon=None):
        self.log.append(("kill", h))
        self.state[h] = "gone"

    def start(self, h, daemon=None, by=""):
        self.log.append(("start", h))
        self.state[h] = "S"
        return {}

    def pause(self, h, daemon=None):
        self.log.append(("pause", h))
        self.state[h] = "T"

    def resume(self, h, daemon=None):
        self.log.append(("resume", h))
        self.state[h] = "S"


def test_targets_include_the_primaries_and_every_fault_is_undone():
    db = FakeDB()
    k = Kill(ctx=Context(db, [H(h) for h in HOSTS], tablets={0: "t1"}))
    seen = Counter()
    for seed in range(60):
        done = k.start(draw_process(random.Random(seed), HOSTS))
        seen[done["targets"]] += 1
        assert done["observed"]["ok"]
        if done["targets"] == "leader-master":
            assert done["killed"] == ["n2"] and done["resolved"] == "leader"
        if done["targets"] == "tablet-leader":
            assert done["killed"] == ["n4"] and done["resolved"] == "leader"
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
        if "fallback" in choice["target"]:  # recorded as the fallback it was, not as a leader
            assert done["resolved"] == "fallback"
        p.stop()


def test_a_fault_that_did_not_take_is_seen_and_a_held_host_is_left_alone():
    db = FakeDB()
    ctx = Context(db, [H(h) for h in HOSTS])
    pause, kill = Pause(ctx=ctx), Kill(ctx=ctx)
    one = {"target": {"rule": "hosts", "spec": "one", "hosts": ["n3"]}}
    db.pause = lambda h, daemon=None: None  # SIGSTOP never arrives: the process runs on
    done = pause.start(one)
    assert not done["observed"]["ok"] and done["observed"]["states"]["n3"]["tserver"] == "S"
    pause.stop()
    db.pause = FakeDB.pause.__get__(db)
    assert pause.start(one)["observed"]["ok"]  # stopped: T
    assert kill.start(one) == {  # held off: the schedule tries it again while its hold lasts
        "skipped": "no target to kill: {'held by another fault': {'n3': 'pause'}}", "held_off": True}
    both = {"target": {"rule": "hosts", "spec": "minority", "hosts": ["n1", "n3"]}}
    done = kill.start(both)
    assert done["killed"] == ["n1"] and done["held"] == {"n3": "pause"}
    assert ("kill", "n3") not in db.log and kill.stop() == {"restarted": ["n1"]}
    assert ("start", "n3") not in db.log and db.state["n3"] == "T"  # still paused
    pause.stop()
    assert db.held == {}


def test_a_signal_acted_on_late_is_read_again_before_the_start_is_judged():
    """kill returns once the signal is queued; a process waiting for a CPU still reads R until
    it runs: the check reads again before it calls the start not in force."""
    db = FakeDB()
    ctx = Context(db, [H(h) for h in HOSTS])
    reads = Counter()

    def late(h, daemon=None):
        reads[h] += 1
        return {d: ("R" if reads[h] < 3 else "T") for d in db._targets(h, daemon)}

    db.process_states = late
    db.pause = lambda h, daemon=None: None
    done = Pause(ctx=ctx).start({"target": {"rule": "hosts", "spec": "one", "hosts": ["n3"]}})
    assert done["observed"]["ok"] and reads["n3"] == 3


def test_a_host_the_system_does_not_run_on_is_not_counted_as_hit():
    """MariaDB's single server leaves four hosts idle: a kill drawn for them has no process to
    signal, and an empty list of process states once read as every target dead (a verified
    fault that never happened). Idle targets are named; a fault with no other is skipped."""
    db = FakeDB(idle={"n2", "n3", "n4", "n5"})
    kill = Kill(ctx=Context(db, [H(h) for h in HOSTS]))
    idle = {"target": {"rule": "hosts", "spec": "minority", "hosts": ["n2", "n3"]}}
    assert kill.start(idle) == {"skipped": "no target to kill: {'running no daemon': ['n2', 'n3']}"}
    assert db.log == []
    mixed = {"target": {"rule": "hosts", "spec": "minority", "hosts": ["n1", "n4"]}}
    done = kill.start(mixed)
    assert done["killed"] == ["n1"] and done["idle"] == ["n4"] and done["observed"]["ok"]
    assert kill.stop() == {"restarted": ["n1"]}
    one_daemon = Kill(ctx=Context(db, [H(h) for h in HOSTS]), daemon="mariadb")
    assert "running no mariadb" in one_daemon.start(mixed)["skipped"]  # n1 runs none of it



def test_a_daemon_added_to_the_host_after_the_kill_is_not_read_as_one_it_missed():
    """A kill of n4 (no master there) and master-membership's start adding a master to n4 can
    begin milliseconds apart. A check after the kill that met the new master before its pid
    file was written ('no-pid-file') made the run unknown: 'start-kill not in force'. The check
    reads the daemons the kill signalled, less any that had no pid file, and still catches one
    left running."""
    class Growing(FakeDB):
        def __init__(self):
            super().__init__()
            self.masters = {"n1", "n2", "n3"}

        def daemons(self, host):
            return (["master"] if host in self.masters else []) + ["tserver"]

        def _targets(self, host, daemon):
            return [daemon] if daemon else self.daemons(host)

        def kill(self, h, daemon=None):
            super().kill(h, daemon)
            self.masters.add(h)  # master-membership adds a master here meanwhile

        def process_states(self, h, daemon=None):
            return {d: ("no-pid-file" if d == "master" and h in ("n4", "n5")
                        else self.state.get(h, "S")) for d in self._targets(h, daemon)}

    db = Growing()
    k = Kill(ctx=Context(db, [H(h) for h in HOSTS]))
    done = k.start({"target": {"rule": "hosts", "spec": "one", "hosts": ["n4"]}})
    assert done["killed"] == ["n4"] and done["observed"]["ok"], done
    assert done["observed"]["states"] == {"n4": {"tserver": "gone"}}
    k.stop()
    db.masters.add("n5")  # added before the kill this time: signalled, but no pid file yet
    done = k.start({"target": {"rule": "hosts", "spec": "one", "hosts": ["n5"]}})
    assert done["observed"]["ok"] and done["observed"]["states"] == {"n5": {"tserver": "gone"}}
    k.stop()
    db.state["n2"] = "R"  # a tserver the kill did not take down is still caught
    db.kill = lambda h, daemon=None: None
    missed = k.start({"target": {"rule": "hosts", "spec": "one", "hosts": ["n2"]}})
    assert not missed["observed"]["ok"]


def test_a_fault_cannot_claim_a_daemon_while_its_holder_gives_it_back():
    """A kill's stop restarts its hosts' daemons before it lets them go. Released first, a
    pause firing in between claimed a tablet server the restart had not reached, stopped no
    process, and the restart then left the server to the pause: down for the rest of the run
    while the history said paused (a nightly matrix run, unknown: not in force)."""
    db = FakeDB()
    ctx = Context(db, [H(h) for h in HOSTS])
    pause, kill = Pause(ctx=ctx), Kill(ctx=ctx)
    one = {"target": {"rule": "hosts", "spec": "one", "hosts": ["n3"]}}
    assert kill.start(one)["observed"]["ok"]
    tried = []

    def start(h, daemon=None, by=""):  # the pause fires while the kill's restart runs
        tried.append(pause.start(one))
        return FakeDB.start(db, h, daemon, by)
    db.start = start
    assert kill.stop() == {"restarted": ["n3"]}
    assert tried[0].get("held_off"), tried  # refused: the kill still held n3
    assert db.state["n3"] == "S" and db.held == {}
    db.start = FakeDB.start.__get__(db)
    assert pause.start(one)["observed"]["ok"]  # its next try finds the server running


def test_a_pause_is_resumed_before_another_fault_may_claim_the_daemon():
    db = FakeDB()
    ctx = Context(db, [H(h) for h in HOSTS])
    first, second = Pause(ctx=ctx), Pause(name="pause-2", ctx=ctx)
    one = {"target": {"rule": "hosts", "spec": "one", "hosts": ["n3"]}}
    assert first.start(one)["observed"]["ok"]
    tried = []

    def resume(h, daemon=None):  # a second pause fires while the first one resumes
        tried.append(second.start(one))
        FakeDB.resume(db, h, daemon)
    db.resume = resume
    first.stop()
    assert tried[0].get("held_off"), tried
    assert db.state["n3"] == "S" and db.held == {}
