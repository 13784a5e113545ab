"""Verdicts the Elle checkers must give as Elle gives them: the wrong verdicts once reported for
Tessera, Elle's reference histories, and Elle's own list-append and rw-register test cases
re-expressed as Tessera histories."""

from __future__ import annotations

import re

import pytest
from txn_histories import concurrent, history, serial

from reports.checkers.elle import check_list_append, check_rw_register
from reports.history import Op, parse_edn_history


def mops(text: str) -> list:
    """Elle's test shorthand: "ax1ry12" appends 1 to x and reads y = [1, 2]; "rx" reads nil."""
    out = []
    for f, k, digits in re.findall(r"([ar])([xyztu])(\d*)", text):
        if f == "a":
            out.append(["append", k, int(digits)])
        else:
            out.append(["r", k, [int(d) for d in digits] if digits else None])
    return out


def oks(*texts, process=0, type="ok") -> list[Op]:
    """Completions only, as in many of Elle's tests: no invokes, so no realtime order."""
    return [Op(index=i, type=type, f="txn", value=mops(t), process=process) for i, t in enumerate(texts)]


def pairs(*texts) -> list[Op]:
    """Each txn invoked and completed ok by process 0, one after another (Elle's `pair`)."""
    return serial(*[(0, mops(t)) for t in texts])


def types(result: dict) -> list[str]:
    return result["anomaly_types"]


# ----------------------------------------------------------------- wrong verdicts once given


def test_read_of_empty_list_after_completed_append_is_g_single_realtime():
    result = check_list_append(pairs("ax1", "rx"))
    assert result["verdict"] == "invalid" and types(result) == ["G-single-realtime"]
    assert check_list_append(pairs("ax1", "rx"), consistency_model="serializable")["verdict"] == "valid"


def test_write_skew_is_g2_item():
    ops = concurrent((1, [["r", "x", []], ["append", "y", 1]]), (2, [["r", "y", []], ["append", "x", 1]]))
    result = check_list_append(ops)
    assert result["verdict"] == "invalid" and types(result) == ["G2-item"]
    assert result["not"] == ["repeatable-read"]
    assert check_list_append(ops, consistency_model="snapshot-isolation")["verdict"] == "valid"


def test_read_of_an_element_nobody_appended_is_a_garbage_read():
    result = check_list_append(pairs("ax1", "rx9"))
    assert result["verdict"] == "invalid" and "garbage-read" in types(result)
    assert result["not"] == ["read-committed"]


def test_reading_own_append_before_making_it_is_a_future_read():
    result = check_list_append(pairs("rx1ax1"))
    assert types(result) == ["empty-transaction-graph", "future-read"] and result["verdict"] == "invalid"
    assert check_list_append(pairs("rx1ax1"), consistency_model="read-committed")["verdict"] == "invalid"
    assert check_list_append(pairs("rx1ax1"), consistency_model="read-uncommitted")["verdict"] == "unknown"


def test_nil_read_is_the_initial_empty_version():
    ops = serial((1, [["append", "x", 1]]), (2, [["r", "x", None]]), (3, [["r", "x", [1]]]))
    result = check_list_append(ops)
    assert result["verdict"] == "invalid" and types(result) == ["G-single-realtime"]


def test_append_then_nil_read_in_one_txn_is_internal():
    result = check_list_append(pairs("ax1rx"))
    assert "internal" in types(result) and result["verdict"] == "invalid"


def test_realtime_edges_lead_into_info_transactions():
    # T1 reads x = [1] and completes; only then is T2, which appends 1, invoked; T2 ends info.
    ops = history(("invoke", 1, [["r", "x", None]]), ("ok", 1, [["r", "x", [1]]]),
                  ("invoke", 2, [["append", "x", 1]]), ("info", 2))
    result = check_list_append(ops)
    assert result["verdict"] == "invalid" and types(result) == ["G1c-realtime"]
    # and never out of them: an info txn never completed, so nothing follows it in real time
    after = history(("invoke", 2, [["append", "x", 1]]), ("info", 2), ("invoke", 1, [["r", "x", None]]),
                    ("ok", 1, [["r", "x", []]]))
    assert check_list_append(after)["verdict"] != "invalid"


def test_history_of_failed_transactions_is_unknown():
    ops = history(("invoke", 1, [["append", "x", 1]]), ("fail", 1), ("invoke", 2, [["r", "x", None]]),
                  ("fail", 2))
    result = check_list_append(ops)
    assert result["verdict"] == "unknown" and types(result) == ["empty-transaction-graph"]


