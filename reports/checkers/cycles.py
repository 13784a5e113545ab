"""The transaction dependency graph and its cycle search, shared by the Elle-style checkers.

Edges are typed: ww, wr, rw (data dependencies inferred from the history) and process, realtime
(orders the history itself imposes). Strongly connected components are found first; inside each,
cycles are searched class by class, as Elle does: G0 (ww only), G1c (ww+wr), G-single (exactly one
rw), G2-item (two or more rw); a cycle that needs process or realtime edges gets that suffix.
Each cycle is explained in words and returned as a small graph.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from typing import Any

DATA = ("ww", "wr", "rw")
ORDER = ("process", "realtime")

# Which consistency models each anomaly rules out (weakest model it violates, and all stronger).
_STRICT = ["strict-serializable"]
_SER = ["serializable", "strong-session-serializable"] + _STRICT
_SI = ["snapshot-isolation", "repeatable-read"] + _SER
_RC = ["read-committed", "read-atomic"] + _SI
_RU = ["read-uncommitted"] + _RC
RULES_OUT: dict[str, list[str]] = {
    "G0": _RU,
    "G1a": _RC,
    "G1b": _RC,
    "G1c": _RC,
    "G-single": _SI,
    "G2-item": ["repeatable-read"] + _SER,
    "internal": _RU,
    "duplicate-elements": _RU,
    "incompatible-order": _RU,
    "process": ["strong-session-serializable", "strict-serializable"],
    "realtime": _STRICT,
}


class Graph:
    """Typed edges between transaction ids, each edge remembering why it exists."""

    def __init__(self) -> None:
        self.out: dict[int, dict[int, dict[str, Any]]] = defaultdict(dict)

    def add(self, a: int, b: int, kind: str, why: Any = None) -> None:
        if a == b:
            return
        kinds = self.out[a].setdefault(b, {})
        kinds.setdefault(kind, why)

    def successors(self, a: int, kinds: frozenset[str]) -> Iterable[int]:
        for b, ks in self.out.get(a, {}).items():
            if not kinds.isdisjoint(ks):
                yield b


def strongly_connected(nodes: Iterable[int], succ: Callable[[int], Iterable[int]]) -> list[list[int]]:
    """Tarjan's algorithm, iterative (histories have 100k+ transactions); only components
    with more than one node, since self-edges are never added."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(succ(root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ(w))))
                    break
                if w in on_stack and index[w] < low[v]:
                    low[v] = index[w]
            else:
                work.pop()
                if work and low[v] < low[work[-1][0]]:
                    low[work[-1][0]] = low[v]
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


class _Budget(Exception):
    pass


def _path(graph: Graph, start: int, goal: int, kinds: frozenset[str], within: set[int],
          steps: list[int]) -> list[int] | None:
    """Shortest path start→goal over `kinds` edges inside `within` (BFS), or None."""
    parent = {start: start}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        steps[0] -= 1
        if steps[0] < 0:
            raise _Budget
        for w in graph.successors(v, kinds):
            if w in within and w not in parent:
                parent[w] = v
                if w == goal:
                    path = [w]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1]
                queue.append(w)
    return None


def _cycle_in(graph: Graph, comp: list[int], kinds: frozenset[str], steps: list[int]) -> list[int] | None:
    """Some cycle using only `kinds` edges inside `comp`, as a node list (first == last)."""
    members = set(comp)
    subs = strongly_connected(comp, lambda v: (w for w in graph.successors(v, kinds) if w in members))
    if not subs:
        return None
    sub = subs[0]
    start = sub[0]
    within = set(sub)
    for w in graph.successors(start, kinds):
        if w in within:
            path = _path(graph, w, start, kinds, within, steps)
            if path is not None:
                return [start] + path
    return None


def _cycle_through(graph: Graph, kind: str, comp: list[int], members: set[int],
                   back: frozenset[str], steps: list[int], deadline: float) -> list[int] | None:
    """A cycle made of one `kind` edge a→b and a path b→a over `back` edges."""
    for a in comp:
        for b, kinds in graph.out.get(a, {}).items():
            if kind in kinds and b in members:
                if time.monotonic() > deadline:
                    raise _Budget
                path = _path(graph, b, a, back, members, steps)
                if path is not None:
                    return [a] + path
    return None


