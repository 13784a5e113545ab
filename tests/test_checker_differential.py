"""Differential tests: the Elle-style checker against the reference executor, whose histories'
truth is known. Nothing false (a correct execution at a level is never charged with an anomaly
that level proscribes) and nothing missed (every planted anomaly is named, and judged invalid
exactly under the models that proscribe it).

Which anomalies each level proscribes is written out here from Elle's consistency_model.clj
(anomalies-prohibited-by, restricted to the names the checker reports), not taken from the
checker, so the checker's own lattice is under test too.
"""

from __future__ import annotations

import functools
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reports.checkers.elle import check_list_append, check_rw_register
from reports.checkers.reference import FLAVOURS, INJECTABLE, LEVELS, execute, inject, run
from reports.history import Validator

# The step budget alone bounds the search here: the wall-clock one (10 s a component) ran out
# under a loaded CI run and added a cycle-search-timeout, which is about the machine, not the
# checker. Steps are the same on every machine.
NO_CLOCK = {"seconds_per_component": float("inf")}
CHECK = {"list-append": functools.partial(check_list_append, **NO_CLOCK),
         "rw-register": functools.partial(check_rw_register, **NO_CLOCK)}

# read-committed is PL-2 (G1 and what implies it) over PL-1 (G0, duplicates, cyclic versions).
# garbage-read is not Elle's (its list-append stops on such a read); the checker ranks it with G1a.
READ_COMMITTED = frozenset({"G0", "G1a", "G1b", "G1c", "future-read", "incompatible-order", "dirty-update",
                            "duplicate-elements", "cyclic-versions", "garbage-read"})
# snapshot isolation adds internal, lost-update (via ROLA / cursor stability) and every cycle
# whose rw edges are nonadjacent
SNAPSHOT_ISOLATION = READ_COMMITTED | {"internal", "lost-update", "G-single", "G-nonadjacent"}
SERIALIZABLE = SNAPSHOT_ISOLATION | {"G2-item"}
PROSCRIBED = {"read-committed": READ_COMMITTED, "snapshot-isolation": SNAPSHOT_ISOLATION,
              "serializable": SERIALIZABLE}
MODELS = ("read-committed", "snapshot-isolation", "serializable", "strict-serializable")


def proscribes(model: str, anomaly: str) -> bool:
    """Strict serializability proscribes every anomaly we plant; the rest per PROSCRIBED."""
    return model == "strict-serializable" or anomaly in PROSCRIBED[model]


def fixed(n: int):
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


shape = {"seed": st.integers(0, 2**32 - 1), "txns": st.integers(20, 120), "processes": st.integers(2, 6),
         "keys": st.integers(2, 5)}


@pytest.mark.parametrize("flavour", FLAVOURS)
@fixed(500)
@given(**shape)
def test_strict_serializable_executions_are_valid(flavour, seed, txns, processes, keys):
    ops = execute("strict-serializable", seed, txns, processes, keys, flavour)
    result = CHECK[flavour](ops)
    assert (result["verdict"], result["anomaly_types"]) == ("valid", [])


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("level", sorted(PROSCRIBED))
@fixed(300)
@given(**shape)
def test_weaker_levels_show_nothing_they_proscribe(level, flavour, seed, txns, processes, keys):
    ops = execute(level, seed, txns, processes, keys, flavour)
    found = set(CHECK[flavour](ops)["anomaly_types"])  # judged as strict-serializable: all reported
    assert not found & PROSCRIBED[level]
    assert CHECK[flavour](ops, consistency_model=level)["verdict"] == "valid"


@pytest.mark.parametrize("flavour", FLAVOURS)
@fixed(400)
@given(**shape)
def test_serializable_executions_break_only_realtime(flavour, seed, txns, processes, keys):
    """Stale snapshots make cycles only through realtime edges. With no stale read the history
    is strict-serializable; a stale read of a write that had completed before the reader began
    must be flagged where Elle can order it (always for lists; for registers Elle orders only the
    initial nil before other versions, so only a stale nil read)."""
    execution = run("serializable", seed, txns, processes, keys, flavour)
    result = CHECK[flavour](execution.ops)
    assert all(t.endswith("-realtime") for t in result["anomaly_types"]), result["anomaly_types"]
    if not execution.stale:
        assert result["verdict"] == "valid"
    if any(s.realtime and (flavour == "list-append" or s.seen is None) for s in execution.stale):
        assert result["verdict"] == "invalid"


