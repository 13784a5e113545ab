"""Elle's rw-register checker: transactions of `[w k v]` and `[r k v]` micro-ops over registers.

Writes are unique per key, so a read names its writer (wr), but a register's reads say little
about the order of versions. As Elle does, we work from each transaction's external reads (the
first read of a key before writing it) and external writes (its last write of a key), and build
per-key version graphs from sources, in order:

- always: nil, the initial state, precedes every other version;
- `wfr_keys`: writes follow reads within a transaction (its external read precedes its write);
- `sequential_keys`: each key is sequentially consistent, so process order orders versions;
- `linearizable_keys`: each key is linearizable, so realtime order orders versions.

A source whose versions would form a cycle is left out and reported as cyclic-versions. Every
version-graph edge v1 -> v2 then gives ww edges (writers of v1 to writers of v2) and rw edges
(readers of v1 to writers of v2). Only ok transactions take part in ww/wr/rw edges.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from reports.checkers import consistency
from reports.checkers.elle_txn import (
    Edges,
    Txn,
    anomaly,
    explainer,
    judge,
    lost_updates,
    plain,
    process_edges,
    realtime_edges,
    result,
    transactions,
)
from reports.history import Op

WRITE, READ = "w", "r"


def ext_reads(t: Txn) -> dict[Any, Any]:
    """Key -> value of the txn's first read of it, if that came before any write of it."""
    written, out = set(), {}
    for f, k, v in t.mops:
        if f == WRITE:
            written.add(k)
        elif f == READ and k not in written and k not in out:
            out[k] = v
    return out


def ext_writes(t: Txn) -> dict[Any, Any]:
    """Key -> the txn's last write of it."""
    return {k: v for f, k, v in t.mops if f == WRITE}


def check_rw_register(ops: Iterable[Op], consistency_model: Any = consistency.DEFAULT_MODEL,
                      wfr_keys: bool = False, sequential_keys: bool = False, linearizable_keys: bool = False,
                      steps_per_component: int = 200_000, seconds_per_component: float = 10.0) -> dict[str, Any]:
    ops = list(ops)
    txns = transactions(ops)
    oks = [t for t in txns if t.type == "ok"]
    anomalies = _internal(oks) + _aborted_and_intermediate_reads(txns, oks) + lost_updates(txns, WRITE, lambda v: v)
    write_index: dict[tuple[Any, Any], list[Txn]] = defaultdict(list)
    read_index: dict[tuple[Any, Any], list[Txn]] = defaultdict(list)
    for t in oks:
        for k, v in ext_writes(t).items():
            write_index[(k, v)].append(t)
        for k, v in ext_reads(t).items():
            read_index[(k, v)].append(t)
    edges = Edges()
    for (k, v), readers in read_index.items():
        writers = write_index.get((k, v), [])
        if len(writers) > 1:
            bad = anomaly("duplicate-writes", writers, f"{len(writers)} transactions wrote {v!r} to key "
                          f"{plain(k)!r}, so its readers cannot name their writer", key=plain(k))
            return result("rw-register", txns, [bad], consistency_model)
        for r in readers:
            if writers:
                edges.add(writers[0], r, "wr", {"key": plain(k), "value": plain(v)})
    sources: list[tuple[str, Callable[[list[Txn]], Versions]]] = [("initial-state", _initial_state)]
    if wfr_keys:
        sources.append(("wfr-keys", _writes_follow_reads))
    if sequential_keys:
        sources.append(("sequential-keys", lambda ts: _from_order(ts, _order(process_edges, ts))))
    if linearizable_keys:
        sources.append(("linearizable-keys", lambda ts: _from_order(ts, _order(realtime_edges, ts, ops))))
    versions, cyclic = _version_graphs(txns, sources)
    anomalies += cyclic
    for k, graph in versions.items():
        for v1, nexts in graph.items():
            for v2 in nexts:
                why = {"key": plain(k), "value": plain(v1), "next": plain(v2)}
                for b in write_index.get((k, v2), ()):
                    for a in write_index.get((k, v1), ()):
                        edges.add(a, b, "ww", why)
                    for a in read_index.get((k, v1), ()):
                        edges.add(a, b, "rw", why)
    return judge("rw-register", txns, edges, anomalies, ops, consistency_model, _explain,
                 steps_per_component, seconds_per_component)


_words = explainer("write")


def _explain(a: str, b: str, kind: str, why: Any) -> str:
    if kind in ("ww", "rw"):
        did = "set" if kind == "ww" else "read"
        first = "nil (the initial state)" if why["value"] is None else repr(why["value"])
        return (f"{a} {did} key {why['key']!r} = {first} and {b} set it to {why['next']!r}, "
                "which came later in the version order")
    return _words(a, b, kind, why)


def _internal(oks: list[Txn]) -> list[dict[str, Any]]:
    """A read disagreeing with the txn's own earlier write or non-nil read of that key."""
    out = []
    for t in oks:
        state: dict[Any, Any] = {}
        for f, k, v in t.mops:
            if f == WRITE:
                state[k] = v
            elif f == READ:
                if state.get(k) is not None and state[k] != v:
                    out.append(anomaly("internal", [t], f"T1 read key {plain(k)!r} = {plain(v)!r}, but its own "
                                       f"earlier operations imply {plain(state[k])!r}", key=plain(k),
                                       expected=plain(state[k])))
                    break
                state[k] = v
    return out