def _edge_kind(graph: Graph, a: int, b: int, allowed: tuple[str, ...]) -> str:
    kinds = graph.out[a][b]
    return next(k for k in allowed if k in kinds)


def find_anomalies(graph: Graph, nodes: Iterable[int], describe_txn: Callable[[int], dict],
                   explain_edge: Callable[[str, str, str, Any], str], steps_per_component: int = 200_000,
                   seconds_per_component: float = 10.0, max_per_class: int = 4) -> list[dict]:
    """Search every strongly connected component for cycles and classify them."""
    data = frozenset(DATA)
    ww_wr = frozenset(("ww", "wr"))
    with_process = frozenset(DATA + ("process",))
    everything = frozenset(DATA + ORDER)
    found: dict[str, int] = defaultdict(int)
    anomalies: list[dict] = []

    def report(cls: str, cycle: list[int], allowed: tuple[str, ...]) -> None:
        if found[cls] >= max_per_class:
            return
        found[cls] += 1
        anomalies.append(_describe_cycle(graph, cls, cycle, allowed, describe_txn, explain_edge))

    for comp in strongly_connected(list(nodes), lambda v: graph.successors(v, everything)):
        steps = [steps_per_component]
        deadline = time.monotonic() + seconds_per_component
        try:
            classes_here = 0
            members = set(comp)
            cycle = _cycle_in(graph, comp, frozenset(("ww",)), steps)
            if cycle:
                report("G0", cycle, DATA)
                classes_here += 1
            cycle = _cycle_through(graph, "wr", comp, members, ww_wr, steps, deadline)
            if cycle:
                report("G1c", cycle, ("wr", "ww"))
                classes_here += 1
            for cls, back in (("G-single", ww_wr), ("G2-item", data)):
                cycle = _cycle_through(graph, "rw", comp, members, back, steps, deadline)
                if cycle:
                    report(cls, cycle, DATA)
                    classes_here += 1
                    break
            if not classes_here:  # the cycle needs order edges
                for suffix, kinds in (("process", with_process), ("realtime", everything)):
                    cycle = _cycle_in(graph, comp, kinds, steps)
                    if cycle:
                        allowed = DATA + ORDER
                        rws = sum(_edge_kind(graph, a, b, allowed) == "rw" for a, b in itertools.pairwise(cycle))
                        base = "G1c" if rws == 0 else "G-single" if rws == 1 else "G2-item"
                        report(f"{base}-{suffix}", cycle, allowed)
                        break
        except _Budget:
            anomalies.append({
                "type": "cycle-search-timeout",
                "component_size": len(comp),
                "transactions": [describe_txn(t) for t in sorted(comp)[:20]],
                "explanation": f"a strongly connected component of {len(comp)} transactions exists, "
                               f"but its cycle search ran out of budget",
            })
    return anomalies


def _describe_cycle(graph: Graph, cls: str, cycle: list[int], allowed: tuple[str, ...],
                    describe_txn: Callable[[int], dict],
                    explain_edge: Callable[[str, str, str, Any], str]) -> dict:
    names = {t: f"T{i + 1}" for i, t in enumerate(dict.fromkeys(cycle))}
    edges = []
    sentences = []
    for a, b in itertools.pairwise(cycle):
        kind = _edge_kind(graph, a, b, allowed)
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


def ruled_out(anomaly_types: Iterable[str]) -> list[str]:
    """Consistency models the anomalies rule out. A cycle that needs process (realtime) edges
    only rules out the session (strict) models: its data edges alone are acyclic."""
    models: set[str] = set()
    for t in anomaly_types:
        for suffix in ORDER:
            if t.endswith("-" + suffix):
                models.update(RULES_OUT[suffix])
                break
        else:
            models.update(RULES_OUT.get(t, []))
    return sorted(models)
