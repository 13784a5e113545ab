"""The failing-disk fault against a fake deployment (the real one is in test_harness_e2e and the
lazyfs tests): a daemon that died of the failing disk before any sync dropped a byte (one
another fault's restart was starting then: "cannot start: EIO") is the fault's to start again.
It was released as it was, stayed down through the final heal, and the convergence check called
the engine's leaderless tablet invalid."""

from __future__ import annotations

import json
from types import SimpleNamespace

from harness.deployment import Holds
from nemeses import failing_disk
from nemeses.base import Context
from nemeses.failing_disk import FailingDisk


class Remote:
    def __init__(self, stats: list[dict] | None = None):
        self.commands: list[str] = []
        self.stats = stats or []  # what each stats read answers in turn; then the last again

    def sh(self, line):
        self.commands.append(line.split()[1] if line.startswith("echo") else "stats")
        if line.startswith("echo"):
            return SimpleNamespace(stdout="")
        answer = self.stats.pop(0) if len(self.stats) > 1 else (self.stats or [{}])[0]
        return SimpleNamespace(stdout=json.dumps({"dropped_bytes": 0, "unsynced_bytes": 0,
                                                  **answer}))


class FakeDB(Holds):
    data_daemon = "tserver"

    def __init__(self, state: str):
        self.held, self.state, self.started = {}, state, []
        self.groups, self.shrunk = {"t1", "t2"}, set()  # n4's tablets; those down to two voters
        self.asked = 0
        self.leaders, self.elsewhere = {}, {}  # tablet -> leader's host; host -> its groups

    def groups_on(self, host):
        self.asked += 1
        return self.groups if host == "n4" else self.elsewhere.get(host)

    def tablet_leaders(self):
        return self.leaders

    def cannot_spare(self):
        return self.shrunk

    def _targets(self, host, daemon):
        return [daemon or "tserver"]

    def data_dir(self, daemon):
        return "/data"

    def process_states(self, host, daemon=None):
        return {"tserver": self.state}

    def start(self, host, daemon=None, by=""):
        self.started.append((host, by))
        return {}

    def kill(self, host, daemon=None):
        self.killed = (host, daemon)


def _start(monkeypatch, state: str, stats: list[dict] | None = None, shrunk: frozenset = frozenset(),
           ctx: Context | None = None) -> tuple[FakeDB, Remote, dict, FailingDisk]:
    monkeypatch.setattr(failing_disk, "FAIL_WAIT_S", 0.0)
    db, remote = FakeDB(state), Remote(stats)
    db.shrunk = set(shrunk)
    fault = FailingDisk(ctx=ctx or Context(db=db))
    fault.ctx.db, fault.ctx.remotes = db, {"n4": remote}
    rule = {"fallback": ["n4"]}
    fault.ctx.leader = lambda r: None  # nobody known: the plan's host stands in
    return db, remote, fault.start({"target": rule}), fault


def test_a_daemon_that_died_on_the_failing_disk_is_started_again_and_the_fault_fired(monkeypatch):
    db, remote, done, fault = _start(monkeypatch, "gone")
    assert db.started == [("n4", "failing-disk")] and not db.held
    assert done["died_on_failing_disk"] and done["observed"]["ok"] is True and "skipped" not in done
    assert remote.commands.count("eio") == remote.commands.count("mend") == 1
    assert fault.active and fault.restarted == "n4"  # the power loss follows at the stop


def test_a_disk_nothing_synced_on_while_the_daemon_ran_is_a_skip_that_starts_nothing(monkeypatch):
    db, _, done, fault = _start(monkeypatch, "S")
    assert db.started == [] and not db.held
    assert "no sync failed on n4" in done["skipped"] and not fault.active