SI_WITHOUT_G_SINGLE = """
{:index 10, :time 0, :type :invoke, :process 2, :f :txn, :value [[:append 9 2]]}
{:index 11, :time 0, :type :ok, :process 2, :f :txn, :value [[:append 9 2]]}
{:index 20, :time 0, :type :invoke, :process 4, :f :txn, :value [[:append 8 1] [:r 9 nil]]}
{:index 21, :time 0, :type :ok, :process 4, :f :txn, :value [[:append 8 1] [:r 9 nil]]}
{:index 30, :time 0, :type :invoke, :process 7, :f :txn, :value [[:r 6 nil] [:r 8 nil] [:append 9 5]]}
{:index 31, :time 0, :type :ok, :process 7, :f :txn, :value [[:r 6 nil] [:r 8 nil] [:append 9 5]]}
{:index 40, :time 0, :type :invoke, :process 9, :f :txn, :value [[:append 6 2] [:r 9 nil]]}
{:index 41, :time 0, :type :ok, :process 9, :f :txn, :value [[:append 6 2] [:r 9 [2]]]}
"""


def test_elle_snapshot_isolation_without_g_single_is_exactly_g2_item():
    result = check_list_append(parse_edn_history(SI_WITHOUT_G_SINGLE),
                               consistency_model=["snapshot-isolation", "repeatable-read"])
    assert types(result) == ["G2-item"] and result["not"] == ["repeatable-read"]
    assert result["verdict"] == "invalid"
    assert check_list_append(parse_edn_history(SI_WITHOUT_G_SINGLE),
                             consistency_model="snapshot-isolation")["verdict"] == "valid"


PAPER_EXAMPLE = [
    [["append", 253, 1], ["append", 253, 3], ["append", 253, 4], ["append", 255, 2], ["append", 255, 3],
     ["append", 255, 4], ["append", 255, 5], ["append", 256, 1], ["append", 256, 2]],
    [["append", 255, 8], ["r", 253, [1, 3, 4]]],
    [["append", 256, 4], ["r", 255, [2, 3, 4, 5, 8]], ["r", 256, [1, 2, 4]], ["r", 253, [1, 3, 4]]],
    [["append", 250, 10], ["r", 253, [1, 3, 4]], ["r", 255, [2, 3, 4, 5]], ["append", 256, 3]],
]


@pytest.mark.parametrize("model", ["strict-serializable", "strong-session-serializable", "serializable"])
def test_elle_paper_example_is_g_single_without_invented_process_edges(model):
    ops = []
    for value in PAPER_EXAMPLE:  # no :process, as in Elle's histories/paper-example.edn
        ops += [Op(index=len(ops), type="invoke", process=None, f="txn",
                   value=[[f, k, None if f == "r" else v] for f, k, v in value]),
                Op(index=len(ops) + 1, type="ok", process=None, f="txn", value=value)]
    result = check_list_append(ops, consistency_model=model)
    assert types(result) == ["G-single"] and result["verdict"] == "invalid"


# ------------------------------------------------------ Elle's list_append_test.clj, re-expressed


@pytest.mark.parametrize("texts", [("ax1",), ("rx",), ()])
def test_nothing_to_order_is_an_empty_transaction_graph(texts):
    assert types(check_list_append(oks(*texts))) == ["empty-transaction-graph"]


@pytest.mark.parametrize("texts, model", [
    (("ax1", "rx1"), "serializable"),
    (("rx", "ax1", "rx1"), "serializable"),   # anti-dependency on the initial state
    (("ax2", "ax1", "rx12"), "serializable"),
    (("az1ax1ay1", "rx1ay2", "ry12az3", "rz13"), "serializable"),  # Adya et al., figure 3
    (("rx", "ax1"), "serializable"),          # a single unread append is still ordered
    (("rx", "ax1", "ax2"), "serializable"),
    (("rxax1ax2", "rx12"), "strict-serializable"),  # one txn writing twice over its read
])
def test_serializable_histories_are_valid(texts, model):
    result = check_list_append(pairs(*texts) if model == "strict-serializable" else oks(*texts),
                               consistency_model=model)
    assert result["verdict"] == "valid", result["anomalies"]


