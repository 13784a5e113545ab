"""Cycle anomalies in a transaction dependency graph, found and named as Elle finds and names them.

Strongly connected components of the whole graph come first (no cycle leaves one); each is then
searched class by class (see `cycle_search`): G0, G1c, G-single, G2-item, G-nonadjacent, then
their -process and then their -realtime variants, skipping classes implied by one already found
there. Each found cycle is explained in words and returned as a small graph.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from reports.checkers.cycle_search import (
    IMPLIES,
    SEARCH_ORDER,
    Component,
    OutOfBudget,
    classify,
    fallback,
    search,
)
from reports.checkers.graph import PRIORITY, Graph, strongly_connected

__all__ = ["Graph", "find_anomalies"]


def find_anomalies(graph: Graph, nodes: Iterable[int], describe_txn: Callable[[int], dict[str, Any]],
                   explain_edge: Callable[[str, str, str, Any], str], steps_per_component: int = 200_000,
                   seconds_per_component: float = 10.0, max_per_class: int = 4) -> list[dict[str, Any]]:
    """One cycle per class found in each strongly connected component of `nodes` (at most
    `max_per_class` of a class overall). A component whose search exhausts its budget (steps of
    exhaustive search, or seconds in all) yields a cycle-search-timeout naming what is undecided,
    plus one fallback cycle of whatever class it is, unless that class was already reported."""
    members = set(nodes)
    everything = frozenset(PRIORITY)
    found: dict[str, int] = defaultdict(int)
    anomalies: list[dict[str, Any]] = []

    out = graph.out

    def succ(v: int) -> Iterable[int]:
        """graph.successors(v, everything) within `members`, as one list: a generator of
        generators per node cost a loaded history's search more than the search itself."""
        return [w for w, kinds in out.get(v, {}).items()
                if w in members and not everything.isdisjoint(kinds)]

    for scc in sorted(strongly_connected(list(members), succ), key=min):
        comp = Component(graph, sorted(scc), steps_per_component, seconds_per_component)
        for cycle in _search_component(comp):
            name = classify(comp.labels(cycle))
            assert name is not None  # every cycle found has a data edge (search, fallback)
            if found[name] < max_per_class:
                found[name] += 1
                anomalies.append(_describe_cycle(graph, name, [comp.ids[v] for v in cycle],
                                                 describe_txn, explain_edge))
        if comp.timed_out is not None:
            anomalies.append({
                "type": "cycle-search-timeout",
                "component_size": len(scc),
                "searching": comp.timed_out,
                "transactions": [describe_txn(t) for t in comp.ids[:20]],
                "explanation": f"a strongly connected component of {len(scc)} transactions exists, "
                               f"but the search for {comp.timed_out} cycles in it ran out of budget",
            })
    return anomalies


def _search_component(comp: Component) -> list[list[int]]:
    """One cycle per class found, in Elle's order, skipping classes implied by those found. If
    the budget runs out, `comp.timed_out` names the class being searched, and a fallback cycle is
    added unless its class was found or implied already."""
    cycles: list[list[int]] = []
    skip: set[str] = set()
    for cls in SEARCH_ORDER:
        if cls in skip:
            continue
        try:
            cycle = search(comp, cls)
        except OutOfBudget:
            comp.timed_out = cls
            cycle = fallback(comp)
            if classify(comp.labels(cycle)) not in skip | {classify(comp.labels(c)) for c in cycles}:
                cycles.append(cycle)
            return cycles
        if cycle is not None:
            skip |= IMPLIES[cls]
            cycles.append(cycle)
    return cycles


def _describe_cycle(graph: Graph, cls: str, cycle: list[int], describe_txn: Callable[[int], dict[str, Any]],
                    explain_edge: Callable[[str, str, str, Any], str]) -> dict[str, Any]:
    names = {t: f"T{i + 1}" for i, t in enumerate(dict.fromkeys(cycle))}
    edges = []
    sentences = []
    for a, b in itertools.pairwise(cycle):
        kind = PRIORITY[graph.label(a, b)]
        why = graph.out[a][b][kind]
        edges.append({"from": names[a], "to": names[b], "type": kind, "why": why})
        sentences.append(f"{names[a]} < {names[b]} because " + explain_edge(names[a], names[b], kind, why))
    first = names[cycle[0]]
    return {
        "type": cls,
        "transactions": [{"name": names[t], **describe_txn(t)} for t in names],
        "edges": edges,
        "explanation": "; ".join(sentences) + f"; a contradiction: {first} < {first}.",
    }
