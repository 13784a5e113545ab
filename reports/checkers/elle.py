"""Elle-style transactional checking for list-append and rw-register histories.

A transaction is an op with f "txn" whose value is a list of micro-ops `[f, key, value]`:
list-append uses `append` and `r` (a read returns the whole list), rw-register uses `w` and `r`.
Appended (written) values are assumed unique per key, as Elle's generators guarantee; that is what
lets a read name the transaction that wrote what it saw. From the reads we infer each key's version
order, build the dependency graph (ww, wr, rw, plus process and realtime orders), and search its
strongly connected components for cycles (see `cycles`). Non-cycle anomalies (G1a, G1b, internal
inconsistency, duplicate elements, incompatible orders) are found directly.

`check_list_append` and `check_rw_register` return {"checker", "verdict", "anomalies",
"anomaly_types", "ruled_out", "transactions"}; each anomaly has "type", "explanation" and, for
cycles, "transactions" and "edges".
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from reports.checkers.cycles import Graph, find_anomalies, ruled_out
from reports.history import Op, client_ops

READS = ("r", "read")
APPENDS = ("append",)
WRITES = ("w", "write")


class Txn:
    __slots__ = ("id", "process", "type", "mops", "invoke", "complete")

    def __init__(self, id: int, invoke: Op, complete: Op | None):
        self.id = id
        self.process = invoke.process
        self.invoke = invoke
        self.complete = complete
        self.type = "info" if complete is None else complete.type
        source = complete if complete is not None and complete.type == "ok" else invoke
        self.mops = [(str(m[0]), _key(m[1]), _val(m[2]) if len(m) > 2 else None)
                     for m in (source.value or invoke.value or ())]

    def describe(self) -> dict:
        return {"index": self.invoke.index, "process": self.process, "type": self.type,
                "value": [[f, _plain(k), _plain(v)] for f, k, v in self.mops]}


def _key(k: Any) -> Any:
    return str(k) if isinstance(k, str) else k


def _val(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return str(v) if isinstance(v, str) else v


def transactions(ops: Iterable[Op]) -> list[Txn]:
    """Pair txn invokes with completions (in invoke order)."""
    txns: list[Txn] = []
    open_by_process: dict[Any, int] = {}
    pending: list[tuple[Op, Op | None]] = []
    for op in client_ops(ops):
        if op.type == "invoke":
            open_by_process[op.process] = len(pending)
            pending.append((op, None))
        elif (at := open_by_process.pop(op.process, -1)) >= 0:
            pending[at] = (pending[at][0], op)
    for inv, comp in pending:
        if comp is not None and comp.type == "info":
            comp = None
        txns.append(Txn(len(txns), inv, comp))
    return txns


def _order_edges(graph: Graph, txns: list[Txn], ops_order: dict[int, int]) -> None:
    """Process order (consecutive ok txns of a process) and a transitively reduced realtime
    order: when a txn begins, every txn on the completed frontier precedes it."""
    last_of_process: dict[Any, Txn] = {}
    events: list[tuple[int, int, Txn]] = []
    for t in txns:
        if t.type != "ok":
            continue
        if (prev := last_of_process.get(t.process)) is not None:
            graph.add(prev.id, t.id, "process", {"process": _plain(t.process)})
        last_of_process[t.process] = t
        events.append((ops_order[id(t.invoke)], 1, t))
        events.append((ops_order[id(t.complete)], 0, t))
    events.sort(key=lambda e: (e[0], e[1]))
    frontier: set[int] = set()
    preds: dict[int, frozenset[int]] = {}
    for _, is_invoke, t in events:
        if is_invoke:
            preds[t.id] = frozenset(frontier)
            for p in frontier:
                graph.add(p, t.id, "realtime", None)
        else:
            frontier -= preds[t.id]
            frontier.add(t.id)


def _result(checker: str, txns: list[Txn], anomalies: list[dict]) -> dict:
    types = sorted({a["type"] for a in anomalies})
    real = [t for t in types if t != "cycle-search-timeout"]
    return {
        "checker": checker,
        "verdict": "invalid" if real else "unknown" if types else "valid",
        "anomaly_types": types,
        "anomalies": anomalies,
        "ruled_out": ruled_out(types),
        "transactions": len(txns),
    }


def _explainer(verb: str):
    """Words for one dependency edge `a < b`, for a history whose writes are `verb`s."""

    def explain(a: str, b: str, kind: str, why: Any) -> str:
        w = why or {}
        if kind == "ww" and verb == "append":
            return f"{b} appended {w['next']!r} after {a}'s append of {w['value']!r} to key {w['key']!r}"
        if kind == "ww":
            return f"{b} overwrote {a}'s write of {w['value']!r} to key {w['key']!r} with {w['next']!r}"
        if kind == "wr":
            return f"{b} read {a}'s {verb} of {w['value']!r} to key {w['key']!r}"
        if kind == "rw":
            return f"{a} read key {w['key']!r} without {b}'s {verb} of {w['next']!r}, which came later"
        if kind == "process":
            return f"process {w['process']!r} ran {a} before {b}"
        return f"{a} completed before {b} began"

    return explain


def _search(checker: str, verb: str, txns: list[Txn], graph: Graph, anomalies: list[dict],
            ops: list[Op], steps: int, seconds: float) -> dict:
    ops_order = {id(op): i for i, op in enumerate(ops)}
    _order_edges(graph, txns, ops_order)
    nodes = [t.id for t in txns if t.type != "fail"]
    anomalies += find_anomalies(graph, nodes, lambda i: txns[i].describe(), _explainer(verb),
                                steps_per_component=steps, seconds_per_component=seconds)
    return _result(checker, txns, anomalies)


def _simple(kind: str, txn: Txn, explanation: str, **extra: Any) -> dict:
    return {"type": kind, "transactions": [{"name": "T1", **txn.describe()}], "explanation": explanation, **extra}


def check_list_append(ops: Iterable[Op], steps_per_component: int = 200_000,
                      seconds_per_component: float = 10.0) -> dict:
    ops = list(ops)
    txns = transactions(ops)
    anomalies: list[dict] = []
    writer: dict[tuple[Any, Any], Txn] = {}
    aborted: dict[tuple[Any, Any], Txn] = {}
    appends: dict[tuple[int, Any], list[Any]] = defaultdict(list)  # (txn, key) -> its appends
    for t in txns:
        for f, k, v in t.mops:
            if f in APPENDS:
                (aborted if t.type == "fail" else writer)[(k, v)] = t
                appends[(t.id, k)].append(v)
    aborted_by_key: dict[Any, set] = defaultdict(set)
    for k, x in aborted:
        aborted_by_key[k].add(x)
    longest: dict[Any, tuple] = {}
    reads: list[tuple[Txn, Any, tuple]] = []
    for t in txns:
        if t.type != "ok":
            continue
        seen: dict[Any, list] = {}  # key -> what this txn expects the key to hold now
        own: dict[Any, list] = defaultdict(list)  # key -> own appends since its last read
        for f, k, v in t.mops:
            if f in APPENDS:
                own[k].append(v)
                if k in seen:
                    seen[k].append(v)
                continue
            if f not in READS or v is None:
                continue
            v = tuple(v) if isinstance(v, (list, tuple)) else (v,)
            elements = set(v)
            for x in aborted_by_key[k] & elements if k in aborted_by_key else ():
                anomalies.append(_simple("G1a", t, f"T1 read {x!r} in key {k!r}, appended by a transaction "
                                         f"that failed (index {aborted[(k, x)].invoke.index})", key=_plain(k)))
            if len(elements) != len(v):
                dups = sorted({x for x in v if v.count(x) > 1}, key=repr)
                anomalies.append(_simple("duplicate-elements", t,
                                         f"T1 read key {k!r} = {list(v)!r}, which holds {dups!r} more than once",
                                         key=_plain(k)))
            expected = seen.get(k)
            mine = own.get(k, [])
            if (expected is not None and list(v) != expected) or (
                    expected is None and mine and list(v[-len(mine):]) != mine):
                want = expected if expected is not None else f"a list ending in {mine!r}"
                anomalies.append(_simple("internal", t,
                                         f"T1 read key {k!r} = {list(v)!r} but its own earlier operations imply {want!r}",
                                         key=_plain(k)))
            seen[k] = list(v)
            own[k] = []
            external = v[: len(v) - len(mine)] if expected is None and mine else v
            reads.append((t, k, external if expected is None else v))
            cur = longest.get(k, ())
            if len(v) >= len(cur):
                if v[: len(cur)] != cur:
                    anomalies.append(_incompatible(t, k, cur, v))
                longest[k] = v
            elif cur[: len(v)] != v:
                anomalies.append(_incompatible(t, k, cur, v))
    graph = Graph()
    for t, k, v in reads:
        if v:
            w = writer.get((k, v[-1]))
            if w is not None and w is not t:
                mine = appends[(w.id, k)]
                if mine and mine[-1] != v[-1]:
                    anomalies.append(_simple("G1b", t, f"T1 read key {k!r} ending in {v[-1]!r}, an intermediate "
                                             f"append of the transaction at index {w.invoke.index}, whose final "
                                             f"append to {k!r} was {mine[-1]!r}", key=_plain(k)))
                graph.add(w.id, t.id, "wr", {"key": _plain(k), "value": _plain(v[-1])})
        order = longest.get(k, ())
        if len(v) < len(order):
            nxt = writer.get((k, order[len(v)]))
            if nxt is not None:
                graph.add(t.id, nxt.id, "rw", {"key": _plain(k), "next": _plain(order[len(v)])})
    for k, order in longest.items():
        for x, y in itertools.pairwise(order):
            a, b = writer.get((k, x)), writer.get((k, y))
            if a is not None and b is not None:
                graph.add(a.id, b.id, "ww", {"key": _plain(k), "value": _plain(x), "next": _plain(y)})
    return _search("list-append", "append", txns, graph, anomalies, ops, steps_per_component,
                   seconds_per_component)


def _incompatible(t: Txn, k: Any, a: tuple, b: tuple) -> dict:
    return _simple("incompatible-order", t, f"key {k!r} was read as {list(a)!r} and as {list(b)!r}: "
                   f"neither is a prefix of the other, so no single order of appends explains both",
                   key=_plain(k))


def check_rw_register(ops: Iterable[Op], steps_per_component: int = 200_000,
                      seconds_per_component: float = 10.0) -> dict:
    """Version order comes from transactions that read a key and then wrote it (the read value
    precedes the written one) and from the initial nil preceding every write."""
    ops = list(ops)
    txns = transactions(ops)
    anomalies: list[dict] = []
    writer: dict[tuple[Any, Any], Txn] = {}
    aborted: dict[tuple[Any, Any], Txn] = {}
    final_write: dict[tuple[int, Any], Any] = {}
    for t in txns:
        for f, k, v in t.mops:
            if f in WRITES:
                (aborted if t.type == "fail" else writer)[(k, v)] = t
                final_write[(t.id, k)] = v
    external: list[tuple[Txn, Any, Any]] = []  # (txn, key, value read before own writes)
    successors: dict[Any, dict[Any, set]] = defaultdict(lambda: defaultdict(set))
    for t in txns:
        if t.type != "ok":
            continue
        known: dict[Any, Any] = {}
        first_read: dict[Any, Any] = {}
        for f, k, v in t.mops:
            if f in WRITES:
                known[k] = v
            elif f in READS:
                if k in known:
                    if v != known[k]:
                        anomalies.append(_simple("internal", t, f"T1 read key {k!r} = {v!r} but its own "
                                                 f"earlier operations imply {known[k]!r}", key=_plain(k)))
                    continue
                known[k] = v
                first_read[k] = v
                external.append((t, k, v))
        for k, v in first_read.items():
            if (t.id, k) in final_write:
                successors[k][v].add(final_write[(t.id, k)])
    graph = Graph()
    readers: dict[tuple[Any, Any], list[Txn]] = defaultdict(list)
    for t, k, v in external:
        readers[(k, v)].append(t)
        if v is None:
            continue
        if (k, v) in aborted:
            anomalies.append(_simple("G1a", t, f"T1 read {v!r} from key {k!r}, written by a transaction that "
                                     f"failed (index {aborted[(k, v)].invoke.index})", key=_plain(k)))
        w = writer.get((k, v))
        if w is not None and w is not t:
            if final_write.get((w.id, k)) != v:
                anomalies.append(_simple("G1b", t, f"T1 read {v!r} from key {k!r}, an intermediate write of the "
                                         f"transaction at index {w.invoke.index}, whose final write was "
                                         f"{final_write[(w.id, k)]!r}", key=_plain(k)))
            graph.add(w.id, t.id, "wr", {"key": _plain(k), "value": _plain(v)})
    writes_of: dict[Any, list[Any]] = defaultdict(list)
    for (k, v) in writer:
        writes_of[k].append(v)
    for k, succ in successors.items():
        for v1, nexts in succ.items():
            for v2 in nexts:
                b = writer.get((k, v2))
                a = writer.get((k, v1))
                if a is not None and b is not None:
                    graph.add(a.id, b.id, "ww", {"key": _plain(k), "value": _plain(v1), "next": _plain(v2)})
                if b is not None:
                    for r in readers.get((k, v1), ()):
                        graph.add(r.id, b.id, "rw", {"key": _plain(k), "next": _plain(v2)})
    for (k, v), rs in readers.items():
        if v is None:  # the initial nil precedes every write of the key
            for v2 in writes_of.get(k, ()):
                for r in rs:
                    graph.add(r.id, writer[(k, v2)].id, "rw", {"key": _plain(k), "next": _plain(v2)})
    return _search("rw-register", "write", txns, graph, anomalies, ops, steps_per_component,
                   seconds_per_component)