def test_g0_write_cycle():
    result = check_list_append(oks("ax1ay1", "ax2ay2", "rx12ry21"), consistency_model="serializable")
    assert types(result) == ["G0"] and result["not"] == ["read-uncommitted"]
    cycle = next(a for a in result["anomalies"] if a["type"] == "G0")
    assert {e["type"] for e in cycle["edges"]} == {"ww"}


def test_g1a_aborted_read():
    ops = [Op(index=0, type="fail", process=0, f="txn", value=[["append", "x", 1]])] + oks("rx1")
    ops[1].index = 1
    result = check_list_append(ops, consistency_model="read-committed")
    assert types(result) == ["G1a", "empty-transaction-graph"] and result["verdict"] == "invalid"
    assert result["not"] == ["read-committed"]
    assert check_list_append(ops, consistency_model="read-uncommitted")["verdict"] == "unknown"


def test_g1a_every_read_of_a_failed_append():
    ops = oks("rx1ax2", "rx12ry3") + [Op(index=2, type="fail", process=0, f="txn", value=[["append", "x", 1]])]
    g1a = [a for a in check_list_append(ops)["anomalies"] if a["type"] == "G1a"]
    assert [(a["transactions"][0]["index"], a["element"]) for a in g1a] == [(0, 1), (1, 1)]


def test_g1b_intermediate_read_is_also_g_single():
    result = check_list_append(pairs("ax1ax2", "rx1"))
    assert types(result) == ["G-single", "G1b"]
    assert check_list_append(pairs("ax1ax2", "rx1"), consistency_model="read-committed")["verdict"] == "invalid"


def test_g1b_only_for_other_transactions_intermediate_appends():
    result = check_list_append(oks("rx1", "rx12ry3", "ax1ax2", "rx123"))
    assert [a["transactions"][0]["index"] for a in result["anomalies"] if a["type"] == "G1b"] == [0]
    assert "G1b" not in types(check_list_append(oks("ax1rx1ax2")))


def test_g1c_circular_information_flow():
    result = check_list_append(oks("ax1ry1", "ax2ay1", "rx12ry1"), consistency_model="serializable")
    assert types(result) == ["G1c"] and result["not"] == ["read-committed"]
    assert check_list_append(oks("ax1ry1", "ax2ay1", "rx12ry1"),
                             consistency_model="read-uncommitted")["verdict"] == "valid"


def test_g_single_read_skew():
    result = check_list_append(oks("ax1ay1", "ax2ry", "rx12"), consistency_model="serializable")
    assert types(result) == ["G-single"] and result["not"] == ["consistent-view", "repeatable-read"]


def test_g2_item_anti_dependency_cycle():
    h = oks("ax1ry", "ay1rx")
    assert check_list_append(h, consistency_model="read-committed")["verdict"] == "valid"
    for model in ("serializable", "repeatable-read"):
        result = check_list_append(h, consistency_model=model)
        assert types(result) == ["G2-item"] and result["verdict"] == "invalid"
        assert result["not"] == ["repeatable-read"]


def _strong_si_history(second_reader_process: int) -> list[Op]:
    return history(("invoke", 0, [["append", "x", 1]]), ("ok", 0),
                   ("invoke", 1, [["append", "x", 2]]), ("ok", 1),
                   ("invoke", second_reader_process, [["r", "x", None]]), ("ok", second_reader_process, [["r", "x", [1]]]),
                   ("invoke", 3, [["r", "x", None]]), ("ok", 3, [["r", "x", [1, 2]]]))


def test_strong_snapshot_isolation_violation_is_g_single_realtime():
    h = _strong_si_history(2)
    assert check_list_append(h, consistency_model="serializable")["verdict"] == "valid"
    result = check_list_append(h)
    assert types(result) == ["G-single-realtime"] and result["not"] == ["strong-snapshot-isolation"]
    edges = next(a for a in result["anomalies"] if a["type"] == "G-single-realtime")["edges"]
    assert sorted(e["type"] for e in edges) == ["realtime", "rw"]


def test_strong_session_snapshot_isolation_violation_is_g_single_process():
    h = _strong_si_history(1)
    assert check_list_append(h, consistency_model="serializable")["verdict"] == "valid"
    result = check_list_append(h, consistency_model="strong-session-snapshot-isolation")
    assert types(result) == ["G-single-process"] and result["not"] == ["strong-session-snapshot-isolation"]


