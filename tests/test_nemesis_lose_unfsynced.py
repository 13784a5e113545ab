"""The power-loss nemesis (LoseUnfsynced) leaves no daemon dead behind it: every data daemon it
killed is started again even when the loss step fails on a host, and the failure is named. The
failing-disk nemesis, which ends in such a power loss, kills, mends and restarts in order and
skips what it never did."""

from types import SimpleNamespace

from harness.cluster import ClusterError
from harness.deployment import Holds
from nemeses.disk import LoseUnfsynced


class FakeDb(Holds):
    data_daemon = "tserver"

    def __init__(self):
        self.events, self.held, self.dead, self.idle = [], {}, set(), set()

    def _targets(self, host, daemon):
        return [daemon]

    def daemons(self, host):
        return [] if host in self.idle else [self.data_daemon]

    def kill(self, host, daemon):
        self.events.append(("kill", host))
        self.dead.add(host)

    def start(self, host, daemon, by=""):
        self.events.append(("start", host))
        self.dead.discard(host)

    def process_states(self, host, daemon):
        return {daemon: "gone" if host in self.dead else "S"}

    def data_dir(self, daemon):
        return "/var/lib/tessera/tserver"

    def groups_on(self, host):  # the failing disk's: every group it holds can spare one
        return {"t1"}

    def cannot_spare(self):
        return set()


class FakeRemote:
    """`cat` of the control file says how many bytes are unsynced; `echo lose` fails the
    first `fail_loses` times."""

    def __init__(self, unsynced, fail_loses=0):
        self.unsynced, self.fail_loses, self.loses = unsynced, fail_loses, 0

    def sh(self, script):
        if script.startswith("cat "):
            return SimpleNamespace(stdout=f'{{"unsynced_bytes": {self.unsynced}}}')
        assert script.startswith("echo lose > ")
        self.loses += 1
        if self.loses <= self.fail_loses:
            raise ClusterError("n: `echo lose` exited -1: ")
        return SimpleNamespace(stdout="")


def nemesis(remotes):
    return LoseUnfsynced(db=FakeDb(), hosts=list(remotes), remotes=remotes)


def test_a_power_loss_drops_each_hosts_unsynced_bytes_and_restarts_every_daemon():
    n = nemesis({"n1": FakeRemote(116), "n2": FakeRemote(0)})
    assert n.start({}) == {"power_loss": ["n1", "n2"],
                           "unsynced_bytes_dropped": {"n1": 116, "n2": 0},
                           "observed": {"ok": True,
                                        "daemons_at_loss": {"n1": "gone", "n2": "gone"}}}
    kills, starts = n.db.events[:2], n.db.events[2:]  # killed together, then started
    assert sorted(kills) == [("kill", "n1"), ("kill", "n2")]
    assert starts == [("start", "n1"), ("start", "n2")]


def test_a_host_another_fault_holds_is_left_out_of_the_loss():
    n = nemesis({"n1": FakeRemote(116), "n2": FakeRemote(0)})
    assert n.db.claim("n2", "tserver", "pause") is None
    out = n.start({})
    assert out["power_loss"] == ["n1"] and out["held"] == {"n2": "pause"}
    assert ("kill", "n2") not in n.db.events and ("start", "n2") not in n.db.events


def test_hosts_the_data_daemon_does_not_run_on_lose_no_power():
    """A power loss reaches the hosts that run the data daemon (MariaDB's single server: one of
    five); the idle ones were once killed and checked, found without a pid file, and the run's
    every loss judged not in force."""
    n = nemesis({"n1": FakeRemote(116), "n2": FakeRemote(0), "n3": FakeRemote(0)})
    n.db.idle = {"n2", "n3"}
    out = n.start({})
    assert out["power_loss"] == ["n1"] and out["observed"]["ok"]
    assert out["observed"]["daemons_at_loss"] == {"n1": "gone"}
    assert sorted(n.db.events) == [("kill", "n1"), ("start", "n1")]
    n.db.idle = {"n1", "n2", "n3"}
    assert "running none ['n1', 'n2', 'n3']" in n.start({})["skipped"]


def test_a_loss_that_fails_once_is_tried_again():
    remotes = {"n1": FakeRemote(7, fail_loses=1)}
    assert nemesis(remotes).start({})["unsynced_bytes_dropped"] == {"n1": 7}
    assert remotes["n1"].loses == 2


def test_a_loss_that_cannot_be_done_is_named_and_every_daemon_still_starts():
    n = nemesis({"n1": FakeRemote(5, fail_loses=2), "n2": FakeRemote(3)})
    out = n.start({})
    assert out["unsynced_bytes_dropped"] == {"n2": 3}
    assert "exited -1" in out["lose_failed"]["n1"]
    assert not out["observed"]["ok"]  # a loss not done on a host: the fault was not in force
    assert [e for e in n.db.events if e[0] == "start"] == [("start", "n1"), ("start", "n2")]


class FailingRemote:
    """A lazyfs control file whose `dropped_bytes` (and `dropped_total_bytes`, every byte ever
    dropped) grows to `drops` once `eio` was sent (the daemon's syncs failing), or never when
    `drops` is 0; records every command."""

    def __init__(self, drops):
        self.drops, self.dropped, self.failing, self.commands = drops, 0, False, []

    def sh(self, script):
        if script.startswith("cat "):
            if self.failing:
                self.dropped = self.drops
            return SimpleNamespace(stdout=f'{{"dropped_bytes": {self.dropped}, '
                                          f'"dropped_total_bytes": {self.dropped}, '
                                          f'"failing": {str(self.failing).lower()}}}')
        command = script.split()[1]
        self.commands.append(command)
        self.failing = command == "eio" if command in ("eio", "mend") else self.failing
        return SimpleNamespace(stdout="")


def failing_disk(remote, monkeypatch):
    from nemeses import failing_disk as module
    from nemeses.base import Context

    monkeypatch.setattr(module, "POLL_S", 0.0)
    monkeypatch.setattr(module, "FAIL_WAIT_S", 0.05)
    ctx = Context(db=FakeDb(), remotes={"n1": remote})
    ctx.resolve_leader = lambda rule: ("n1", "leader")
    return module.FailingDisk(ctx=ctx)


def test_a_failing_disk_restarts_its_daemon_on_the_mended_disk_then_loses_power(monkeypatch):
    """Once a sync failed (bytes dropped): kill, mend, start, in that order, the start verified
    by the bytes dropped; the stop is a power loss of that host alone."""
    remote = FailingRemote(129)
    n = failing_disk(remote, monkeypatch)
    out = n.start({"target": {"rule": "tablet-leader"}})
    assert out["dropped_bytes"] == 129 and out["observed"]["ok"], out
    assert remote.commands == ["eio", "mend"] and n.ctx.db.events == [("kill", "n1"), ("start", "n1")]
    assert not n.ctx.db.held  # released for the other faults
    assert n.stop()["power_loss"] == ["n1"]
    assert remote.commands[-1] == "lose" and n.ctx.db.events[-2:] == [("kill", "n1"), ("start", "n1")]
    assert n.stop() == {}  # nothing pending: the heal does nothing more


def test_a_failing_disk_no_sync_met_is_mended_and_skipped_without_a_kill(monkeypatch):
    remote = FailingRemote(0)
    n = failing_disk(remote, monkeypatch)
    out = n.start({"target": {"rule": "tablet-leader"}})
    assert "skipped" in out and "no sync failed on n1" in out["skipped"], out
    assert remote.commands == ["eio", "mend"] and n.ctx.db.events == [] and not n.ctx.db.held
    assert n.stop() == {}
