"""What the list-append and rw-register checkers share, following Elle's elle.core and elle.txn:
transactions paired from a history, the process and realtime orders, lost updates, and turning
anomalies into a verdict for a consistency model.

A transaction is known by its completion (ok, info or fail); a completion with no invoke (some
Jepsen histories keep only completions) stands alone, with no realtime position of its own to
be invoked at. An invoke that never completes is treated as info.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from reports.checkers import consistency
from reports.checkers.cycles import Graph, find_anomalies
from reports.history import Op, client_ops

INIT = "initial state"  # the version every key starts at: nil, or the empty list


class Txn:
    __slots__ = ("id", "process", "type", "mops", "invoke", "complete")

    def __init__(self, id: int, invoke: Op | None, complete: Op | None):
        self.id = id
        self.invoke = invoke
        self.complete = complete
        self.type = "info" if complete is None else complete.type
        first = complete or invoke
        assert first is not None  # a transaction has an invoke, a completion or both
        self.process = first.process
        value = complete.value if complete is not None and isinstance(complete.value, list) else None
        if value is None and invoke is not None:
            value = invoke.value
        self.mops = [(str(m[0]), _key(m[1]), _val(m[2]) if len(m) > 2 else None) for m in value or ()]

    @property
    def index(self) -> int:
        op = self.complete or self.invoke
        assert op is not None  # as in __init__
        return op.index

    def describe(self) -> dict[str, Any]:
        return {"index": self.index, "process": self.process, "type": self.type,
                "value": [[f, plain(k), plain(v)] for f, k, v in self.mops]}


def _key(k: Any) -> Any:
    if isinstance(k, list):
        return tuple(_key(x) for x in k)
    return str(k) if isinstance(k, str) else k


def _val(v: Any) -> Any:
    if not isinstance(v, list):
        return v
    t = tuple(v)  # reads can be long: only nested lists need the slow path
    return tuple(_val(x) for x in t) if list in map(type, t) else t


def plain(v: Any) -> Any:
    """A value back as JSON-friendly lists and plain strings."""
    if isinstance(v, tuple):
        return [plain(x) for x in v]
    return str(v) if isinstance(v, str) else v


def transactions(ops: Iterable[Op]) -> list[Txn]:
    """Pair each txn invoke with its process's next completion, in history order of completion
    (an unfinished invoke at its own position)."""
    txns: list[tuple[int, Op | None, Op | None]] = []
    open_by_process: dict[Any, tuple[int, Op]] = {}
    for at, op in enumerate(client_ops(ops)):
        if op.type == "invoke":
            open_by_process[op.process] = (at, op)
        elif (opened := open_by_process.pop(op.process, None)) is not None:
            txns.append((at, opened[1], op))
        else:
            txns.append((at, None, op))
    txns += [(at, inv, None) for at, inv in open_by_process.values()]
    txns.sort(key=lambda t: t[0])
    return [Txn(i, inv, comp) for i, (_, inv, comp) in enumerate(txns)]


class Edges:
    """The dependency graph plus a count of its edges: Elle reports a history from which no
    dependency at all could be inferred as an empty transaction graph (unknown)."""

    def __init__(self) -> None:
        self.graph = Graph()
        self.count = 0

    def add(self, a: Txn, b: Txn, kind: str, why: Any = None) -> None:
        if a is not b:
            self.graph.add(a.id, b.id, kind, why)
            self.count += 1


def process_edges(edges: Edges, txns: list[Txn]) -> None:
    """Consecutive ok transactions of each process (ops without a process have no session)."""
    last: dict[Any, Txn] = {}
    for t in txns:
        if t.type == "ok" and t.process is not None:
            if (prev := last.get(t.process)) is not None:
                edges.add(prev, t, "process", {"process": plain(t.process)})
            last[t.process] = t


def realtime_edges(edges: Edges, txns: list[Txn], ops: list[Op]) -> None:
    """A transitively reduced realtime order, as Elle draws it: at each invoke, every ok
    transaction on the completed frontier precedes the invoked one (whatever its outcome); an ok
    completion joins the frontier, displacing those that precede it. Info and failed
    transactions never complete, so edges only lead into them."""
    by_op = {id(t.invoke): t for t in txns if t.invoke is not None}
    by_op.update({id(t.complete): t for t in txns if t.complete is not None})
    preds: dict[int, list[Txn]] = defaultdict(list)
    frontier: dict[int, Txn] = {}
    # an Edges' graph is filled inline (other collectors, rw-register's orders, take add())
    out = edges.graph.out if type(edges) is Edges else None
    for op in client_ops(ops):
        t = by_op.get(id(op))
        if t is None:
            continue
        if op.type == "invoke":
            if out is None:
                for p in frontier.values():
                    edges.add(p, t, "realtime", {"index": p.index, "invoked": op.index})
                    preds[t.id].append(p)
                continue
            # edges.add(p, t, "realtime", why), inline, with `why` built only for a pair that
            # has no realtime reason yet: the frontier times the invokes make most of a loaded
            # history's edges, and all but the first reason of a pair's kind are dropped
            tid, mine = t.id, preds[t.id]
            for p in frontier.values():
                if p is not t:
                    if p.id != tid:
                        succ = out[p.id]
                        kinds = succ.get(tid)
                        if kinds is None:
                            succ[tid] = {"realtime": {"index": p.index, "invoked": op.index}}
                        elif "realtime" not in kinds:
                            kinds["realtime"] = {"index": p.index, "invoked": op.index}
                    edges.count += 1
                mine.append(p)
        elif op.type == "ok":
            for p in preds.pop(t.id, ()):
                frontier.pop(p.id, None)
            frontier[t.id] = t


def lost_updates(txns: list[Txn], write: str, empty: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """Two or more committed transactions that read the same version of a key and then both
    wrote it (Elle's lost-update, Adya's H_lu): one of the updates was lost, whatever the order."""
    groups: dict[tuple[Any, Any], list[Txn]] = defaultdict(list)
    for t in txns:
        if t.type != "ok":
            continue
        reads: dict[Any, Any] = {}
        written: set[Any] = set()
        for f, k, v in t.mops:
            if f == write:
                if k not in written and k in reads:
                    groups[(k, reads[k])].append(t)
                    written.add(k)
            elif f == "r" and k not in reads:
                reads[k] = empty(v)
    out = []
    for (k, v), ts in groups.items():
        if len(ts) > 1:
            out.append(anomaly("lost-update", ts, f"{len(ts)} transactions read key {plain(k)!r} = "
                               f"{plain(v)!r} and then each wrote it, so one update was lost",
                               key=plain(k), value=plain(v)))
    return out


def anomaly(kind: str, txns: list[Txn], explanation: str, **extra: Any) -> dict[str, Any]:
    named = [{"name": f"T{i + 1}", **t.describe()} for i, t in enumerate(txns)]
    return {"type": kind, "transactions": named, "explanation": explanation, **extra}


def judge(checker: str, txns: list[Txn], edges: Edges, anomalies: list[dict[str, Any]], ops: list[Op],
          model: Any, explain: Callable[[str, str, str, Any], str], steps: int, seconds: float
          ) -> dict[str, Any]:
    """Add the order edges the model needs, search the graph for cycles, and give the verdict."""
    kind = consistency.needs_order(model)
    if kind == "realtime":
        realtime_edges(edges, txns, ops)
    elif kind == "process":
        process_edges(edges, txns)
    if edges.count == 0:
        anomalies.append({"type": "empty-transaction-graph",
                          "explanation": "no dependency between transactions could be inferred, "
                                         "so nothing can be said about their order"})
    anomalies += find_anomalies(edges.graph, [t.id for t in txns], lambda i: txns[i].describe(), explain,
                                steps_per_component=steps, seconds_per_component=seconds)
    return result(checker, txns, anomalies, model)


def result(checker: str, txns: list[Txn], anomalies: list[dict[str, Any]], model: Any) -> dict[str, Any]:
    """As Elle reports: only anomalies the model proscribes (or that leave the verdict unknown)
    are listed, but the models ruled out are judged from everything found."""
    found = {a["type"] for a in anomalies}
    shown = consistency.reportable(found, model)
    return {
        "checker": checker,
        "verdict": consistency.verdict(found, model),
        "consistency_model": model if isinstance(model, str) else list(model),
        "anomaly_types": sorted(shown),
        "anomalies": [a for a in anomalies if a["type"] in shown],
        **consistency.boundary(found),
        "transactions": len(txns),
    }


def explainer(verb: str) -> Callable[[str, str, str, Any], str]:
    """Words for one dependency edge `a < b`, for a history whose writes are `verb`s."""

    def state(key: Any, value: Any) -> str:
        return f"the initial (empty) state of key {key!r}" if value == INIT else f"{value!r} in key {key!r}"

    def explain(a: str, b: str, kind: str, why: Any) -> str:
        w = why or {}
        if kind == "ww":
            return f"{b}'s {verb} of {w['next']!r} to key {w['key']!r} came right after {a}'s {verb} of {w['value']!r}"
        if kind == "wr":
            return f"{b} read {a}'s {verb} of {w['value']!r} to key {w['key']!r}"
        if kind == "rw":
            return f"{a} read {state(w['key'], w['value'])}, which {b}'s {verb} of {w['next']!r} followed"
        if kind == "process":
            return f"process {w['process']!r} ran {a} before {b}"
        return f"{a} completed (index {w.get('index')}) before {b} was invoked (index {w.get('invoked')})"

    return explain