def test_ops_without_process_have_no_session_order():
    h = [Op(index=op.index, type=op.type, process=None, f=op.f, value=op.value) for op in _strong_si_history(1)]
    assert check_list_append(h, consistency_model="strong-session-snapshot-isolation")["verdict"] == "valid"


def test_g_nonadjacent_process():
    h = history(("invoke", 0, [["r", "x", None], ["r", "z", None]]), ("ok", 0, [["r", "x", None], ["r", "z", [1]]]),
                ("invoke", 1, [["append", "x", 1]]), ("ok", 1),
                ("invoke", 1, [["r", "z", None]]), ("ok", 1, [["r", "z", None]]),
                ("invoke", 2, [["append", "z", 1]]), ("ok", 2))
    assert check_list_append(h, consistency_model="serializable")["verdict"] == "valid"
    result = check_list_append(h, consistency_model="strong-session-snapshot-isolation")
    assert types(result) == ["G-nonadjacent-process"]
    assert result["not"] == ["strong-session-snapshot-isolation"]


def test_contradictory_read_orders():
    result = check_list_append(oks("ax1ry1", "ax2", "ax3ay1", "rx13", "rx123"), consistency_model="read-committed")
    assert types(result) == ["G1c", "incompatible-order"] and result["not"] == ["read-committed"]
    case = next(a for a in result["anomalies"] if a["type"] == "incompatible-order")
    assert case["key"] == "x" and case["values"] == [[1, 3], [1, 2, 3]]


def _with_types(ops: list[Op], outcomes: list[str]) -> list[Op]:
    return [Op(index=op.index, type=t, process=i, f="txn", value=op.value) for i, (op, t) in enumerate(zip(ops, outcomes, strict=True))]


def test_dirty_update():
    direct = _with_types(oks("ax1", "ax2", "rx12"), ["fail", "ok", "ok"])
    result = check_list_append(direct, consistency_model="read-committed")
    # rx12 also reads the failed append: Elle finds that G1a too (its test only asks for dirty-update)
    assert types(result) == ["G1a", "dirty-update"] and result["not"] == ["read-committed"]
    assert next(a for a in result["anomalies"] if a["type"] == "dirty-update")["values"] == [1, 2]
    indirect = _with_types(oks("ax1", "ax2", "ax3", "rx123"), ["fail", "info", "ok", "ok"])
    case = next(a for a in check_list_append(indirect)["anomalies"] if a["type"] == "dirty-update")
    assert case["values"] == [1, 2, 3]
    none = _with_types(oks("ax1"), ["fail"])
    assert types(check_list_append(none)) == ["empty-transaction-graph"]


def test_duplicated_elements():
    result = check_list_append(oks("ax1ry1", "ax2ay1", "rx121"), consistency_model="read-committed")
    assert types(result) == ["G1c", "duplicate-elements"] and result["not"] == ["read-uncommitted"]


def test_internal_consistency_violation():
    result = check_list_append(oks("ax1ax2ax4", "ax3rx1234"))
    assert "internal" in types(result) and result["not"] == ["read-uncommitted"]
    internal = next(a for a in result["anomalies"] if a["type"] == "internal")
    assert internal["expected"] == ["...", 3]


@pytest.mark.parametrize("value, expected", [
    ([["r", "x", [1, 2]], ["append", "x", 3], ["r", "x", [1, 2]]], [1, 2, 3]),
    ([["r", "x", [1, 2]], ["append", "x", 3], ["r", "x", [0, 2, 3]]], [1, 2, 3]),
    ([["r", "x", [1, 2]], ["append", "x", 3], ["r", "x", [1, 2, 3, 4]]], [1, 2, 3]),
    ([["r", "x", [1, 2]], ["append", "x", 3], ["r", "x", [1]]], [1, 2, 3]),
    ([["append", "x", 3], ["r", "x", [1, 2, 3, 4]]], ["...", 3]),
    ([["append", "x", 3], ["r", "x", []]], ["...", 3]),
    ([["append", 0, 6], ["r", 0, None]], ["...", 6]),  # Elle's FaunaDB example
])
def test_internal_cases(value, expected):
    result = check_list_append([Op(index=0, type="ok", process=0, f="txn", value=value)])
    internal = [a for a in result["anomalies"] if a["type"] == "internal"]
    assert [a["expected"] for a in internal] == [expected]


