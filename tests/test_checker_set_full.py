"""Set-full: per-element outcomes, latencies, verdicts, and how the set's linearizability pass
joins the verdict in check_history."""

from __future__ import annotations

import random
from itertools import islice

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from reports.checkers.check import check_history
from reports.checkers.sets import check_set, quantiles
from reports.history import Op
from workloads.set import SetWorkload


def h(*events) -> list[Op]:
    """events: (process, type, f, value, time in ms); index = position."""
    return [Op(index=i, process=p, type=t, f=f, value=v, time=int(ms * 1_000_000))
            for i, (p, t, f, v, ms) in enumerate(events)]


def add(p, v, start, end, outcome="ok"):
    return [(p, "invoke", "add", v, start), (p, outcome, "add", v, end)]


def read(p, v, start, end):
    return [(p, "invoke", "read", None, start), (p, "ok", "read", v, end)]


def types(result):
    return {e["type"] for e in result["errors"]}


def test_all_stable_with_reads_during_the_run():
    r = check_set(h(*add(0, 1, 0, 1), *read(1, [1], 2, 3), *add(0, 2, 4, 5), *read(1, [1, 2], 6, 7)))
    assert r["verdict"] == "valid" and r["errors"] == []
    assert (r["stable_count"], r["lost_count"], r["stale_count"], r["never_read_count"]) == (2, 0, 0, 0)
    assert r["stable_latencies"] == {"0": 0.0, "0.5": 0.0, "0.95": 0.0, "0.99": 0.0, "1": 0.0}
    assert r["lost_latencies"] is None and r["reads"] == 2 and r["final_read_index"] == 7


def test_lost_after_being_read_with_its_latency():
    r = check_set(h(*add(0, 1, 0, 1), *read(1, [1], 3, 4), *read(1, [], 6, 7), *read(1, [], 8, 9)))
    assert r["verdict"] == "invalid" and types(r) == {"lost"}
    assert r["lost"] == [1] and r["stable_count"] == 0
    assert r["lost_latencies"]["1"] == 2.0  # last read that saw it began 2 ms after the ack
    (example,) = r["errors"][0]["examples"]
    assert (example["known_index"], example["last_present_index"], example["last_absent_index"]) == (1, 2, 6)


def test_acknowledged_but_never_seen_is_lost_with_zero_latency():
    r = check_set(h(*add(0, 1, 0, 1), *read(1, [], 2, 3)))
    assert r["lost"] == [1] and r["lost_latencies"]["0.5"] == 0.0 and r["verdict"] == "invalid"


def test_an_info_add_seen_then_gone_is_lost_and_recovered():
    r = check_set(h(*add(0, 1, 0, 1, "info"), *read(1, [1], 2, 3), *read(1, [], 4, 5)))
    assert r["lost"] == [1] and r["recovered"] == [1] and r["verdict"] == "invalid"


def test_stale_is_invalid_only_when_reads_are_promised_linearizable():
    ops = h(*add(0, 1, 0, 1), *read(1, [], 3, 4), *read(1, [1], 5, 6))
    r = check_set(ops)
    assert r["verdict"] == "invalid" and types(r) == {"stale"}
    assert r["stale"] == [1] and r["stable_count"] == 1 and r["linearizable"] is True
    assert r["stable_latencies"]["1"] == 2.0  # the missing read began 2 ms after the ack
    assert r["worst_stale"][0]["element"] == 1 and r["worst_stale"][0]["stable_latency_ms"] == 2.0
    relaxed = check_set(ops, linearizable=False)
    assert relaxed["verdict"] == "valid" and relaxed["stale"] == [1] and relaxed["errors"] == []


def test_a_read_racing_the_add_may_miss_it():
    # the read began before the add completed: it may linearize first, so no stale, no lost
    ops = h((0, "invoke", "add", 1, 0), (1, "invoke", "read", None, 1), (1, "ok", "read", [], 2),
            (0, "ok", "add", 1, 3), *read(1, [1], 4, 5))
    r = check_set(ops)
    assert r["verdict"] == "valid" and r["stale"] == [] and r["stable_count"] == 1
    alone = check_set(ops[:5])  # the racing read is the last one: never read, not lost
    assert alone["never_read"] == [1] and alone["lost"] == [] and alone["verdict"] == "valid"


