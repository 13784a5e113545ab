"""The Raft-shaped fault packages against a fake cluster (unit test; real hosts in
test_replay's end-to-end run): what each does to which host, in which order."""

import random

from harness.cluster import Host
from harness.deployment import Holds
from nemeses import kill_after_heal, leader_isolate, majority_kill
from nemeses.base import Context
from nemeses.registry import packages

HOSTS = [Host(f"n{i}", f"10.77.0.{10 + i}") for i in range(1, 6)]
NAMES = [h.name for h in HOSTS]


class Out:
    stdout, exit_status = "", 0


class FakeRemote:
    def __init__(self, name, log):
        self.name, self.log = name, log

    def run(self, argv, **kw):
        if "DROP" in argv:
            self.log.append(("drop", self.name, argv[argv.index("-s") + 1]))
        return Out()

    def sh(self, script, **kw):
        if "iptables -w -F TESSERA-" in script:
            self.log.append(("heal", self.name))
        return Out()


class FakeDB(Holds):
    data_daemon = "tserver"

    def __init__(self, log):
        self.log, self.leaders, self.held = log, {"t0": "n2"}, {}

    def _targets(self, host, daemon):
        return [daemon] if daemon else ["master", "tserver"]

    def daemons(self, host):
        return ["master", "tserver"]

    def process_states(self, host, daemon=None):
        return {d: "gone" for d in self._targets(host, daemon)}

    def tablet_leaders(self):
        return dict(self.leaders)

    def kill(self, host, daemon=None):
        self.log.append(("kill", host, daemon))

    def start(self, host, daemon=None, by=""):
        self.log.append(("start", host, daemon))


def cluster():
    log = []
    ctx = Context(FakeDB(log), HOSTS, {h.name: FakeRemote(h.name, log) for h in HOSTS},
                  tablets={0: "t0"})
    return ctx, log


def dropped(log, lone):
    """Who drops the lone host's packets, and whom the lone host drops."""
    addr = {h.address: h.name for h in HOSTS}
    return ({h for kind, h, *src in log if kind == "drop" and addr[src[0]] == lone},
            {addr[src[0]] for kind, h, *src in log if kind == "drop" and h == lone})


def test_kill_after_heal_isolates_the_leader_then_kills_the_new_one_right_after_healing():
    ctx, log = cluster()
    nemesis = packages()["kill-after-heal"].build(ctx)
    choice = {**kill_after_heal.draw(random.Random(1), NAMES), "down_s": 0}
    assert nemesis.start(choice)["isolated"] == "n2"
    assert dropped(log, "n2") == ({"n1", "n3", "n4", "n5"}, {"n1", "n3", "n4", "n5"})
    ctx.db.leaders = {"t0": "n4"}  # elected while n2 was cut off
    log.clear()
    done = nemesis.stop()
    assert done["killed"] == "n4" and done["restarted"] == ["n4"]
    healed = [i for i, e in enumerate(log) if e[0] == "heal"]
    assert len(healed) == 5 and log[healed[-1] + 1:] == [("kill", "n4", "tserver"), ("start", "n4", "tserver")]


def test_leader_isolate_heals_into_a_partition_that_favours_the_lagging_old_leader():
    ctx, log = cluster()
    nemesis = packages()["leader-isolate"].build(ctx)
    choice = {**leader_isolate.draw(random.Random(2), NAMES), "hold_s": 0}
    nemesis.start(choice)
    ctx.db.leaders = {"t0": "n3"}
    log.clear()
    done = nemesis.stop()
    assert done == {"healed": NAMES, "lagging": "n2", "then_isolated": "n3", "held_s": 0}
    assert dropped(log, "n3") == ({"n1", "n2", "n4", "n5"}, {"n1", "n2", "n4", "n5"})
    assert log[-1][0] == "heal" and not nemesis.active


def test_majority_kill_kills_the_planned_majority_of_tablet_servers_and_restarts_them():
    ctx, log = cluster()
    nemesis = packages()["majority-kill"].build(ctx)
    choice = majority_kill.draw(random.Random(3), NAMES)
    victims = choice["target"]["hosts"]
    assert len(victims) == 3
    assert nemesis.start(choice)["killed"] == victims
    assert nemesis.stop() == {"restarted": victims}
    assert log == [("kill", h, "tserver") for h in victims] + [("start", h, "tserver") for h in victims]


def test_a_skipped_or_failed_start_makes_stop_harmless():
    ctx, log = cluster()
    for name in ("kill-after-heal", "leader-isolate", "membership-race"):
        nemesis = packages()[name].build(ctx)
        nemesis.stop()  # no start happened: nothing to undo, nothing raised
    assert not any(kind in ("kill", "drop") for kind, *_ in log)


def test_all_kill_crashes_every_hosts_data_daemon_at_once_and_restarts_them():
    ctx, log = cluster()
    nemesis = packages()["all-kill"].build(ctx)
    choice = majority_kill.draw_all(random.Random(3), NAMES)
    assert choice["target"]["hosts"] == sorted(NAMES)
    assert sorted(nemesis.start(choice)["killed"]) == sorted(NAMES)
    assert sorted(log) == sorted(("kill", h, "tserver") for h in NAMES)
    assert nemesis.stop() == {"restarted": sorted(NAMES)}
    assert not packages()["all-kill"].needs  # every system: only processes
