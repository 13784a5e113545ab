"""Hand-written Elle cases: one history per anomaly class, and a clean serial history for each,
for both list-append and rw-register."""

from __future__ import annotations

import pytest

from reports.checkers.elle import check_list_append, check_rw_register
from reports.checkers.generate import list_append_history
from reports.history import Op


def history(*events) -> list[Op]:
    """events: ("invoke", process, mops) | ("ok", process, mops) | ("fail"|"info", process)."""
    ops, invoked = [], {}
    for ev in events:
        kind, p = ev[0], ev[1]
        if kind == "invoke":
            invoked[p] = ev[2]
            value = [[f, k, None if f == "r" else v] for f, k, v in ev[2]]
        else:
            value = ev[2] if len(ev) > 2 else invoked[p]
        ops.append(Op(index=len(ops), type=kind, f="txn", value=value, process=p, time=len(ops)))
    return ops


def serial(*txns) -> list[Op]:
    """Each txn (process, mops) invoked and completed ok before the next begins."""
    events = []
    for p, mops in txns:
        events += [("invoke", p, mops), ("ok", p, mops)]
    return history(*events)


def concurrent(*txns, then=()) -> list[Op]:
    """All txns invoked together, then completed in order; `then` runs serially afterwards."""
    events = [("invoke", p, m) for p, m in txns] + [("ok", p, m) for p, m in txns]
    for p, m in then:
        events += [("invoke", p, m), ("ok", p, m)]
    return history(*events)


A, R, W = "append", "r", "w"

LIST_APPEND_CASES = {
    "G0": (
        concurrent((1, [[A, "x", 1], [A, "y", 1]]), (2, [[A, "x", 2], [A, "y", 2]]),
                   then=[(3, [[R, "x", [1, 2]], [R, "y", [2, 1]]])]),
        serial((1, [[A, "x", 1], [A, "y", 1]]), (2, [[A, "x", 2], [A, "y", 2]]),
               (3, [[R, "x", [1, 2]], [R, "y", [1, 2]]])),
    ),
    "G1a": (
        history(("invoke", 1, [[A, "x", 1]]), ("fail", 1), ("invoke", 2, [[R, "x", None]]),
                ("ok", 2, [[R, "x", [1]]])),
        history(("invoke", 1, [[A, "x", 1]]), ("fail", 1), ("invoke", 2, [[R, "x", None]]),
                ("ok", 2, [[R, "x", []]])),
    ),
    "G1b": (
        concurrent((1, [[A, "x", 1], [A, "x", 2]]), (2, [[R, "x", [1]]])),
        concurrent((1, [[A, "x", 1], [A, "x", 2]]), (2, [[R, "x", [1, 2]]])),
    ),
    "G1c": (
        concurrent((1, [[A, "x", 1], [R, "y", [1]]]), (2, [[A, "y", 1], [R, "x", [1]]])),
        serial((1, [[A, "x", 1], [R, "y", []]]), (2, [[A, "y", 1], [R, "x", [1]]])),
    ),
    "G-single": (
        concurrent((1, [[R, "x", []], [R, "y", [1]]]), (2, [[A, "x", 1], [A, "y", 1]]),
                   then=[(3, [[R, "x", [1]]])]),
        serial((2, [[A, "x", 1], [A, "y", 1]]), (1, [[R, "x", [1]], [R, "y", [1]]]),
               (3, [[R, "x", [1]]])),
    ),
    "G2-item": (
        concurrent((1, [[R, "x", []], [R, "y", []], [A, "x", 1]]),
                   (2, [[R, "x", []], [R, "y", []], [A, "y", 1]]),
                   then=[(3, [[R, "x", [1]], [R, "y", [1]]])]),
        serial((1, [[R, "x", []], [R, "y", []], [A, "x", 1]]),
               (2, [[R, "x", [1]], [R, "y", []], [A, "y", 1]]),
               (3, [[R, "x", [1]], [R, "y", [1]]])),
    ),
    "internal": (
        serial((1, [[A, "x", 1], [R, "x", []]])),
        serial((1, [[A, "x", 1], [R, "x", [1]]])),
    ),
    "duplicate-elements": (
        serial((1, [[A, "x", 1]]), (2, [[R, "x", [1, 1]]])),
        serial((1, [[A, "x", 1]]), (2, [[R, "x", [1]]])),
    ),
    "incompatible-order": (
        concurrent((1, [[A, "x", 1]]), (2, [[A, "x", 2]]), then=[(3, [[R, "x", [1, 2]]]), (4, [[R, "x", [2, 1]]])]),
        concurrent((1, [[A, "x", 1]]), (2, [[A, "x", 2]]), then=[(3, [[R, "x", [1, 2]]]), (4, [[R, "x", [1, 2]]])]),
    ),
    "G-single-realtime": (
        serial((1, [[A, "x", 1]]), (2, [[R, "x", []]]), (3, [[R, "x", [1]]])),
        serial((1, [[A, "x", 1]]), (2, [[R, "x", [1]]]), (3, [[R, "x", [1]]])),
    ),
}