def test_never_read_and_info_adds_never_seen_are_fine():
    r = check_set(h(*read(1, [], 0, 1), *add(0, 1, 2, 3), *add(0, 2, 4, 5, "info"),
                    (2, "invoke", "add", 3, 6)))
    assert r["verdict"] == "valid" and r["never_read"] == [1, 2, 3]
    assert r["recovered"] == [] and r["acknowledged_count"] == 1 and r["attempt_count"] == 3


def test_recovered_unknown_adds_that_a_read_saw():
    r = check_set(h(*add(0, 1, 0, 1, "info"), (2, "invoke", "add", 2, 2), *read(1, [1, 2], 3, 4)))
    assert r["verdict"] == "valid" and r["recovered"] == [1, 2] and r["stable_count"] == 2


def test_duplicated_elements():
    r = check_set(h(*add(0, 1, 0, 1), *read(1, [1, 1, 1], 2, 3), *read(1, [1, 1], 4, 5)))
    assert r["verdict"] == "invalid" and types(r) == {"duplicated"}
    assert r["duplicated"] == [[1, 3]] and r["duplicated_count"] == 1


def test_unexpected_elements_never_attempted_attempted_later_or_failed():
    ops = h(*add(0, 1, 0, 1, "fail"), *read(1, [1, 5, 9], 2, 3), *add(0, 5, 4, 5), *read(1, [1, 5, 9], 6, 7))
    r = check_set(ops)
    assert r["verdict"] == "invalid" and types(r) == {"unexpected"}
    assert r["unexpected"] == [1, 5, 9] and r["unexpected_count"] == 3
    reasons = {e["explanation"] for e in r["errors"]}
    assert reasons == {"2 element(s) were read though no add was invoked before the read",
                       "1 element(s) were read though every add of them failed"}
    assert r["stable_count"] == 1  # 5, once its add was invoked; the failed 1 is no outcome


def test_a_failed_add_never_read_is_no_error():
    r = check_set(h(*add(0, 1, 0, 1, "fail"), *read(1, [], 2, 3)))
    assert r["verdict"] == "valid" and r["never_read"] == [] and r["lost"] == []


def test_list_elements_are_compared_by_value():
    r = check_set(h(*add(0, [1, 2], 0, 1), *read(1, [[1, 2]], 2, 3)))
    assert r["verdict"] == "valid" and r["stable_count"] == 1


def test_unknown_only_without_an_ok_read():
    ops = h(*add(0, 1, 0, 1), (1, "invoke", "read", None, 2), (1, "info", "read", None, 3))
    r = check_set(ops)
    assert r["verdict"] == "unknown" and r["reason"] == "no ok read of the set"
    assert check_set(h(*add(0, 1, 0, 1, "fail"), *read(1, [], 2, 3)))["verdict"] == "valid"


def test_quantiles_pick_floor_of_n_times_q_like_jepsen():
    assert quantiles([]) is None
    assert quantiles([4.0, 1.0, 3.0, 2.0]) == {"0": 1.0, "0.5": 3.0, "0.95": 4.0, "0.99": 4.0, "1": 4.0}


# --------------------------------------------------------------- with the linearizability pass


def _hard(n=15):
    """n concurrent info adds, and two concurrent reads that see incompatible sets ({1..n-1} and
    {0, 2..n-1}): fine per element, but the search must try every subset of adds before it can
    say so, far beyond a tiny budget. A final read sees everything."""
    events = [(p, "invoke", "add", p, 0) for p in range(n)]
    events += [(100, "invoke", "read", None, 1), (101, "invoke", "read", None, 1),
               (100, "ok", "read", list(range(1, n)), 2), (101, "ok", "read", [0, *range(2, n)], 2)]
    events += [(p, "info", "add", p, 3) for p in range(n)]
    return events + read(102, list(range(n)), 4, 5)


def test_an_unknown_search_never_turns_a_decisive_set_verdict_unknown():
    valid = h(*_hard())
    result = check_history(valid, "set", max_states=1)
    set_full, lin = result["results"]
    assert set_full["verdict"] == "valid" and lin["verdict"] == "unknown" and lin["advisory"]
    assert result["verdict"] == "valid"
    lost = h(*add(50, 99, 0, 1), *_hard())
    result = check_history(lost, "set", max_states=1)
    assert [r["verdict"] for r in result["results"]] == ["invalid", "unknown"]
    assert result["verdict"] == "invalid"
    result = check_history(h(*add(0, 1, 0, 1)), "set", max_states=1)
    assert result["results"][0]["verdict"] == "unknown" and result["verdict"] == "unknown"