# What a gadget entails besides its class (see reference.inject); realtime cycles through the
# background come on top, since the gadget's txns sit in real time among the background's.
ENTAILED = {
    ("G1b", "list-append"): {"G-single"},  # the reader misses the writer's final append: rw back
    ("lost-update", "list-append"): {"G-single"},  # T1 -ww-> T2 -rw-> T1
    ("lost-update", "rw-register"): {"G2-item"},  # both read nil: rw edges both ways
    ("dirty-update", "list-append"): {"G1a"},  # the aborted element is read
}


@pytest.mark.parametrize(("anomaly", "flavour"),
                         [(a, f) for a, fs in INJECTABLE.items() for f in FLAVOURS if f in fs])
@fixed(200)
@given(seed=st.integers(0, 2**32 - 1), txns=st.integers(10, 60))
def test_injected_anomaly_is_named_and_judged_per_model(anomaly, flavour, seed, txns):
    """Named when judged as strict-serializable (which reports everything), with nothing else
    but what the gadget entails and realtime cycles; and invalid under exactly the models that
    proscribe it (what it entails is never proscribed by a weaker model than the planted class)."""
    ops = inject(anomaly, seed, flavour, txns=txns)
    found = set(CHECK[flavour](ops)["anomaly_types"])
    assert anomaly in found, found
    extra = found - {anomaly} - ENTAILED.get((anomaly, flavour), set())
    assert all(t.endswith("-realtime") for t in extra), extra
    verdicts = {m: CHECK[flavour](ops, consistency_model=m)["verdict"] for m in MODELS}
    assert verdicts == {m: "invalid" if proscribes(m, anomaly) else "valid" for m in MODELS}


STRONGER = {"read-committed": SNAPSHOT_ISOLATION, "snapshot-isolation": SERIALIZABLE}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("level", sorted(PROSCRIBED))
def test_weaker_levels_do_show_what_stronger_ones_proscribe(level, flavour):
    """Over many small executions, each weaker level exhibits some anomaly the next stronger level
    forbids (serializable: a realtime one), so the level is really that weak and the tests above
    are not vacuous."""
    found = set()
    for seed in range(100):
        found.update(CHECK[flavour](execute(level, seed, 30, 6, 8, flavour))["anomaly_types"])
    if level == "serializable":
        assert any(t.endswith("-realtime") for t in found), found
    else:
        assert found & (STRONGER[level] - PROSCRIBED[level]), found


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_executor_is_deterministic_and_well_formed(flavour):
    for level in LEVELS:
        ops = execute(level, 7, 80, 4, 3, flavour)
        assert ops == execute(level, 7, 80, 4, 3, flavour)
        validator = Validator("reference")
        for i, op in enumerate(ops):
            validator.admit(op, i + 1)
        assert not validator.open
        written = [(k, v) for op in ops if op.type == "invoke" for f, k, v in op.value if f != "r"]
        assert len(written) == len(set(written))


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("level", LEVELS)
def test_executor_produces_every_outcome(level, flavour):
    """Over a few seeds: fails (never with effect), infos with and without effect, infos whose
    writes are read back, and nil reads of never-written keys, so the tests above exercise all."""
    seen: Counter = Counter()
    for seed in range(10):
        execution = run(level, seed, 100, 5, 4, flavour)
        read = {(k, x) for op in execution.ops if op.type == "ok" for f, k, v in op.value if f == "r"
                for x in (v if isinstance(v, list) else [v])}
        invoke: dict[int, int] = {}  # process -> index of its open invoke
        for op in execution.ops:
            if op.type == "invoke":
                invoke[op.process] = op.index
                continue
            seen[op.type, execution.took_effect[invoke[op.process]]] += 1
            if op.type == "ok":
                seen["nil read"] += sum(v is None for f, _, v in op.value if f == "r")
            if op.type == "info":
                seen["info read back"] += any((k, v) in read for f, k, v in op.value if f != "r")
    assert seen["fail", True] == 0, seen
    wanted = [("fail", False), ("info", True), ("info", False), "info read back", "nil read"]
    assert min(seen[k] for k in wanted) > 0, seen