def test_consistent_internal_reads():
    value = [["r", "y", [5, 6]], ["append", "x", 3], ["r", "x", [1, 2, 3]], ["append", "x", 4], ["r", "x", [1, 2, 3, 4]]]
    result = check_list_append([Op(index=0, type="ok", process=0, f="txn", value=value)])
    assert "internal" not in types(result)


@pytest.mark.parametrize("text, element", [("rx012ax1", 1), ("ax1rx01ax0ax3", 0)])
def test_future_reads(text, element):
    result = check_list_append(pairs(text))
    assert [a["element"] for a in result["anomalies"] if a["type"] == "future-read"] == [element]


def test_unobserved_appends_follow_the_longest_read():
    h = history(*[("invoke", p, mops(t)) for p, t in enumerate(("ax1ay1", "ax2ay2", "ax3ay3", "rx12", "ry2"))],
                *[("ok", p, mops(t)) for p, t in enumerate(("ax1ay1", "ax2ay2", "ax3ay3", "rx12", "ry2"))])
    result = check_list_append(h, consistency_model="serializable")
    assert types(result) == ["G-single", "G0"] and result["not"] == ["read-uncommitted"]


def test_g_nonadjacent_needs_nonadjacent_rw_edges():
    result = check_list_append(pairs("ax1", "rx1ry", "ay1", "ry1rx"), consistency_model="serializable")
    assert types(result) == ["G-nonadjacent"] and result["not"] == ["repeatable-read", "snapshot-isolation"]
    adjacent = pairs("rx5ay1", "ryaz2", "rzat3", "rt3au4", "ruax5")
    assert check_list_append(adjacent, consistency_model="snapshot-isolation")["verdict"] == "valid"


def test_lost_update():
    result = check_list_append(pairs("ax0", "rx0ax1", "rx0ax2"))
    assert types(result) == ["G2-item", "lost-update"] and result["not"] == ["ROLA", "cursor-stability"]
    lost = next(a for a in result["anomalies"] if a["type"] == "lost-update")
    assert lost["key"] == "x" and lost["value"] == [0] and len(lost["transactions"]) == 2


def test_wr_process_is_g1c_process():
    h = history(("invoke", 1, [["r", "x", None], ["append", "y", 1]]), ("ok", 1, [["r", "x", [1]], ["append", "y", 1]]),
                ("invoke", 2, [["r", "y", None]]), ("ok", 2, [["r", "y", [1]]]),
                ("invoke", 2, [["append", "x", 1]]), ("ok", 2))
    result = check_list_append(h, consistency_model="strong-session-snapshot-isolation")
    assert types(result) == ["G1c-process"] and result["not"] == ["strong-session-read-committed"]


def test_repeatable_read_catches_g_single_and_g_nonadjacent_over_items():
    single = check_list_append(pairs("ax1ay1", "rx1ry"), consistency_model="repeatable-read")
    assert types(single) == ["G-single"] and single["not"] == ["consistent-view", "repeatable-read"]
    assert single["verdict"] == "invalid"
    nonadjacent = check_list_append(pairs("ax1at1", "rx1ry", "ay1az2", "rz2rt"), consistency_model="repeatable-read")
    assert types(nonadjacent) == ["G-nonadjacent"] and nonadjacent["verdict"] == "invalid"


def test_duplicate_appends_make_the_history_unknown():
    result = check_list_append(pairs("ax1", "ax1"))
    assert result["verdict"] == "unknown" and types(result) == ["duplicate-appends"]


# ------------------------------------------------------ Elle's rw_register_test.clj, re-expressed


def rw(text: str) -> list:
    """"wx1ry2rz" writes x = 1, reads y = 2, reads z = nil."""
    return [["w" if f == "w" else "r", k, int(d) if d else None] for f, k, d in re.findall(r"([wr])([xyz])(\d*)", text)]


def rw_oks(*texts) -> list[Op]:
    return [Op(index=i, type="ok", f="txn", value=rw(t), process=0) for i, t in enumerate(texts)]


def test_rw_initial_state_precedes_every_version():
    result = check_rw_register(rw_oks("rx", "wx1"), consistency_model="serializable")
    assert result["verdict"] == "valid" and types(result) == []
    assert types(check_rw_register(rw_oks("rxwy1", "rywx1"), consistency_model="serializable")) == ["G2-item"]