def test_a_real_violation_the_search_finds_still_counts():
    # two concurrent reads of unfinished adds see {1} and {2}: fine per element, not linearizable
    ops = h((0, "invoke", "add", 1, 0), (1, "invoke", "add", 2, 0), (2, "invoke", "read", None, 1),
            (3, "invoke", "read", None, 2), (2, "ok", "read", [1], 3), (3, "ok", "read", [2], 4),
            (0, "info", "add", 1, 5), (1, "info", "add", 2, 5), *read(4, [1, 2], 6, 7))
    result = check_history(ops, "set")
    assert [r["verdict"] for r in result["results"]] == ["valid", "invalid"]
    assert result["verdict"] == "invalid"


# --------------------------------------------------------------------------------- properties


def linearizable_history(rng: random.Random) -> list[Op]:
    """Processes run adds and reads against one atomic set; each op takes effect at a random
    point between its invoke and completion. Info adds may or may not take effect; fail adds
    never do. A crashed process continues under a fresh id, as in Jepsen."""
    workers = rng.randint(1, 4)
    pid = list(range(workers))
    state: list = []
    inflight: dict[int, list] = {}  # worker -> [invoke op fields, applied?, result]
    events: list = []
    element = iter(range(1000))
    for clock in range(rng.randint(1, 60)):
        w = rng.randrange(workers)
        if w not in inflight:
            f = "read" if rng.random() < 0.3 else "add"
            v = next(element) if f == "add" else None
            inflight[w] = [f, v, False, None]
            events.append((pid[w], "invoke", f, v, clock))
        elif not inflight[w][2]:
            f, v, _, _ = inflight[w]
            outcome = rng.choice(["ok", "ok", "ok", "info", "fail"]) if f == "add" else "ok"
            if f == "add" and outcome != "fail" and (outcome == "ok" or rng.random() < 0.5):
                state.append(v)
            inflight[w] = [f, v, True, (outcome, sorted(state) if f == "read" else v)]
        else:
            f, _, _, (outcome, value) = inflight.pop(w)
            events.append((pid[w], outcome, f, value, clock))
            if outcome == "info":
                pid[w] += workers
    events += read(10_000, sorted(state), 1000, 1001)
    return h(*events)


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False))
def test_a_linearizable_set_is_always_valid(rng):
    r = check_set(linearizable_history(rng))
    assert r["verdict"] == "valid", r["errors"]
    assert r["lost"] == [] and r["stale"] == []


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False), st.booleans())
def test_dropping_an_acknowledged_element_from_later_reads_is_caught(rng, every_later):
    ops = linearizable_history(rng)
    acked = {op.index: op.value for op in ops if op.f == "add" and op.type == "ok"}
    invoke = {}
    reads = []  # (invoke, completion) of ok reads that began after some element's ack
    for op in ops:
        if op.type == "invoke":
            invoke[op.process] = op
        elif op.f == "read":
            reads.append((invoke[op.process], op))
    candidates = [(i, x, inv) for i, x in acked.items() for inv, _ in reads if inv.index > i]
    assume(candidates)
    i, x, first = rng.choice(candidates)  # the final read always began after every ack
    for inv, done in reads:
        if inv.index == first.index or (every_later and inv.index > first.index):
            done.value = [y for y in done.value if y != x]
    r = check_set(ops)
    assert r["verdict"] == "invalid" and x in r["lost"] + r["stale"]


def test_the_workload_mixes_reads_into_unique_adds():
    w = SetWorkload()
    streams = [list(islice(w.ops(t, 3, random.Random(t)), 400)) for t in range(3)]
    adds = [inv.value for s in streams for inv in s if inv.f == "add"]
    reads = sum(inv.f == "read" for s in streams for inv in s)
    assert len(adds) == len(set(adds)) and 0.05 < reads / 1200 < 0.15
    assert streams[0] == list(islice(w.ops(0, 3, random.Random(0)), 400))  # reproducible
    assert [inv.f for inv in w.final()] == ["read"]
