"""Graph-level tests of the cycle search: every Elle cycle class and variant, how edges carrying
several kinds are counted, which classes a component reports, and agreement with a brute-force
oracle that enumerates simple cycles."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.checkers import cycle_search
from reports.checkers.cycles import Graph, find_anomalies

KINDS = ("ww", "wr", "rw", "process", "realtime")  # Elle explains a pair by the first that applies

# Elle's search order and implications between cycle classes (elle.consistency-model).
ORDER = [b + s for s in ("", "-process", "-realtime")
         for b in ("G0", "G1c", "G-single", "G2-item", "G-nonadjacent")]
IMPLIED = {
    "G0": {"G1c", "G0-process"}, "G0-process": {"G1c-process", "G0-realtime"},
    "G0-realtime": {"G1c-realtime"}, "G1c": {"G1c-process"}, "G1c-process": {"G1c-realtime"},
    "G-single": {"G-nonadjacent", "G-single-process"},
    "G-single-process": {"G-nonadjacent-process", "G-single-realtime"},
    "G-single-realtime": {"G-nonadjacent-realtime"}, "G-nonadjacent": {"G-nonadjacent-process"},
    "G-nonadjacent-process": {"G-nonadjacent-realtime"}, "G2-item": {"G2-item-process"},
    "G2-item-process": {"G2-item-realtime"},
}


def graph_of(edges: list[tuple[int, int, str]]) -> tuple[Graph, set[int]]:
    g = Graph()
    for a, b, kind in edges:
        g.add(a, b, kind, {"key": "x", "value": 1, "next": 2, "process": 0})
    return g, {n for a, b, _ in edges for n in (a, b)}


def anomalies(edges, **kw) -> list[dict]:
    g, nodes = graph_of(edges)
    return find_anomalies(g, nodes, lambda t: {"id": t}, lambda a, b, kind, why: kind, **kw)


def types(edges, **kw) -> set[str]:
    return {a["type"] for a in anomalies(edges, **kw)}


def name(kinds: list[str]) -> str | None:
    """Elle's cycle explainer, on the explained kind of each edge in cycle order."""
    rw = kinds.count("rw")
    if rw == 1:
        base = "G-single"
    elif rw > 1:
        base = "G2-item" if any(kinds[i] == kinds[i - 1] == "rw" for i in range(len(kinds))) else "G-nonadjacent"
    elif "wr" in kinds:
        base = "G1c"
    elif "ww" in kinds:
        base = "G0"
    else:
        return None
    return base + ("-realtime" if "realtime" in kinds else "-process" if "process" in kinds else "")


def oracle(edges: list[tuple[int, int, str]]) -> set[str]:
    """Classes Elle reports: per strongly connected component, the classes of its simple
    cycles, searched in Elle's order, skipping those implied by a class already found."""
    explained: dict[tuple[int, int], str] = {}
    for a, b, kind in edges:
        if (a, b) not in explained or KINDS.index(kind) < KINDS.index(explained[(a, b)]):
            explained[(a, b)] = kind
    out: dict[int, list[int]] = {}
    for a, b in explained:
        out.setdefault(a, []).append(b)
    per_scc: dict[frozenset, set[str]] = {}
    for root in sorted(out):  # every simple cycle, from its smallest node
        stack = [(root, [root])]
        while stack:
            v, path = stack.pop()
            for w in out.get(v, ()):
                if w == root:
                    cls = name([explained[p] for p in itertools.pairwise(path + [root])])
                    per_scc.setdefault(frozenset(path), set()).update([cls] if cls else [])
                elif w > root and w not in path:
                    stack.append((w, path + [w]))
    # cycles sharing a node share a component: merge their node sets
    comps: list[tuple[set[int], set[str]]] = []
    for nodes, classes in per_scc.items():
        nodes = set(nodes)
        for other in [c for c in comps if c[0] & nodes]:
            comps.remove(other)
            nodes |= other[0]
            classes = classes | other[1]
        comps.append((nodes, set(classes)))
    reported: set[str] = set()
    for _, present in comps:
        skip: set[str] = set()
        for cls in ORDER:
            if cls not in skip and cls in present:
                reported.add(cls)
                todo = [cls]
                while todo:
                    for implied in IMPLIED.get(todo.pop(), ()):
                        skip.add(implied)
                        todo.append(implied)
    return reported


def check_named_right(found: list[dict]) -> None:
    for a in found:
        if a["type"] != "cycle-search-timeout":
            assert name([e["type"] for e in a["edges"]]) == a["type"], a
            assert a["edges"][0]["from"] == a["edges"][-1]["to"]