RW_REGISTER_CASES = {
    "G0": (
        concurrent((1, [[W, "y", 1], [R, "x", 2], [W, "x", 1]]), (2, [[W, "x", 2], [R, "y", 1], [W, "y", 2]])),
        serial((1, [[W, "y", 1], [R, "x", None], [W, "x", 1]]), (2, [[W, "x", 2], [R, "y", 1], [W, "y", 2]])),
    ),
    "G1a": (
        history(("invoke", 1, [[W, "x", 1]]), ("fail", 1), ("invoke", 2, [[R, "x", None]]),
                ("ok", 2, [[R, "x", 1]])),
        history(("invoke", 1, [[W, "x", 1]]), ("fail", 1), ("invoke", 2, [[R, "x", None]]),
                ("ok", 2, [[R, "x", None]])),
    ),
    "G1b": (
        concurrent((1, [[W, "x", 1], [W, "x", 2]]), (2, [[R, "x", 1]])),
        concurrent((1, [[W, "x", 1], [W, "x", 2]]), (2, [[R, "x", 2]])),
    ),
    "G1c": (
        concurrent((1, [[W, "x", 1], [R, "y", 1]]), (2, [[W, "y", 1], [R, "x", 1]])),
        serial((1, [[W, "x", 1], [R, "y", None]]), (2, [[W, "y", 1], [R, "x", 1]])),
    ),
    "G-single": (
        concurrent((1, [[R, "x", None], [R, "y", 1]]), (2, [[W, "x", 1], [W, "y", 1]])),
        serial((2, [[W, "x", 1], [W, "y", 1]]), (1, [[R, "x", 1], [R, "y", 1]])),
    ),
    "G2-item": (
        concurrent((1, [[R, "x", None], [W, "y", 1]]), (2, [[R, "y", None], [W, "x", 1]])),
        serial((1, [[R, "x", None], [W, "y", 1]]), (2, [[R, "y", 1], [W, "x", 1]])),
    ),
    "internal": (
        serial((1, [[W, "x", 1], [R, "x", 2]])),
        serial((1, [[W, "x", 1], [R, "x", 1]])),
    ),
    "G-single-realtime": (
        serial((1, [[W, "x", 1]]), (2, [[R, "x", None]])),
        serial((1, [[W, "x", 1]]), (2, [[R, "x", 1]])),
    ),
}


@pytest.mark.parametrize("anomaly", sorted(LIST_APPEND_CASES))
def test_list_append_anomaly_found(anomaly):
    bad, _ = LIST_APPEND_CASES[anomaly]
    result = check_list_append(bad)
    assert result["verdict"] == "invalid"
    assert result["anomaly_types"] == [anomaly]
    found = next(a for a in result["anomalies"] if a["type"] == anomaly)
    assert found["explanation"]
    assert result["ruled_out"]


@pytest.mark.parametrize("anomaly", sorted(LIST_APPEND_CASES))
def test_list_append_clean_serial_twin_is_valid(anomaly):
    _, good = LIST_APPEND_CASES[anomaly]
    result = check_list_append(good)
    assert result == {**result, "verdict": "valid", "anomaly_types": [], "ruled_out": []}


@pytest.mark.parametrize("anomaly", sorted(RW_REGISTER_CASES))
def test_rw_register_anomaly_found(anomaly):
    bad, _ = RW_REGISTER_CASES[anomaly]
    result = check_rw_register(bad)
    assert result["verdict"] == "invalid"
    assert anomaly in result["anomaly_types"], result["anomaly_types"]


@pytest.mark.parametrize("anomaly", sorted(RW_REGISTER_CASES))
def test_rw_register_clean_serial_twin_is_valid(anomaly):
    _, good = RW_REGISTER_CASES[anomaly]
    result = check_rw_register(good)
    assert result["verdict"] == "valid", result["anomalies"]


def test_cycle_explained_in_words_and_as_graph():
    bad, _ = LIST_APPEND_CASES["G1c"]
    anomaly = next(a for a in check_list_append(bad)["anomalies"] if a["type"] == "G1c")
    assert {e["type"] for e in anomaly["edges"]} == {"wr"}
    names = {t["name"] for t in anomaly["transactions"]}
    assert {e["from"] for e in anomaly["edges"]} <= names
    assert "read T" in anomaly["explanation"] and anomaly["explanation"].endswith("a contradiction: T1 < T1.")


def test_g_single_rules_out_snapshot_isolation_but_g2_does_not():
    single = check_list_append(LIST_APPEND_CASES["G-single"][0])["ruled_out"]
    g2 = check_list_append(LIST_APPEND_CASES["G2-item"][0])["ruled_out"]
    assert "snapshot-isolation" in single and "serializable" in single
    assert "snapshot-isolation" not in g2 and "serializable" in g2
    realtime = check_list_append(LIST_APPEND_CASES["G-single-realtime"][0])["ruled_out"]
    assert realtime == ["strict-serializable"]


def test_cycle_search_budget_reports_unknown():
    ops = list_append_history(seed=3, n_txns=400, processes=8, keys=3, corrupt=True)
    result = check_list_append(ops, steps_per_component=1)
    assert "cycle-search-timeout" in result["anomaly_types"]


@pytest.mark.parametrize("seed", range(5))
def test_generated_serializable_list_append_histories_are_valid(seed):
    ops = list_append_history(seed=seed, n_txns=300, processes=6, keys=4)
    assert check_list_append(ops)["verdict"] == "valid"


@pytest.mark.parametrize("seed", range(5))
def test_generated_serializable_rw_register_histories_are_valid(seed):
    ops = list_append_history(seed=seed, n_txns=300, processes=6, keys=4, registers=True)
    assert check_rw_register(ops)["verdict"] == "valid"
