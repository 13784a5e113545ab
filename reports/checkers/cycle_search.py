"""Search one strongly connected component for each of Elle's cycle classes.

A cycle's class is what Elle's cycle explainer calls it (elle.txn/cycle-explainer), computed from
the explained kind of each edge (see `graph.PRIORITY`): exactly one rw edge is G-single; several
rw edges are G2-item when two of them are adjacent (the last edge counts as adjacent to the first)
and G-nonadjacent otherwise; no rw but a wr is G1c; only ww is G0. Any realtime edge adds
"-realtime", else any process edge adds "-process".

Classes are searched in Elle's order (elle.consistency-model/anomaly-depth-compare) and a class
implied by one already found in the component is skipped (elle.consistency-model/implied-anomalies,
as elle.txn/cycle-cases-in-scc does). That order is also what keeps each search cheap: when a
class is searched, every class implying it is known to be absent, so e.g. any cycle in
ww+wr+process through a wr edge must be G1c-process once G1c and G0-process are ruled out. So:

- G0, G1c, G-single and variants: is some ww / wr / rw edge a→b closed by a path b→a over the
  allowed edges? Decided for all edges at once with SCCs of the allowed subgraph plus bitset
  reachability over its condensation, then one BFS for the path. Polynomial, exact.
- G2-item and variants: for each middle node y of two consecutive rw edges x→y→z, one BFS from
  y's rw successors to its rw predecessors avoiding y. Polynomial, exact.
- G-nonadjacent and variants: Elle's state machine (was the last edge rw?) finds closed walks
  with no two adjacent rw edges; a shortest one that visits no transaction twice is a cycle. If
  none is simple, an exhaustive search over simple cycles decides, bounded by the step budget.

Every search is also bounded by the component's deadline; running out of either raises
`OutOfBudget`: the component is reported as undecided from that class on, and `fallback` still
names one cycle in it.

Elle's -realtime specs add only realtime edges, because Elle never builds process and realtime
orders together (realtime subsumes process). Both may be present here, so a -realtime class may
also use process edges: its explainer calls any cycle with a realtime edge "-realtime".
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator

from reports.checkers.graph import PROCESS, REALTIME, RW, WR, WW, Graph, strongly_connected

BASES = ("G0", "G1c", "G-single", "G2-item", "G-nonadjacent")
SUFFIXES = ("", "-process", "-realtime")
# Elle's search order: by depth in its anomaly graphs, ties alphabetical.
SEARCH_ORDER = [b + s for s in SUFFIXES for b in BASES]
_DIRECT = {
    "G0": ["G1c", "G0-process"], "G0-process": ["G1c-process", "G0-realtime"],
    "G0-realtime": ["G1c-realtime"], "G1c": ["G1c-process"], "G1c-process": ["G1c-realtime"],
    "G-single": ["G-nonadjacent", "G-single-process"],
    "G-single-process": ["G-nonadjacent-process", "G-single-realtime"],
    "G-single-realtime": ["G-nonadjacent-realtime"],
    "G-nonadjacent": ["G-nonadjacent-process"], "G-nonadjacent-process": ["G-nonadjacent-realtime"],
    "G2-item": ["G2-item-process"], "G2-item-process": ["G2-item-realtime"],
}


def _closure(cls: str) -> frozenset[str]:
    out: set[str] = set()
    todo = list(_DIRECT.get(cls, ()))
    while todo:
        c = todo.pop()
        if c not in out:
            out.add(c)
            todo += _DIRECT.get(c, ())
    return frozenset(out)


IMPLIES = {c: _closure(c) for c in SEARCH_ORDER}

_ORDER_MASK = {"": 0, "-process": 1 << PROCESS, "-realtime": 1 << PROCESS | 1 << REALTIME}
_D0 = 1 << WW
_D1 = 1 << WW | 1 << WR


def classify(labels: list[int]) -> str | None:
    """Elle's name for a cycle whose edges are explained as `labels`, in cycle order."""
    rws = labels.count(RW)
    if rws == 1:
        base = "G-single"
    elif rws > 1:
        adjacent = any(labels[i] == RW and labels[i - 1] == RW for i in range(len(labels)))
        base = "G2-item" if adjacent else "G-nonadjacent"
    elif WR in labels:
        base = "G1c"
    elif WW in labels:
        base = "G0"
    else:
        return None  # order edges alone follow time and cannot form a cycle in a real history
    return base + ("-realtime" if REALTIME in labels else "-process" if PROCESS in labels else "")


class OutOfBudget(Exception):
    pass