def test_a_failed_sync_whose_file_the_daemon_removed_still_counts_as_in_force(monkeypatch):
    """The only sync that failed was a temp file's, which the daemon removed (Tessera's atomic
    save does): once the kill closed its handle lazyfs held none of the dropped bytes. Read
    from the bytes held, the start was "not in force" and the matrix's run unknown."""
    stats = [{"dropped_total_bytes": 10},  # left by an earlier start
             {"dropped_total_bytes": 254, "dropped_bytes": 244},  # the failed sync
             {"dropped_total_bytes": 254, "dropped_bytes": 0}]  # after the kill: forgotten
    db, _, done, fault = _start(monkeypatch, "S", stats)
    assert db.killed == ("n4", "tserver") and db.started == [("n4", "failing-disk")]
    assert done["dropped_bytes"] == 244 and done["observed"]["ok"] is True
    assert done["observed"]["held_in_cache"] == 0 and fault.active


def test_a_host_holding_a_group_that_cannot_spare_a_replica_is_held_off_untouched(monkeypatch):
    """The membership fault shrank t2 to two voters: failing n4's replica of it would leave one
    live voter of two, a tablet that can elect no leader until an operator steps in (a nightly
    run's membership add-back gave up on such a tablet: Stranded)."""
    db, remote, done, fault = _start(monkeypatch, "S", shrunk=frozenset({"t2", "t9"}))
    assert done["held_off"] and "n4 holds a replica of t2" in done["skipped"]
    assert "cannot spare a replica now (t2, t9)" in done["skipped"]
    assert remote.commands == [] and not db.held and not fault.active


def test_a_host_holding_a_group_a_disk_fault_damaged_is_held_off(monkeypatch):
    ctx = Context(db=None)
    ctx.redundancy.lose("t1", "disk")
    _, remote, done, _ = _start(monkeypatch, "S", ctx=ctx)
    assert done["held_off"] and "replica of t1" in done["skipped"] and remote.commands == []


def test_while_another_fault_takes_a_replica_the_failing_disk_is_held_off(monkeypatch):
    ctx = Context(db=None)
    with ctx.redundancy.taking("membership") as other:
        assert other is None
        _, remote, done, _ = _start(monkeypatch, "S", ctx=ctx)
    assert done["held_off"] and "membership is taking a replica" in done["skipped"]
    assert remote.commands == []
    _, remote, done, _ = _start(monkeypatch, "S", ctx=ctx)  # the turn is free again
    assert "eio" in remote.commands


def test_a_host_is_asked_its_groups_only_when_some_group_cannot_spare_one(monkeypatch):
    """A host slowed by another fault (a packet delay) often misses the call's second: asked
    every time, the fault was held off in every `all` cell of a matrix."""
    db, remote, _, _ = _start(monkeypatch, "S")
    assert db.asked == 0 and "eio" in remote.commands  # the disk failed: the fault fired
    ctx = Context(db=None)
    ctx.redundancy.reserve("t9", "membership")  # a group elsewhere: n4 is asked, and may fire
    db, remote, _, _ = _start(monkeypatch, "S", ctx=ctx)
    assert db.asked == 1 and "eio" in remote.commands


def test_a_host_that_does_not_say_its_groups_while_one_cannot_spare_is_held_off(monkeypatch):
    ctx = Context(db=None)
    ctx.redundancy.reserve("t9", "membership")
    monkeypatch.setattr(FakeDB, "groups_on", lambda self, host: None)
    _, remote, done, _ = _start(monkeypatch, "S", ctx=ctx)
    assert done["held_off"] and "n4 did not say which groups it holds" in done["skipped"]
    assert remote.commands == []


def test_a_host_holding_a_group_that_cannot_spare_one_gives_way_to_another_leaders(monkeypatch):
    """The plan's host holds a replica of a shrunk group: the fault fires on another tablet
    leader's host that holds none, so it still meets a leader's disk at once."""
    monkeypatch.setattr(failing_disk, "FAIL_WAIT_S", 0.0)
    db, remote = FakeDB("S"), Remote()
    db.shrunk, db.leaders = {"t2"}, {"t1": "n4", "t2": "n1", "t3": "n5"}
    db.elsewhere = {"n1": {"t2", "t3"}, "n5": {"t1", "t3"}}
    fault = FailingDisk(ctx=Context(db=db, remotes={"n5": remote}))
    fault.ctx.leader = lambda r: "n4"
    done = fault.start({"target": {"fallback": ["n4"]}})
    assert done["host"] == "n5" and done["resolved"] == "another-leader"
    assert "eio" in remote.commands
