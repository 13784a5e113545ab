"""The Elle checkers in general: one history per anomaly class with a clean serial twin, for both
list-append and rw-register; generated serializable histories; the result's shape and words;
and the consistency-model lattice the verdicts are judged against."""

from __future__ import annotations

import pytest
from txn_histories import concurrent, history, serial

from reports.checkers import consistency
from reports.checkers.elle import check_list_append, check_rw_register
from reports.checkers.generate import list_append_history

A, R, W = "append", "r", "w"

# anomaly -> (history showing it, a serial twin Elle judges valid)
LIST_APPEND_CASES = {
    "G0": (
        concurrent((1, [[A, "x", 1], [A, "y", 1]]), (2, [[A, "x", 2], [A, "y", 2]]),
                   then=[(3, [[R, "x", [1, 2]], [R, "y", [2, 1]]])]),
        serial((1, [[A, "x", 1], [A, "y", 1]]), (2, [[A, "x", 2], [A, "y", 2]]),
               (3, [[R, "x", [1, 2]], [R, "y", [1, 2]]])),
    ),
    "G1a": (
        history(("invoke", 1, [[A, "x", 1]]), ("fail", 1), ("invoke", 2, [[R, "x", None]]),
                ("ok", 2, [[R, "x", [1]]]), ("invoke", 3, [[A, "x", 2]]), ("ok", 3)),
        history(("invoke", 1, [[A, "x", 1]]), ("fail", 1), ("invoke", 2, [[R, "x", None]]),
                ("ok", 2, [[R, "x", []]]), ("invoke", 3, [[A, "x", 2]]), ("ok", 3)),
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
        serial((1, [[A, "x", 1], [R, "x", []]]), (2, [[R, "x", [1]]])),
        serial((1, [[A, "x", 1], [R, "x", [1]]]), (2, [[R, "x", [1]]])),
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
    "G1a": (
        history(("invoke", 1, [[W, "x", 1]]), ("fail", 1), ("invoke", 2, [[R, "x", None]]),
                ("ok", 2, [[R, "x", 1]]), ("invoke", 3, [[W, "x", 2]]), ("ok", 3)),
        history(("invoke", 1, [[W, "x", 1]]), ("fail", 1), ("invoke", 2, [[R, "x", None]]),
                ("ok", 2, [[R, "x", None]]), ("invoke", 3, [[W, "x", 2]]), ("ok", 3)),
    ),
    "G1b": (
        concurrent((1, [[W, "x", 1], [W, "x", 2]]), (2, [[R, "x", 1]])),
        serial((1, [[W, "x", 1], [W, "x", 2]]), (2, [[R, "x", 2]])),
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
        serial((1, [[W, "x", 1], [R, "x", 2]]), (2, [[R, "x", 1]])),
        serial((1, [[W, "x", 1], [R, "x", 1]]), (2, [[R, "x", 1]])),
    ),
    "G-single-realtime": (
        serial((1, [[W, "x", 1]]), (2, [[R, "x", None]])),
        serial((1, [[W, "x", 1]]), (2, [[R, "x", 1]])),
    ),
}

CHECKERS = [(check_list_append, name, case) for name, case in LIST_APPEND_CASES.items()] + \
           [(check_rw_register, name, case) for name, case in RW_REGISTER_CASES.items()]
IDS = [f"{c.__name__}-{name}" for c, name, _ in CHECKERS]


@pytest.mark.parametrize("check, anomaly, case", CHECKERS, ids=IDS)
def test_anomaly_found_and_explained(check, anomaly, case):
    result = check(case[0])
    assert result["verdict"] == "invalid"
    assert anomaly in result["anomaly_types"], result["anomaly_types"]
    found = next(a for a in result["anomalies"] if a["type"] == anomaly)
    assert found["explanation"] and result["ruled_out"] and result["not"]


@pytest.mark.parametrize("check, anomaly, case", CHECKERS, ids=IDS)
def test_clean_serial_twin_is_valid(check, anomaly, case):
    result = check(case[1])
    assert result == {**result, "verdict": "valid", "anomaly_types": [], "ruled_out": [], "not": []}
    assert result["possible"] == ["strict-serializable"]


def test_result_shape():
    result = check_list_append(LIST_APPEND_CASES["G1c"][0])
    assert set(result) == {"checker", "verdict", "consistency_model", "anomaly_types", "anomalies", "not",
                           "also_not", "ruled_out", "possible", "transactions"}
    assert result["consistency_model"] == "strict-serializable" and result["transactions"] == 2


def test_cycle_explained_in_words_and_as_graph():
    anomaly = next(a for a in check_list_append(LIST_APPEND_CASES["G1c"][0])["anomalies"] if a["type"] == "G1c")
    assert {e["type"] for e in anomaly["edges"]} == {"wr"}
    names = {t["name"] for t in anomaly["transactions"]}
    assert {e["from"] for e in anomaly["edges"]} <= names
    assert "read T" in anomaly["explanation"]


def test_anti_dependency_on_the_initial_state_is_worded_as_such():
    result = check_list_append(LIST_APPEND_CASES["G2-item"][0])
    anomaly = next(a for a in result["anomalies"] if a["type"] == "G2-item")
    assert "initial (empty) state" in anomaly["explanation"]


def test_g_single_rules_out_snapshot_isolation_but_g2_does_not():
    single = check_list_append(LIST_APPEND_CASES["G-single"][0])["ruled_out"]
    g2 = check_list_append(LIST_APPEND_CASES["G2-item"][0])["ruled_out"]
    assert "snapshot-isolation" in single and "serializable" in single
    assert "snapshot-isolation" not in g2 and "serializable" in g2
    realtime = check_list_append(LIST_APPEND_CASES["G-single-realtime"][0])
    assert realtime["ruled_out"] == ["strict-serializable", "strong-snapshot-isolation"]
    assert realtime["not"] == ["strong-snapshot-isolation"]


def test_weaker_model_hides_what_it_allows():
    bad = LIST_APPEND_CASES["G2-item"][0]
    for model, verdict in (("serializable", "invalid"), ("snapshot-isolation", "valid"), ("read-committed", "valid")):
        result = check_list_append(bad, consistency_model=model)
        assert result["verdict"] == verdict, model
        assert result["anomaly_types"] == ([] if verdict == "valid" else ["G2-item"])
        assert result["not"] == ["repeatable-read"]  # what was found still rules models out


def test_cycle_search_budget_reports_unknown():
    ops = list_append_history(seed=3, n_txns=400, processes=8, keys=3, corrupt=True)
    result = check_list_append(ops, steps_per_component=0, seconds_per_component=0.0)
    assert "cycle-search-timeout" in result["anomaly_types"]


@pytest.mark.parametrize("seed", range(4))
def test_generated_serializable_list_append_histories_are_valid(seed):
    ops = list_append_history(seed=seed, n_txns=300, processes=6, keys=4)
    result = check_list_append(ops)
    assert result["verdict"] == "valid", result["anomaly_types"]


@pytest.mark.parametrize("seed", range(4))
def test_generated_serializable_rw_register_histories_are_valid(seed):
    ops = list_append_history(seed=seed, n_txns=300, processes=6, keys=4, registers=True)
    for options in ({}, {"wfr_keys": True, "sequential_keys": True, "linearizable_keys": True}):
        result = check_rw_register(ops, **options)
        assert result["verdict"] == "valid", (options, result["anomaly_types"])


def test_corrupted_history_is_invalid():
    ops = list_append_history(seed=3, n_txns=400, processes=8, keys=3, corrupt=True)
    assert check_list_append(ops)["verdict"] == "invalid"


# ------------------------------------------------------------------------------------ lattice


@pytest.mark.parametrize("anomalies, weakest", [
    (["G0"], ["read-uncommitted"]),
    (["G1a"], ["read-committed"]),
    (["dirty-update"], ["read-committed"]),
    (["G1c-process"], ["strong-session-read-committed"]),
    (["G-single"], ["consistent-view", "repeatable-read"]),
    (["G-single-process"], ["strong-session-snapshot-isolation"]),
    (["G-single-realtime"], ["strong-snapshot-isolation"]),
    (["G-nonadjacent"], ["repeatable-read", "snapshot-isolation"]),
    (["G2-item"], ["repeatable-read"]),
    (["lost-update"], ["ROLA", "cursor-stability"]),
    (["internal"], ["read-atomic"]),
    (["duplicate-elements"], ["read-uncommitted"]),
    (["cycle-search-timeout", "empty-transaction-graph"], []),
])
def test_weakest_models_ruled_out(anomalies, weakest):
    assert consistency.boundary(anomalies)["not"] == weakest


def test_models_imply_weaker_models():
    assert "serializable" in consistency.boundary(["G2-item"])["also_not"]
    assert "strict-serializable" in consistency.boundary(["G0"])["also_not"]
    assert "snapshot-isolation" not in consistency.ruled_out(["G2-item"])
    assert consistency.boundary([])["possible"] == ["strict-serializable"]
    assert "strong-snapshot-isolation" in consistency.boundary(["G2-item"])["possible"]


def test_prohibited_anomalies_follow_implications():
    assert "G2-item" in consistency.anomalies_prohibited_by("serializable")
    assert "G2-item" not in consistency.anomalies_prohibited_by("snapshot-isolation")
    assert "G-single-realtime" in consistency.anomalies_prohibited_by("strict-serializable")
    assert "G-single-realtime" not in consistency.anomalies_prohibited_by("serializable")
    assert consistency.anomalies_prohibited_by("PL-3") == consistency.anomalies_prohibited_by("serializable")


@pytest.mark.parametrize("types, model, verdict", [
    (["G2-item"], "strict-serializable", "invalid"),
    (["G2-item"], "snapshot-isolation", "valid"),
    (["G-single"], "repeatable-read", "invalid"),
    (["G-single-realtime"], "serializable", "valid"),
    (["G1a", "empty-transaction-graph"], "read-uncommitted", "unknown"),
    (["cycle-search-timeout"], "strict-serializable", "unknown"),
    (["G0", "cycle-search-timeout"], "strict-serializable", "invalid"),
    ([], "read-committed", "valid"),
])
def test_verdict(types, model, verdict):
    assert consistency.verdict(types, model) == verdict


def test_order_edges_the_model_needs():
    assert consistency.needs_order("strict-serializable") == "realtime"
    assert consistency.needs_order("strong-session-serializable") == "process"
    assert consistency.needs_order("serializable") is None


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="unknown consistency model"):
        consistency.verdict([], "eventual-awesomeness")