class Component:
    """One strongly connected component, renumbered 0..n-1, with each edge's explained kind."""

    def __init__(self, graph: Graph, members: list[int], steps: int, seconds: float):
        self.ids = members
        local = {t: i for i, t in enumerate(members)}
        self.edges: list[list[tuple[int, int]]] = [
            [(local[b], graph.label(a, b)) for b in graph.out.get(a, ()) if b in local] for a in members]
        self.steps = steps
        self.deadline = time.monotonic() + seconds
        self._succ: dict[int, list[list[int]]] = {}
        self._kinds: list[dict[int, int]] | None = None
        self.timed_out: str | None = None  # the class whose search ran out of budget

    def succ(self, mask: int) -> list[list[int]]:
        if mask not in self._succ:
            self._succ[mask] = [[w for w, k in es if mask >> k & 1] for es in self.edges]
        return self._succ[mask]

    def tick(self, steps: int = 0) -> None:
        """Spend exhaustive-search steps; every call also checks the deadline."""
        self.steps -= steps
        if self.steps < 0 or time.monotonic() > self.deadline:
            raise OutOfBudget

    def sccs(self, mask: int) -> tuple[list[int], list[list[int]]]:
        """Component index of each node in the `mask` subgraph, and the components, sinks first."""
        succ = self.succ(mask)
        comps = strongly_connected(range(len(succ)), succ.__getitem__, singletons=True)
        comp_of = [0] * len(succ)
        for c, nodes in enumerate(comps):
            for v in nodes:
                comp_of[v] = c
        self.tick()
        return comp_of, comps

    def path(self, sources: list[int], targets: set[int], mask: int, avoid: int = -1,
             within: tuple[list[int], int] | None = None) -> list[int] | None:
        """Shortest path over `mask` edges from some source to some target, skipping node `avoid`
        and, with `within` = (comp_of, c), nodes outside component c."""
        succ = self.succ(mask)
        parent = {s: s for s in sources}
        queue = deque(sources)
        popped = 0
        while queue:
            v = queue.popleft()
            if v in targets:
                out = [v]
                while parent[out[-1]] != out[-1]:
                    out.append(parent[out[-1]])
                return out[::-1]
            popped += 1
            if popped % 4096 == 0:
                self.tick()
            for w in succ[v]:
                if w not in parent and w != avoid and (within is None or within[0][w] == within[1]):
                    parent[w] = v
                    queue.append(w)
        return None

    def labels(self, cycle: list[int]) -> list[int]:
        """The explained kind of each edge of a closed node list (first == last)."""
        if self._kinds is None:
            self._kinds = [dict(es) for es in self.edges]
        return [self._kinds[a][b] for a, b in itertools.pairwise(cycle)]


def _kind_edges(comp: Component, kind: int) -> Iterator[tuple[int, int]]:
    for a, es in enumerate(comp.edges):
        for b, k in es:
            if k == kind:
                yield a, b


def closed_edge(comp: Component, kind: int, mask: int) -> list[int] | None:
    """A cycle made of one `kind` edge a→b and a path b→a over `mask` edges."""
    comp_of, comps = comp.sccs(mask)
    candidates = list(_kind_edges(comp, kind))
    hit = next(((a, b) for a, b in candidates if comp_of[a] == comp_of[b]), None)
    if hit is None and not mask >> kind & 1:
        hit = _reaching(comp, comp_of, comps, candidates, mask)
    if hit is None:
        return None
    a, b = hit
    back = comp.path([b], {a}, mask)
    assert back is not None  # b reaches a: the same component, or _reaching found it does
    return [a] + back


def _reaching(comp: Component, comp_of: list[int], comps: list[list[int]],
              candidates: list[tuple[int, int]], mask: int, block: int = 4096) -> tuple[int, int] | None:
    """Some candidate a→b whose b reaches a across the condensation DAG: bitsets of reachable
    target components, computed sinks first, `block` targets per pass to bound memory."""
    succ = comp.succ(mask)
    dag = [{comp_of[w] for v in nodes for w in succ[v]} - {c} for c, nodes in enumerate(comps)]
    targets = sorted({comp_of[a] for a, _ in candidates})
    for start in range(0, len(targets), block):
        bit = {c: 1 << i for i, c in enumerate(targets[start:start + block])}
        reach = [0] * len(comps)
        for c, succs in enumerate(dag):  # sinks first: successors are already done
            r = bit.get(c, 0)
            for d in succs:
                r |= reach[d]
            reach[c] = r
        comp.tick()
        for a, b in candidates:
            if reach[comp_of[b]] & bit.get(comp_of[a], 0):
                return a, b
    return None


def adjacent_rw(comp: Component, mask: int) -> list[int] | None:
    """A cycle over `mask` edges (which include rw) with two consecutive rw edges x→y→z: a path
    from one of y's rw successors back to one of its rw predecessors that avoids y."""
    comp_of, _ = comp.sccs(mask)
    rw_in: list[list[int]] = [[] for _ in comp.edges]
    for a, b in _kind_edges(comp, RW):
        if comp_of[a] == comp_of[b]:
            rw_in[b].append(a)
    for y, preds in enumerate(rw_in):
        if not preds:
            continue
        succs = [z for z, k in comp.edges[y] if k == RW and comp_of[z] == comp_of[y]]
        if not succs:
            continue
        found = comp.path(succs, set(preds), mask, avoid=y, within=(comp_of, comp_of[y]))
        if found is not None:
            return [found[-1], y] + found
    return None


