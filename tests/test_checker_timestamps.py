"""The timestamps checker: ok writes' hybrid times must follow real-time order."""

import pytest

from reports.checkers.check import check_history
from reports.checkers.timestamps import check_timestamps
from reports.history import Op, parse_edn_history, read_jsonl, write_edn, write_jsonl


def history(*ops):
    """ops: (process, f, invoke time, complete time, hybrid_time or None, type)."""
    events = []
    for p, f, t0, t1, ht, typ in ops:
        events.append((t0, 0, Op(0, "invoke", p, f, 1, time=t0, key="k")))
        events.append((t1, 1, Op(0, typ, p, f, 1, time=t1, key="k", hybrid_time=ht)))
    events.sort(key=lambda e: (e[0], e[1]))
    out = []
    for i, (_, _, op) in enumerate(events):
        op.index = i
        out.append(op)
    return out


def test_real_time_ordered_timestamps_are_valid():
    ops = history((0, "write", 0, 10, 100, "ok"), (1, "write", 20, 30, 200, "ok"),
                  (2, "write", 40, 50, 300, "ok"))
    r = check_timestamps(ops)
    assert r["verdict"] == "valid" and r["writes"] == 3 and not r["anomalies"]


def test_concurrent_writes_may_carry_timestamps_in_any_order():
    # overlapping in real time: neither precedes the other
    ops = history((0, "write", 0, 30, 200, "ok"), (1, "write", 10, 40, 100, "ok"))
    assert check_timestamps(ops)["verdict"] == "valid"


def test_a_later_write_with_a_smaller_timestamp_is_an_anomaly_naming_both():
    ops = history((0, "write", 0, 10, 500, "ok"), (1, "write", 20, 30, 600, "ok"),
                  (2, "write", 40, 50, 550, "ok"))
    r = check_timestamps(ops)
    assert r["verdict"] == "invalid"
    (a,) = r["anomalies"]
    assert a["type"] == "timestamp-order"
    assert (a["before"]["hybrid_time"], a["after"]["hybrid_time"]) == (600, 550)
    assert a["before"]["process"] == 1 and a["after"]["process"] == 2


def test_equal_timestamps_in_real_time_order_are_an_anomaly():
    ops = history((0, "write", 0, 10, 500, "ok"), (1, "write", 20, 30, 500, "ok"))
    assert check_timestamps(ops)["verdict"] == "invalid"


def test_failed_and_unknown_ops_and_untimestamped_ops_are_not_judged():
    ops = history((0, "write", 0, 10, 500, "ok"), (1, "write", 20, 30, None, "fail"),
                  (2, "read", 40, 50, None, "ok"), (3, "write", 60, 70, 600, "ok"))
    r = check_timestamps(ops)
    assert r["verdict"] == "valid" and r["writes"] == 2


def test_a_history_without_timestamps_is_valid_with_a_note_and_keeps_its_checks():
    ops = history((0, "write", 0, 10, None, "ok"), (1, "read", 20, 30, None, "ok"))
    r = check_timestamps(ops)
    assert r["verdict"] == "valid" and "note" in r
    # check_history leaves old histories' results exactly as before: no timestamps result
    assert [x["checker"] for x in check_history(ops, "cas-register")["results"]] != []
    assert all(x.get("checker") != "timestamps" for x in check_history(ops, "cas-register")["results"])


def test_check_history_runs_it_for_any_model_when_writes_carry_timestamps():
    ops = history((0, "write", 0, 10, 500, "ok"), (1, "write", 20, 30, 400, "ok"))
    res = check_history(ops, "cas-register")
    (ts,) = [x for x in res["results"] if x.get("checker") == "timestamps"]
    assert ts["verdict"] == "invalid" and res["verdict"] == "invalid"


