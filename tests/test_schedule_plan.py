"""The fault plan is a pure value drawn from the seed (unit test): the same seed gives the same
plan byte for byte, each package draws from its own stream, and rules on live state (leaders)
stay rules until a fake cluster resolves them."""

import json

import pytest

from nemeses.base import Context
from nemeses.plan import FIRST_START, REST, dumps, loads, plan
from nemeses.registry import packages, select

HOSTS = ["n1", "n2", "n3", "n4", "n5"]


def draw(names, seed=7, interval=5.0, time_limit=60.0):
    known = packages()
    return plan([known[n] for n in names], HOSTS, seed, interval, time_limit)


def test_the_same_seed_draws_the_same_plan_and_another_seed_another():
    every = list(packages())
    assert dumps(draw(every)) == dumps(draw(every))
    assert dumps(draw(every)) != dumps(draw(every, seed=8))


def test_the_plan_survives_json_and_every_choice_is_plain_data():
    p = draw(list(packages()))
    assert loads(dumps(p)) == p
    assert json.loads(dumps(p))["steps"][0].keys() == {"at", "package", "action", "choice"}


def test_each_package_draws_from_its_own_streams():
    """Adding a package to a run never changes what the others choose, nor when."""
    def mine(p, name):
        return [(s.at, s.action, s.choice) for s in p.steps if s.package == name]
    alone, among = draw(["kill"]), draw(["partition", "kill", "clock"])
    assert mine(alone, "kill") == mine(among, "kill") and len(mine(alone, "kill")) >= 10


@pytest.mark.parametrize("interval, time_limit", [(5.0, 60.0), (10.0, 20.0), (3.0, 7.0)])
def test_each_package_alternates_start_and_stop_within_the_time_limit(interval, time_limit):
    p = draw(["partition", "kill"], interval=interval, time_limit=time_limit)
    assert [(s.at, s.package) for s in p.steps] == sorted((s.at, s.package) for s in p.steps)
    for name in ("partition", "kill"):
        mine = [s for s in p.steps if s.package == name]
        assert mine and [s.action for s in mine] == ["start", "stop"] * (len(mine) // 2)
        assert all(0 < s.at <= time_limit for s in mine)
        assert mine[0].at >= FIRST_START * interval - 1e-3  # the workload's undisturbed lead
        for start, stop in zip(mine[::2], mine[1::2], strict=True):  # each holds one interval
            assert stop.at == pytest.approx(min(start.at + interval, time_limit), abs=1e-3)
        for stop, start in zip(mine[1::2], mine[2::2], strict=False):  # then rests
            rest = (start.at - stop.at) / interval
            assert REST[0] - 1e-3 <= rest <= REST[1] + 1e-3


def held(p, name):
    """The windows in which package `name` holds its fault, as (start, stop) pairs."""
    mine = [s.at for s in p.steps if s.package == name]
    return list(zip(mine[::2], mine[1::2], strict=True))


@pytest.mark.parametrize("group", ["all", "raft"])
def test_no_package_starts_inside_another_packages_hold_in_every_cycle(group):
    """With fixed phases, a package whose start always fell inside another's hold never fired
    (membership-race inside all-kill's, in every raft cell). Random rests give every pair of
    packages cycles that overlap and cycles that do not: over 20 seeds of 600 s plans, a
    package's starts fall inside another's hold about half the time, and in no seed always."""
    names = select(group)
    for interval in (3.0, 6.0, 10.0):
        inside = {(a, b): [0, 0] for a in names for b in names if a != b}
        for seed in range(20):
            p = draw(names, seed=seed, interval=interval, time_limit=600.0)
            for a, b in inside:
                starts, windows = [w[0] for w in held(p, a)], held(p, b)
                hits = sum(any(x <= t < y for x, y in windows) for t in starts)
                assert hits < len(starts), (seed, interval, a, b)
                inside[a, b][0] += hits
                inside[a, b][1] += len(starts)
        for (a, b), (hits, total) in inside.items():
            assert 0.3 <= hits / total <= 0.7, (interval, a, b, hits, total)


def test_heal_order_networks_first_then_processes():
    assert draw(["kill", "clock", "partition"]).heal == ["partition", "clock", "kill"]


def test_groups_and_unknown_names():
    assert select("none") == []
    assert {"partition", "kill", "lose-unfsynced"} <= set(select("all"))
    assert not set(select("all")) & set(select("raft"))
    assert "master-membership" not in select("all")  # its own group: it changes the masters
    assert select("masters,kill,kill") == ["master-membership", "kill"]  # groups mix with names
    with pytest.raises(ValueError, match="unknown nemesis 'meteor'"):
        select("kill,meteor")


class FakeDB:
    def __init__(self, master=None, leaders=None):
        self.master, self.leaders = master, leaders or {}

    def leader_master(self):
        return self.master

    def tablet_leaders(self):
        return self.leaders


class H:
    def __init__(self, name):
        self.name = name


def test_leader_rules_resolve_against_the_live_cluster_or_fall_back():
    ctx = Context(FakeDB(master="n2", leaders={"t-b": "n4"}), [H(h) for h in HOSTS],
                  tablets={0: "t-a", 1: "t-b"})
    assert ctx.resolve({"rule": "hosts", "spec": "one", "hosts": ["n3"]}) == ["n3"]
    assert ctx.resolve({"rule": "leader-master", "fallback": ["n5"]}) == ["n2"]
    assert ctx.resolve({"rule": "tablet-leader", "bucket": 7, "fallback": ["n5"]}) == ["n4"]  # 7 mod 2
    assert ctx.resolve({"rule": "tablet-leader", "bucket": 6, "fallback": ["n5"]}) == ["n5"]  # no leader
    nobody = Context(FakeDB(), [H(h) for h in HOSTS])
    assert nobody.resolve({"rule": "leader-master", "fallback": ["n1"]}) == ["n1"]