def nonadjacent_rw(comp: Component, mask: int, target: str) -> list[int] | None:
    """A simple cycle over `mask` edges classified as `target` (a G-nonadjacent class)."""
    succ = comp.succ(mask)
    is_rw = [{w for w, k in es if k == RW} for es in comp.edges]

    def state_succ(s: int) -> Iterator[int]:  # state = 2*node + (last edge was rw)
        v, after_rw = divmod(s, 2)
        for w in succ[v]:
            if w in is_rw[v]:
                if not after_rw:
                    yield 2 * w + 1
            else:
                yield 2 * w

    states = strongly_connected(range(2 * len(succ)), state_succ)
    comp.tick()
    live: set[int] = set()  # nodes on some closed walk through an rw edge
    for scc in states:
        members = set(scc)
        entries = [(w, p) for p in scc if p % 2 == 0 for w in is_rw[p // 2] if 2 * w + 1 in members]
        if not entries:
            continue
        live.update(s // 2 for s in scc)
        for w, p in entries:
            walk = _state_path(comp, state_succ, 2 * w + 1, p, members)
            cycle = [p // 2] + [s // 2 for s in walk]
            if len(set(cycle)) == len(cycle) - 1 and classify(comp.labels(cycle)) == target:
                return cycle
    return _exhaustive(comp, mask, target, live) if live else None


def _state_path(comp: Component, state_succ: Callable[[int], Iterator[int]], start: int, goal: int,
                members: set[int]) -> list[int]:
    """Shortest walk between two states of one strongly connected set of states."""
    parent = {start: start}
    queue = deque([start])
    popped = 0
    while queue:
        s = queue.popleft()
        if s == goal:
            break
        popped += 1
        if popped % 4096 == 0:
            comp.tick()
        for t in state_succ(s):
            if t in members and t not in parent:
                parent[t] = s
                queue.append(t)
    out = [goal]
    while out[-1] != start:
        out.append(parent[out[-1]])
    return out[::-1]


def _exhaustive(comp: Component, mask: int, target: str, live: set[int]) -> list[int] | None:
    """Depth-first enumeration of simple cycles through `live` nodes, each rooted at its
    smallest node, until one is classified `target`; never follows an rw edge right after
    another (no G-nonadjacent has one). One step per edge tried."""
    labels: list[int]
    for root in sorted(live):
        path, labels, on_path = [root], [], {root}
        stack = [iter(comp.edges[root])]
        while stack:
            for w, k in stack[-1]:
                comp.tick(1)
                if not mask >> k & 1 or w < root or w not in live:
                    continue
                if k == RW and labels and labels[-1] == RW:
                    continue
                if w == root:
                    if classify(labels + [k]) == target:
                        return path + [root]
                    continue
                if w in on_path:
                    continue
                path.append(w)
                labels.append(k)
                on_path.add(w)
                stack.append(iter(comp.edges[w]))
                break
            else:
                stack.pop()
                on_path.discard(path.pop())
                if labels:
                    labels.pop()
    return None


def fallback(comp: Component) -> list[int]:
    """Some cycle through a data edge, for a component whose search ran out of budget (as Elle's
    cycle-cases-in-scc-fallback does): through ww edges only if there is one, else ww+wr, else
    ww+wr+rw, else any. Linear time, and no longer bounded: it always finishes."""
    comp.steps, comp.deadline = 0, float("inf")
    everything = (1 << (REALTIME + 1)) - 1
    for kinds, mask in (((WW,), _D0), ((WR,), _D1), ((RW,), _D1 | 1 << RW), ((WW, WR, RW), everything)):
        comp_of, _ = comp.sccs(mask)
        for a, es in enumerate(comp.edges):
            for b, k in es:
                if k in kinds and comp_of[a] == comp_of[b]:
                    back = comp.path([b], {a}, mask)
                    assert back is not None  # b reaches a: they share a component
                    return [a] + back
    raise AssertionError("a strongly connected component always has a cycle through a data edge")


def search(comp: Component, cls: str) -> list[int] | None:
    """A cycle of class `cls` in the component, assuming every class implying `cls` is absent."""
    suffix = next((s for s in SUFFIXES[1:] if cls.endswith(s)), "")
    base, order = cls[:len(cls) - len(suffix)], _ORDER_MASK[suffix]
    if base == "G0":
        return closed_edge(comp, WW, _D0 | order)
    if base == "G1c":
        return closed_edge(comp, WR, _D1 | order)
    if base == "G-single":
        return closed_edge(comp, RW, _D1 | order)
    if base == "G2-item":
        return adjacent_rw(comp, _D1 | 1 << RW | order)
    return nonadjacent_rw(comp, _D1 | 1 << RW | order, cls)
