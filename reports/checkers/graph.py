"""The transaction dependency graph: typed edges between transaction ids, and its components.

Edges are typed: ww, wr, rw (data dependencies inferred from the history) and process, realtime
(orders the history itself imposes). One pair of transactions may be related for several reasons
(a→b both ww and realtime); like Elle's combined explainer, a pair is *explained* by the first
kind it carries in `PRIORITY` (data before order), and that explained kind is what cycle
classification counts.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

PRIORITY = ("ww", "wr", "rw", "process", "realtime")
WW, WR, RW, PROCESS, REALTIME = range(5)


class Graph:
    """Typed edges between transaction ids, each edge remembering why it exists."""

    def __init__(self) -> None:
        self.out: dict[int, dict[int, dict[str, Any]]] = defaultdict(dict)

    def add(self, a: int, b: int, kind: str, why: Any = None) -> None:
        """The first `why` of each kind stays. A lookup before each insert, not two setdefault
        calls that build a dict every time: a loaded history adds over half a million edges."""
        if a == b:
            return
        succ = self.out[a]
        kinds = succ.get(b)
        if kinds is None:
            succ[b] = {kind: why}
        elif kind not in kinds:
            kinds[kind] = why

    def successors(self, a: int, kinds: frozenset[str]) -> Iterable[int]:
        for b, ks in self.out.get(a, {}).items():
            if not kinds.isdisjoint(ks):
                yield b

    def label(self, a: int, b: int) -> int:
        """The index in `PRIORITY` of the kind that explains a→b."""
        kinds = self.out[a][b]
        return next(i for i, k in enumerate(PRIORITY) if k in kinds)


def strongly_connected(nodes: Iterable[int], succ: Callable[[int], Iterable[int]],
                       singletons: bool = False) -> list[list[int]]:
    """Tarjan's algorithm, iterative (histories have 100k+ transactions). Components come out
    sinks first (reverse topological order); single nodes only with `singletons`, since the
    graph has no self-edges."""
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
                    if singletons or len(comp) > 1:
                        out.append(comp)
    return out