def test_rw_cyclic_versions():
    # Writes-follow-reads orders 1 < 2 (T1) and 2 < 1 (T2): that source is left out.
    result = check_rw_register(rw_oks("rx1wx2", "rx2wx1"), consistency_model="read-uncommitted", wfr_keys=True)
    assert "cyclic-versions" in types(result) and result["verdict"] == "invalid"
    assert result["not"] == ["read-uncommitted"]


def test_rw_sequential_keys_order_versions_by_process():
    # process 0 writes x = 1, then x = 2 and y = 1; T3 reads y = 1 but still x = 1
    h = history(("invoke", 0, rw("wx1")), ("ok", 0), ("invoke", 0, rw("wx2wy1")), ("ok", 0),
                ("invoke", 1, rw("rxry")), ("ok", 1, rw("rx1ry1")))
    assert check_rw_register(h, consistency_model="serializable")["verdict"] == "valid"
    strict = check_rw_register(h, consistency_model="serializable", sequential_keys=True)
    assert types(strict) == ["G-single"]


def test_rw_contradictory_process_orders_are_cyclic_versions():
    h = history(("invoke", 0, rw("wx1")), ("ok", 0), ("invoke", 0, rw("wx2")), ("ok", 0),
                ("invoke", 1, rw("rx")), ("ok", 1, rw("rx2")), ("invoke", 1, rw("rx")), ("ok", 1, rw("rx1")))
    result = check_rw_register(h, consistency_model="serializable", sequential_keys=True)
    assert types(result) == ["cyclic-versions"] and result["anomalies"][0]["sources"] == [
        "initial-state", "sequential-keys"]


def test_rw_linearizable_keys_order_versions_by_realtime():
    h = serial((0, rw("wx1")), (1, rw("wx2")), (2, rw("rx1")))
    assert check_rw_register(h, consistency_model="serializable")["verdict"] == "valid"
    result = check_rw_register(h, consistency_model="serializable", linearizable_keys=True)
    assert result["verdict"] == "invalid"


def test_rw_aborted_and_intermediate_reads():
    failed = history(("invoke", 1, rw("wx1")), ("fail", 1), ("invoke", 2, rw("rx")), ("ok", 2, rw("rx1")))
    assert "G1a" in types(check_rw_register(failed))
    assert "G1b" in types(check_rw_register(rw_oks("wx1wx2", "rx1")))
    assert "G1b" not in types(check_rw_register(rw_oks("wx1rx1wx2")))


def test_rw_internal_and_lost_update():
    assert "internal" in types(check_rw_register(rw_oks("wx1rx2")))
    assert "internal" not in types(check_rw_register(rw_oks("rxrx1", "wx1")))
    lost = check_rw_register(rw_oks("wx0", "rx0wx1", "rx0wx2"))
    assert "lost-update" in types(lost) and lost["verdict"] == "invalid"


def rw_pairs(*txns) -> list[Op]:
    """(process, text) pairs, each invoked and completed ok before the next."""
    return serial(*[(p, rw(t)) for p, t in txns])


def test_rw_elle_g0_needs_sequential_keys():
    h = concurrent((0, rw("wx1wy2")), (1, rw("wx2wy1")))
    assert types(check_rw_register(h)) == ["empty-transaction-graph"]
    h = history(("invoke", 0, rw("wx1wy2")), ("ok", 0), ("invoke", 1, rw("wx2wy1")), ("ok", 1),
                ("invoke", 0, rw("rx")), ("ok", 0, rw("rx2")), ("invoke", 1, rw("ry")), ("ok", 1, rw("ry2")))
    result = check_rw_register(h, consistency_model="read-uncommitted", sequential_keys=True)
    assert types(result) == ["G0"] and result["not"] == ["read-uncommitted"]


def test_rw_elle_g1b_leaves_the_graph_empty():
    result = check_rw_register(rw_oks("wx1wx2", "rx1"), consistency_model="read-committed")
    assert types(result) == ["G1b", "empty-transaction-graph"] and result["not"] == ["read-committed"]


def test_rw_elle_g1c():
    h = rw_oks("wx1ry1", "wy1rx1")
    assert check_rw_register(h, consistency_model="read-uncommitted")["verdict"] == "valid"
    result = check_rw_register(h, consistency_model="read-committed")
    assert types(result) == ["G1c"] and result["not"] == ["read-committed"]


