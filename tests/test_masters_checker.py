"""The end-of-run masters' check (reports.checkers.masters): both directions, on the shapes a
membership bug leaves. A valid verdict needs every master answering, one leader, and every
config equal to the running masters; each way of missing that is caught, and nothing is
reported of a healthy set."""

from node.protocol import MasterInfo, Peer
from reports.checkers.masters import compare


def info(uuid, config, leader="a", role="FOLLOWER", term=3):
    return MasterInfo(uuid, role, leader, term, [Peer(u, "10.0.0.1", 7051) for u in config], [],
                      list(config), 0)


HEALTHY = {"n1": info("a", "abc", role="LEADER"), "n2": info("b", "abc"), "n3": info("c", "abc")}


def test_a_healthy_set_is_valid():
    r = compare(["n1", "n2", "n3"], HEALTHY)
    assert r["verdict"] == "valid" and r["errors"] == []
    assert r["masters"]["n1"] == {"uuid": "a", "role": "LEADER", "term": 3, "leader": "a",
                                  "config": ["a", "b", "c"]}


def test_a_removed_master_still_in_a_config_is_invalid():
    infos = {**HEALTHY, "n2": info("b", "abcd")}  # d was removed and stopped, b never heard
    r = compare(["n1", "n2", "n3"], infos)
    assert r["verdict"] == "invalid"
    assert [(e["type"], e["host"]) for e in r["errors"]] == [("masters-config", "n2")]
    assert "['d'] are not running masters" in r["errors"][0]["explanation"]


def test_a_master_that_never_learnt_a_member_is_invalid():
    infos = {**HEALTHY, "n4": info("d", "abcd"), "n1": info("a", "abcd", role="LEADER"),
             "n2": info("b", "abcd"), "n3": info("c", "abc")}
    r = compare(["n1", "n2", "n3", "n4"], infos)
    assert r["verdict"] == "invalid"
    assert [e["host"] for e in r["errors"]] == ["n3"] and "lacks ['d']" in r["errors"][0]["explanation"]


def test_two_leaders_named_is_invalid():
    infos = {**HEALTHY, "n3": info("c", "abc", leader="c", role="LEADER", term=4)}
    r = compare(["n1", "n2", "n3"], infos)
    assert r["verdict"] == "invalid" and r["errors"][0]["type"] == "masters-leader"


def test_a_master_that_does_not_answer_leaves_it_unknown_not_valid():
    infos = {k: v for k, v in HEALTHY.items() if k != "n3"}
    r = compare(["n1", "n2", "n3"], infos)
    assert r["verdict"] == "unknown" and "n3" in r["reason"]
    assert r["masters"]["n3"] == {"answered": False}


def test_no_leader_known_is_unknown():
    infos = {h: info(i.uuid, "abc", leader=None) for h, i in HEALTHY.items()}
    assert compare(["n1", "n2", "n3"], infos)["verdict"] == "unknown"
