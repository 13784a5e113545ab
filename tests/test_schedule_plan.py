"""The fault plan is a pure value drawn from the seed (unit test): the same seed gives the same
plan byte for byte, each package draws from its own stream, and rules on live state (leaders)
stay rules until a fake cluster resolves them."""

import json

import pytest

from nemeses.base import Context
from nemeses.plan import dumps, loads, plan
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


def test_each_package_draws_from_its_own_stream():
    """Adding a package to a run moves the others in time (the stagger) but never changes what
    they choose."""
    alone = [s.choice for s in draw(["kill"]).steps if s.action == "start"]
    among = [s.choice for s in draw(["partition", "kill", "clock"]).steps
             if s.package == "kill" and s.action == "start"]
    assert alone == among and len(alone) >= 5


@pytest.mark.parametrize("interval, time_limit", [(5.0, 60.0), (10.0, 20.0), (3.0, 7.0)])
def test_each_package_alternates_start_and_stop_within_the_time_limit(interval, time_limit):
    p = draw(["partition", "kill"], interval=interval, time_limit=time_limit)
    assert [(s.at, s.package) for s in p.steps] == sorted((s.at, s.package) for s in p.steps)
    for name in ("partition", "kill"):
        mine = [s for s in p.steps if s.package == name]
        assert [s.action for s in mine] == ["start", "stop"] * (len(mine) // 2)
        assert all(0 < s.at <= time_limit for s in mine)
        starts = [s.at for s in mine if s.action == "start"]
        assert all(b - a == pytest.approx(2 * interval, abs=1e-3) for a, b in zip(starts, starts[1:], strict=False))


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