def test_rw_elle_g2_item_with_linearizable_keys():
    h = history(("invoke", 0, rw("rxry")), ("ok", 0, rw("rx1ry1")), ("invoke", 1, rw("rxwy2")),
                ("invoke", 2, rw("rywx2")), ("ok", 2, rw("ry1wx2")), ("ok", 1, rw("rx1wy2")))
    assert check_rw_register(h, consistency_model="read-committed", linearizable_keys=True)["verdict"] == "valid"
    result = check_rw_register(h, consistency_model="serializable", linearizable_keys=True)
    assert types(result) == ["G2-item"]


def test_rw_elle_internal_and_initial_state():
    assert types(check_rw_register(rw_oks("rx1rx2"), consistency_model="read-atomic")) == [
        "empty-transaction-graph", "internal"]
    h = history(("invoke", 0, rw("rxry")), ("invoke", 1, rw("wy1wx2")), ("ok", 1),
                ("ok", 0, rw("rxry1")))
    result = check_rw_register(h, consistency_model="serializable")
    assert types(result) == ["G-single"] and result["not"] == ["consistent-view", "repeatable-read"]


def test_rw_elle_writes_follow_reads():
    h = rw_oks("ry1wx1wy2", "rx1ry1")
    assert check_rw_register(h, consistency_model="serializable")["verdict"] == "valid"
    assert types(check_rw_register(h, consistency_model="serializable", wfr_keys=True)) == ["G-single"]


def test_rw_elle_cyclic_version_orders():
    sequential = check_rw_register(rw_pairs((0, "wx1"), (0, "wx2"), (0, "rx1")), sequential_keys=True)
    assert types(sequential) == ["cyclic-versions"] and sequential["not"] == ["read-uncommitted"]
    case = sequential["anomalies"][0]
    assert case["key"] == "x" and case["scc"] == [1, 2] and case["sources"] == ["initial-state", "sequential-keys"]
    linear = check_rw_register(rw_pairs((0, "wx1"), (1, "rx2"), (2, "rx1")), linearizable_keys=True)
    assert types(linear) == ["cyclic-versions"]
    assert linear["anomalies"][0]["sources"] == ["initial-state", "linearizable-keys"]


def test_rw_elle_lost_update():
    result = check_rw_register(rw_pairs((0, "rx0wx1"), (1, "rx0wx2")))
    assert types(result) == ["lost-update"] and result["not"] == ["ROLA", "cursor-stability"]


def test_rw_duplicate_writes_make_the_history_unknown():
    result = check_rw_register(rw_oks("wx1", "wx1", "rx1"))
    assert result["verdict"] == "unknown" and types(result) == ["duplicate-writes"]


# ------------------------------------------------------------------- through `tessera check`

REPORTED = {
    "g-single-realtime": pairs("ax1", "rx"),
    "write-skew": concurrent((1, mops("rxay1")), (2, mops("ryax1"))),
    "garbage-read": pairs("ax1", "rx9"),
    "future-read": pairs("rx1ax1"),
    "nil-then-read": pairs("ax1", "rx", "rx1"),
    "internal-nil": pairs("ax1rx"),
    "read-from-later-info": history(("invoke", 1, mops("rx")), ("ok", 1, mops("rx1")),
                                    ("invoke", 2, mops("ax1")), ("info", 2)),
}


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_cli_flags_each_reported_history(name, tmp_path, capsys):
    from harness.cli import main
    from reports.history import write_jsonl

    path = tmp_path / "history.jsonl"
    write_jsonl(REPORTED[name], path)
    assert main(["check", str(path), "--model", "list-append"]) == 1
    assert capsys.readouterr().out.startswith("INVALID")


def test_cli_consistency_model_and_all_failed_history(tmp_path, capsys):
    from harness.cli import main
    from reports.history import write_jsonl

    path = tmp_path / "history.jsonl"
    write_jsonl(REPORTED["write-skew"], path)
    assert main(["check", str(path), "--model", "list-append", "--consistency-model", "snapshot-isolation"]) == 0
    assert main(["check", str(path), "--model", "list-append", "--consistency-model", "serializable"]) == 1
    failed = tmp_path / "failed.jsonl"
    write_jsonl(history(("invoke", 1, mops("ax1")), ("fail", 1), ("invoke", 2, mops("rx")), ("fail", 2)), failed)
    capsys.readouterr()
    assert main(["check", str(failed), "--model", "list-append"]) == 2
    assert "empty-transaction-graph" in capsys.readouterr().out
