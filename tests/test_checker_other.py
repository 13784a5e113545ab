"""bank, set, counter and statistics checkers."""

from __future__ import annotations

from reports.checkers.bank import check_bank
from reports.checkers.counter import check_counter
from reports.checkers.sets import check_set
from reports.checkers.stats import stats
from reports.history import Op


def h(*events) -> list[Op]:
    """events: (process, type, f, value[, time])."""
    return [Op(index=i, process=e[0], type=e[1], f=e[2], value=e[3], time=e[4] if len(e) > 4 else None)
            for i, e in enumerate(events)]


def test_bank_total_conserved_and_no_negative_balances():
    ok = h((0, "invoke", "transfer", {"from": 0, "to": 1, "amount": 5}), (1, "invoke", "read", None),
           (1, "ok", "read", {0: 5, 1: 15}), (0, "ok", "transfer", {"from": 0, "to": 1, "amount": 5}))
    assert check_bank(ok, total=20)["verdict"] == "valid"
    wrong = h((1, "invoke", "read", None), (1, "ok", "read", {0: 5, 1: 10}))
    result = check_bank(wrong, total=20)
    assert result["verdict"] == "invalid" and result["errors"][0]["type"] == "wrong-total"
    assert result["errors"][0]["total"] == 15
    negative = h((1, "invoke", "read", None), (1, "ok", "read", {0: -5, 1: 25}))
    assert check_bank(negative, total=20)["errors"][0]["type"] == "negative-value"
    assert check_bank(negative, total=20, negative_allowed=True)["verdict"] == "valid"
    assert check_bank(h(), total=20)["verdict"] == "unknown"


def test_bank_infers_the_total_from_the_first_read():
    ops = h((1, "invoke", "read", None), (1, "ok", "read", {0: 10, 1: 10}), (1, "invoke", "read", None),
            (1, "ok", "read", {0: 10, 1: 11}))
    result = check_bank(ops)
    assert result["verdict"] == "invalid" and result["total"] == 20


def test_set_lost_unexpected_duplicated_and_recovered():
    ops = h((0, "invoke", "add", 1), (0, "ok", "add", 1), (0, "invoke", "add", 2), (0, "ok", "add", 2),
            (1, "invoke", "add", 3), (1, "info", "add", 3), (2, "invoke", "add", 4), (2, "fail", "add", 4),
            (3, "invoke", "read", None), (3, "ok", "read", [1, 2, 3]))
    result = check_set(ops)
    assert result["verdict"] == "valid" and result["recovered"] == [3] and result["lost"] == []
    ops[-1].value = [1, 3, 3, 9]
    result = check_set(ops)
    assert result["verdict"] == "invalid"
    assert result["lost"] == [2] and result["unexpected"] == [9]
    assert {e["type"] for e in result["errors"]} == {"lost", "unexpected", "duplicated"}
    assert check_set(ops[:8])["verdict"] == "unknown"  # no ok read at all


def test_counter_bounds():
    ops = h((0, "invoke", "add", 1), (0, "ok", "add", 1), (1, "invoke", "add", 2), (2, "invoke", "read", None),
            (2, "ok", "read", 3), (1, "info", "add", 2), (3, "invoke", "add", 5), (3, "fail", "add", 5),
            (2, "invoke", "read", None), (2, "ok", "read", 1))
    assert check_counter(ops)["verdict"] == "valid"
    ops[4].value = 4
    result = check_counter(ops)
    assert result["verdict"] == "invalid" and result["errors"][0]["upper"] == 3
    ops[4].value = 0
    assert check_counter(ops)["errors"][0]["lower"] == 1


def test_stats_counts_latencies_and_throughput():
    ops = h((0, "invoke", "read", None, 0), (0, "ok", "read", 1, 10), (1, "invoke", "write", 1, 5),
            (1, "info", "write", 1, 2_000_000_000), (2, "invoke", "write", 2, 6), (2, "fail", "write", 2, 26),
            ("nemesis", "info", "start", None, 7))
    s = stats(ops)
    assert s["counts"] == {"read": {"ok": 1, "fail": 0, "info": 0}, "write": {"ok": 0, "fail": 1, "info": 1}}
    assert s["latency_ns"]["read"]["0.5"] == 10 and s["latency_ns"]["write"]["1.0"] == 20
    assert [t["second"] for t in s["throughput"]] == [0, 2]
    assert s["verdict"] == "invalid" and s["never_ok"] == ["write"]