def _aborted_and_intermediate_reads(txns: list[Txn], oks: list[Txn]) -> list[dict[str, Any]]:
    failed: dict[tuple[Any, Any], Txn] = {}
    intermediate: dict[tuple[Any, Any], Txn] = {}
    for t in txns:
        last: dict[Any, Any] = {}
        for f, k, v in t.mops:
            if f == WRITE:
                if t.type == "fail":
                    failed[(k, v)] = t
                if k in last:
                    intermediate[(k, last[k])] = t
                last[k] = v
    out = []
    for t in oks:
        for f, k, v in t.mops:
            if f != READ or v is None:
                continue
            if (w := failed.get((k, v))) is not None:
                out.append(anomaly("G1a", [t, w], f"T1 read {plain(v)!r} from key {plain(k)!r}, written by T2, "
                                   "which failed", key=plain(k), value=plain(v)))
            if (w := intermediate.get((k, v))) is not None and w is not t:
                out.append(anomaly("G1b", [t, w], f"T1 read {plain(v)!r} from key {plain(k)!r}, an intermediate "
                                   "write of T2, which wrote the key again afterwards", key=plain(k), value=plain(v)))
    return out


Versions = dict[Any, dict[Any, set[Any]]]  # key -> version -> later versions


def _initial_state(txns: list[Txn]) -> Versions:
    """nil precedes every version written (by ok or info txns) or read (by ok txns)."""
    out: Versions = defaultdict(lambda: defaultdict(set))
    for t in txns:
        if t.type == "fail":
            continue
        seen = list(ext_writes(t).items()) + (list(ext_reads(t).items()) if t.type == "ok" else [])
        for k, v in seen:
            if v is not None:
                out[k][None].add(v)
    return out


def _writes_follow_reads(txns: list[Txn]) -> Versions:
    out: Versions = defaultdict(lambda: defaultdict(set))
    for t in txns:
        if t.type == "ok":
            writes = ext_writes(t)
            for k, v in ext_reads(t).items():
                if v is not None and k in writes and writes[k] != v:
                    out[k][v].add(writes[k])
    return out


class _Order:
    """Collects an order graph (process or realtime) as adjacency, for version inference."""

    def __init__(self) -> None:
        self.succ: dict[int, list[Txn]] = defaultdict(list)

    def add(self, a: Txn, b: Txn, kind: str, why: Any = None) -> None:
        if a is not b:
            self.succ[a.id].append(b)


def _order(draw: Callable[..., None], txns: list[Txn], *args: Any) -> _Order:
    order = _Order()
    draw(order, txns, *args)
    return order


def _from_order(txns: list[Txn], order: _Order) -> Versions:
    """If a precedes b in the order, the last version of k that a touched precedes the first one
    b touched, for the nearest such b along each path (transactions not touching k are passed)."""
    def first(t: Txn) -> dict[Any, Any]:
        if t.type == "ok":
            return {**ext_writes(t), **ext_reads(t)}
        return ext_writes(t) if t.type == "info" else {}

    def last(t: Txn) -> dict[Any, Any]:
        if t.type == "ok":
            return {**ext_reads(t), **ext_writes(t)}
        return ext_writes(t) if t.type == "info" else {}

    firsts = {t.id: first(t) for t in txns}
    out: Versions = defaultdict(lambda: defaultdict(set))
    for a in txns:
        for k, v1 in last(a).items():
            seen = {a.id}
            stack = list(order.succ.get(a.id, ()))
            while stack:
                b = stack.pop()
                if b.id in seen:
                    continue
                seen.add(b.id)
                if k in firsts[b.id]:
                    if firsts[b.id][k] != v1:
                        out[k][v1].add(firsts[b.id][k])
                else:
                    stack.extend(order.succ.get(b.id, ()))
    return out


def _version_graphs(txns: list[Txn], sources: Iterable[tuple[str, Callable[[list[Txn]], Versions]]]
                    ) -> tuple[Versions, list[dict[str, Any]]]:
    graphs: Versions = defaultdict(lambda: defaultdict(set))
    used: list[str] = []
    anomalies: list[dict[str, Any]] = []
    for name, source in sources:
        merged: Versions = defaultdict(lambda: defaultdict(set))
        for part in (graphs, source(txns)):
            for k, g in part.items():
                for v, nexts in g.items():
                    merged[k][v] |= nexts
        cycles = [(k, scc) for k, g in merged.items() for scc in _cycles(g)]
        if cycles:
            anomalies += [{"type": "cyclic-versions", "key": plain(k), "scc": sorted(map(plain, scc), key=repr),
                           "sources": used + [name],
                           "explanation": f"inferring versions of key {plain(k)!r} from {', '.join(used + [name])} "
                                          f"orders {sorted(map(plain, scc), key=repr)!r} in a cycle, so that "
                                          "source was left out"} for k, scc in cycles]
        else:
            graphs, used = merged, used + [name]
    return graphs, anomalies


def _cycles(graph: dict[Any, set[Any]]) -> list[list[Any]]:
    """Strongly connected components of more than one version (Kosaraju, iteratively)."""
    nodes = set(graph) | {w for ws in graph.values() for w in ws}
    back: dict[Any, list[Any]] = defaultdict(list)
    for v, ws in graph.items():
        for w in ws:
            back[w].append(v)
    finished, seen = [], set()
    for root in nodes:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(graph.get(root, ())))]
        while stack:
            v, it = stack[-1]
            for w in it:
                if w not in seen:
                    seen.add(w)
                    stack.append((w, iter(graph.get(w, ()))))
                    break
            else:
                stack.pop()
                finished.append(v)
    comps, assigned = [], set()
    for root in reversed(finished):
        if root in assigned:
            continue
        comp, stack = [], [root]
        assigned.add(root)
        while stack:
            v = stack.pop()
            comp.append(v)
            for w in back.get(v, ()):
                if w not in assigned:
                    assigned.add(w)
                    stack.append(w)
        if len(comp) > 1:
            comps.append(comp)
    return comps