CASES = {
    "G0": [(1, 2, "ww"), (2, 1, "ww")],
    "G1c": [(1, 2, "ww"), (2, 1, "wr")],
    "G-single": [(1, 2, "rw"), (2, 3, "wr"), (3, 1, "ww")],
    "G2-item": [(1, 2, "rw"), (2, 1, "rw")],
    "G-nonadjacent": [(1, 2, "rw"), (2, 3, "wr"), (3, 4, "rw"), (4, 1, "ww")],
    "G0-process": [(1, 2, "ww"), (2, 1, "process")],
    "G1c-process": [(1, 2, "wr"), (2, 1, "process")],
    "G-single-process": [(1, 2, "rw"), (2, 1, "process")],
    "G2-item-process": [(1, 2, "rw"), (2, 3, "rw"), (3, 1, "process")],
    "G-nonadjacent-process": [(1, 2, "rw"), (2, 3, "process"), (3, 4, "rw"), (4, 1, "wr")],
    "G0-realtime": [(1, 2, "ww"), (2, 3, "process"), (3, 1, "realtime")],
    "G1c-realtime": [(1, 2, "wr"), (2, 1, "realtime")],
    "G-single-realtime": [(1, 2, "rw"), (2, 1, "realtime")],
    "G2-item-realtime": [(1, 2, "rw"), (2, 3, "rw"), (3, 1, "realtime")],
    "G-nonadjacent-realtime": [(1, 2, "rw"), (2, 3, "realtime"), (3, 4, "rw"), (4, 1, "process")],
}


@pytest.mark.parametrize("cls", sorted(CASES))
def test_each_class_found_and_named(cls):
    found = anomalies(CASES[cls])
    assert [a["type"] for a in found] == [cls]
    check_named_right(found)


@pytest.mark.parametrize(("edges", "expected"), [
    # a pair that is both ww and realtime is explained as ww: a plain G0
    ([(1, 2, "ww"), (1, 2, "realtime"), (2, 1, "ww")], {"G0"}),
    # rw and realtime on one pair count as rw; the other edge is realtime only
    ([(1, 2, "rw"), (1, 2, "realtime"), (2, 1, "realtime")], {"G-single-realtime"}),
    # process and realtime on one pair count as process
    ([(1, 2, "wr"), (2, 1, "process"), (2, 1, "realtime")], {"G1c-process"}),
    # ww and rw on one pair count as ww, so this is G1c, not G-single
    ([(1, 2, "ww"), (1, 2, "rw"), (2, 1, "wr")], {"G1c"}),
    # realtime anywhere wins over process
    ([(1, 2, "rw"), (2, 3, "process"), (3, 1, "realtime")], {"G-single-realtime"}),
])
def test_edges_with_several_kinds(edges, expected):
    found = anomalies(edges)
    assert {a["type"] for a in found} == expected
    check_named_right(found)


def test_implied_classes_are_not_reported_again():
    g0_and_g1c = [(1, 2, "ww"), (2, 1, "ww"), (2, 3, "wr"), (3, 2, "wr")]
    assert types(g0_and_g1c) == {"G0"}
    # G-single implies G-nonadjacent, but G2-item implies neither
    g2_single_nonadjacent = [(1, 2, "rw"), (2, 1, "rw"), (2, 3, "wr"), (3, 1, "ww"),
                             (1, 4, "rw"), (4, 5, "ww"), (5, 6, "rw"), (6, 1, "wr")]
    assert types(g2_single_nonadjacent) == {"G2-item", "G-single"}
    assert types([(1, 2, "rw"), (2, 1, "rw"), (1, 4, "rw"), (4, 5, "ww"), (5, 6, "rw"), (6, 1, "wr")]) \
        == {"G2-item", "G-nonadjacent"}
    # G0 implies G0-process, not G-single-process
    assert types([(1, 2, "ww"), (2, 1, "ww"), (2, 3, "ww"), (3, 2, "process")]) == {"G0"}
    assert types([(1, 2, "ww"), (2, 1, "ww"), (2, 3, "rw"), (3, 2, "process")]) == {"G0", "G-single-process"}


def test_each_component_reports_its_own_classes():
    edges = CASES["G0"] + [(a + 10, b + 10, k) for a, b, k in CASES["G1c"]]
    assert types(edges) == {"G0", "G1c"}