def test_sweep_scales_and_finds_the_single_violation():
    n = 20000
    ops = history(*[(i, "write", 10 * i, 10 * i + 5, 1000 + i, "ok") for i in range(n)],
                  (n, "write", 10 * n, 10 * n + 5, 1000 + n // 2, "ok"))
    r = check_timestamps(ops)
    assert r["writes"] == n + 1 and len(r["anomalies"]) == 1


@pytest.mark.parametrize("fmt", ["jsonl", "edn"])
def test_hybrid_time_round_trips_through_history_files(tmp_path, fmt):
    ops = history((0, "write", 0, 10, 123456789, "ok"))
    path = tmp_path / f"h.{fmt}"
    if fmt == "jsonl":
        write_jsonl(ops, path)
        back = read_jsonl(path)
    else:
        write_edn(ops, path)
        back = parse_edn_history(path.read_text())
    assert [o.hybrid_time for o in back] == [None, 123456789]


def test_order_is_judged_per_key_only():
    def keyed(*ops):  # as history(), each op on the key given last
        out = history(*[o[:6] for o in ops])
        by_proc = {o[0]: o[6] for o in ops}
        for op in out:
            op.key = by_proc[op.process]
        return out

    # across keys a and b the later write has the smaller timestamp (skewed clocks may do that);
    # within key a the order holds
    ops = keyed((0, "write", 0, 10, 500, "ok", "a"), (1, "write", 20, 30, 400, "ok", "b"),
                (2, "write", 40, 50, 600, "ok", "a"))
    r = check_timestamps(ops)
    assert r["verdict"] == "valid" and r["scope"] == "per key" and r["writes"] == 3
    bad = keyed((0, "write", 0, 10, 500, "ok", "a"), (1, "write", 20, 30, 400, "ok", "b"),
                (2, "write", 40, 50, 450, "ok", "a"))
    (a,) = check_timestamps(bad)["anomalies"]
    assert (a["before"]["key"], a["after"]["key"]) == ("a", "a")
    # ops without a key (transactions) are counted, not judged
    txns = keyed((0, "txn", 0, 10, 500, "ok", None), (1, "txn", 20, 30, 400, "ok", None))
    r = check_timestamps(txns)
    assert r["verdict"] == "valid" and r["writes"] == 0 and "2 ok op(s) without a key" in r["note"]


def test_across_keys_judges_pairs_on_different_keys_and_transactions():
    """Commit-wait's promise spans tablets: with `across_keys`, a write on key b invoked after
    one on key a completed must carry a larger timestamp; per key the pair is not compared."""
    ops = history((0, "write", 0, 10, 500, "ok"), (1, "write", 20, 30, 400, "ok"))
    ops[2].key = ops[3].key = "b"
    ops[3].key = None  # a transaction: no key
    assert check_timestamps(ops)["verdict"] == "valid"
    r = check_timestamps(ops, across_keys=True)
    assert (r["verdict"], r["checker"], r["scope"], r["writes"]) == (
        "invalid", "commit-wait", "across keys", 2)
    (a,) = r["anomalies"]
    assert (a["before"]["hybrid_time"], a["after"]["hybrid_time"]) == (500, 400)


def test_each_process_s_timestamps_must_rise_in_its_own_order_across_keys():
    """Both external consistency modes promise a client its own order, whatever the clocks
    (the timestamp it propagates is witnessed first): a process's later write with a smaller
    timestamp is a client-order anomaly even on another key, where the per-key check has
    nothing to say; two processes' writes on different keys may carry any timestamps."""
    from reports.checkers.timestamps import check_client_order

    def op(i, p, key, ht, typ="ok"):
        return [Op(2 * i, "invoke", p, "write", i, time=2 * i, key=key),
                Op(2 * i + 1, typ, p, "write", i, time=2 * i + 1, key=key, hybrid_time=ht)]

    fine = [*op(0, 0, "a", 500), *op(1, 1, "b", 100), *op(2, 0, "b", 600), *op(3, 1, "a", 200),
            *op(4, 0, "c", None, "info")]
    assert check_client_order(fine)["verdict"] == "valid"
    assert check_client_order(fine)["writes"] == 4
    bad = [*op(0, 0, "a", 500), *op(1, 1, "b", 100), *op(2, 0, "b", 400)]
    r = check_client_order(bad)
    assert r["verdict"] == "invalid" and len(r["anomalies"]) == 1
    a = r["anomalies"][0]
    assert a["type"] == "client-order" and (a["before"]["index"], a["after"]["index"]) == (1, 5)
    assert check_timestamps(bad)["verdict"] == "valid"  # per key, nothing is out of order
    out = check_history(bad, "register")
    assert out["verdict"] == "invalid" and "client-order" in {x["checker"] for x in out["results"]}