def test_acyclic_graphs_have_no_anomalies():
    assert anomalies([(1, 2, "ww"), (2, 3, "wr"), (1, 3, "rw"), (3, 4, "realtime"), (1, 4, "process")]) == []
    assert anomalies([(1, 2, "process"), (2, 1, "realtime")]) == []  # order edges alone name nothing


def test_closed_walk_without_a_simple_nonadjacent_cycle():
    """rw ww rw ww ww around node 0 has no two adjacent rw edges, but only as a walk through 0
    twice; its simple cycles are a G2-item (rw ww rw, the last rw next to the first) and a G0."""
    edges = [(0, 1, "rw"), (1, 2, "ww"), (2, 0, "rw"), (0, 3, "ww"), (3, 0, "ww")]
    assert oracle(edges) == {"G0", "G2-item"}
    assert types(edges) == {"G0", "G2-item"}


def test_timeout_only_when_the_budget_runs_out():
    edges = [(0, 1, "rw"), (1, 2, "ww"), (2, 0, "rw"), (0, 3, "ww"), (3, 0, "ww")]
    starved = anomalies(edges, steps_per_component=0)
    assert {a["type"] for a in starved} == {"G0", "G2-item", "cycle-search-timeout"}
    assert next(a for a in starved if a["type"] == "cycle-search-timeout")["searching"] == "G-nonadjacent"
    # out of time at once: still one cycle from the component, named by its class
    rushed = anomalies(CASES["G-single"], seconds_per_component=0)
    assert [a["type"] for a in rushed] == ["G-single", "cycle-search-timeout"]
    assert rushed[1]["searching"] == "G0"
    # classes decided without exhaustive search need no steps at all
    assert types(CASES["G-nonadjacent-realtime"], steps_per_component=0) == {"G-nonadjacent-realtime"}


# rw-heavy, so that G-nonadjacent and its variants come up too
kinds = st.sampled_from(("rw", "rw", "rw", "ww", "wr", "process", "realtime"))
edge = st.tuples(st.integers(0, 6), st.integers(0, 6), kinds).filter(lambda e: e[0] != e[1])


@settings(max_examples=500, deadline=None)
@given(st.lists(edge, max_size=20))
def test_agrees_with_brute_force_oracle(edges):
    found = anomalies(edges)
    check_named_right(found)
    assert {a["type"] for a in found} == oracle(edges)


@settings(max_examples=200, deadline=None)
@given(st.lists(edge, max_size=16))
def test_exhaustive_fallback_finds_every_nonadjacent_cycle(edges):
    """The last resort of the G-nonadjacent search (used when every shortest state-machine walk
    repeats a transaction) on its own: it finds one exactly when a simple cycle over data edges
    is G-nonadjacent."""
    data = [e for e in edges if e[2] in ("ww", "wr", "rw")]
    g, nodes = graph_of(data)
    comp = cycle_search.Component(g, sorted(nodes), 10**9, 60)
    mask = sum(1 << i for i in range(3))
    cycle = cycle_search._exhaustive(comp, mask, "G-nonadjacent", set(range(len(nodes))))
    present = any(name([KINDS[k] for k in comp.labels(c)]) == "G-nonadjacent" for c in simple_cycles(comp))
    assert (cycle is not None) == present
    if cycle is not None:
        assert len(set(cycle)) == len(cycle) - 1
        assert name([KINDS[k] for k in comp.labels(cycle)]) == "G-nonadjacent"


def simple_cycles(comp) -> list[list[int]]:
    out = []
    for root in range(len(comp.edges)):
        stack = [[root]]
        while stack:
            path = stack.pop()
            for w, _ in comp.edges[path[-1]]:
                if w == root:
                    out.append(path + [root])
                elif w > root and w not in path:
                    stack.append(path + [w])
    return out


def big_component(n: int) -> list[tuple[int, int, str]]:
    """n transactions in realtime order, ww/wr forward, and stale reads: rw edges pointing back
    to transactions that had already completed, which tie everything into one component."""
    edges = [(i, i + 1, "realtime") for i in range(n - 1)]
    edges += [(i, i + 3, "ww") for i in range(0, n - 3, 2)] + [(i, i + 5, "wr") for i in range(1, n - 5, 3)]
    edges += [(i, i - 40, "rw") for i in range(40, n, 7)]
    return edges


def test_big_component_decided_without_timeout():
    edges = big_component(10_000)
    started = time.monotonic()
    found = anomalies(edges)
    assert time.monotonic() - started < 30
    assert {a["type"] for a in found} == {"G-single-realtime"}
    check_named_right(found)
