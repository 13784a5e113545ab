"""Elle's list-append checker: transactions of `[append k v]` and `[r k list]` micro-ops.

Appended values are unique per key, so every read names the transactions it saw, and the
longest read of a key gives a prefix of that key's version order (other reads must be prefixes
of it, or the order is incompatible). A nil read is the initial, empty list. From that order:

- ww: an append depends on the append just before it in the order; an append no read observed
  came after the last element of the longest read (or after the initial state);
- wr: a read depends on the append of its last element;
- rw: every read of the state just before an append precedes that append.

Failed transactions contribute nothing to the graph, but reads of their appends are aborted
reads (G1a), and an aborted append followed by a committed one in the order is a dirty update.
Info transactions may have committed: their appends join the graph, their nil reads do not.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from reports.checkers import consistency
from reports.checkers.elle_txn import (
    INIT,
    Edges,
    Txn,
    anomaly,
    explainer,
    judge,
    lost_updates,
    plain,
    result,
    transactions,
)
from reports.history import Op

APPEND, READ = "append", "r"


def _list(v: Any) -> tuple[Any, ...]:
    """A read's list; nil is the initial empty version."""
    if v is None:
        return ()
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


def _reads(t: Txn) -> Iterable[tuple[Any, tuple[Any, ...]]]:
    """The reads of a transaction that observed something: an info txn's nil read is no
    observation (it never returned), an ok txn's nil read is the initial state."""
    for f, k, v in t.mops:
        if f == READ and not (t.type == "info" and v is None):
            yield k, _list(v)


def check_list_append(ops: Iterable[Op], consistency_model: Any = consistency.DEFAULT_MODEL,
                      steps_per_component: int = 200_000, seconds_per_component: float = 10.0) -> dict[str, Any]:
    ops = list(ops)
    txns = transactions(ops)
    if (bad := _premise(txns)) is not None:
        return result("list-append", txns, [bad], consistency_model)
    possible = [t for t in txns if t.type in ("ok", "info")]
    oks = [t for t in txns if t.type == "ok"]
    anomalies = (_aborted_reads(txns, oks) + _intermediate_reads(txns, oks) + _internal(oks)
                 + _duplicates(possible) + lost_updates(txns, APPEND, _list))
    orders, incompatible = _version_orders(possible)
    anomalies += incompatible
    anomalies += _garbage_and_dirty_updates(txns, oks)
    edges = Edges()
    _data_edges(edges, possible, orders)
    return judge("list-append", txns, edges, anomalies, ops, consistency_model, explainer("append"),
                 steps_per_component, seconds_per_component)


def _premise(txns: list[Txn]) -> dict[str, Any] | None:
    """Elle stops (unknown) on micro-ops other than append/r, or a value appended twice to a key."""
    seen: dict[tuple[Any, Any], Txn] = {}
    for t in txns:
        for f, k, v in t.mops:
            if f not in (APPEND, READ):
                return anomaly("unexpected-txn-micro-op-types", [t], f"T1 has a {f!r} micro-op; "
                               "list-append histories hold only appends and reads")
            if f == APPEND:
                if (k, v) in seen:
                    return anomaly("duplicate-appends", [seen[(k, v)], t], f"{v!r} was appended to key "
                                   f"{plain(k)!r} more than once, so reads cannot name their writer")
                seen[(k, v)] = t
    return None


def _aborted_reads(txns: list[Txn], oks: list[Txn]) -> list[dict[str, Any]]:
    failed: dict[Any, dict[Any, Txn]] = defaultdict(dict)
    for t in txns:
        if t.type == "fail":
            for f, k, v in t.mops:
                if f == APPEND:
                    failed[k][v] = t
    out = []
    for t in oks:
        for k, v in _reads(t):
            if k not in failed or failed[k].keys().isdisjoint(v):
                continue
            for e in sorted(failed[k].keys() & set(v), key=v.index):
                out.append(anomaly("G1a", [t, failed[k][e]], f"T1 read {e!r} in key {plain(k)!r}, appended by "
                                   "T2, which failed", key=plain(k), element=plain(e)))
    return out


def _intermediate_reads(txns: list[Txn], oks: list[Txn]) -> list[dict[str, Any]]:
    """A read ending in an append its writer followed with another append to the same key."""
    intermediate: dict[tuple[Any, Any], Txn] = {}
    for t in txns:
        last: dict[Any, Any] = {}
        for f, k, v in t.mops:
            if f == APPEND:
                if k in last:
                    intermediate[(k, last[k])] = t
                last[k] = v
    out = []
    for t in oks:
        for k, v in _reads(t):
            if v and (w := intermediate.get((k, v[-1]))) is not None and w is not t:
                out.append(anomaly("G1b", [t, w], f"T1 read key {plain(k)!r} ending in {v[-1]!r}, an "
                                   f"intermediate append of T2, which appended to {plain(k)!r} again "
                                   "afterwards", key=plain(k), element=plain(v[-1])))
    return out


def _internal(oks: list[Txn]) -> list[dict[str, Any]]:
    out = []
    for t in oks:
        if (case := _internal_case(t)) is not None:
            out.append(case)
        if (case := _future_read(t)) is not None:
            out.append(case)
    return out


def _internal_case(t: Txn) -> dict[str, Any] | None:
    """A read disagreeing with the txn's own earlier read or appends of that key. After appends
    to a key not yet read, only the suffix is known."""
    known: dict[Any, tuple[Any, ...]] = {}  # key -> full expected list
    suffix: dict[Any, tuple[Any, ...]] = {}  # key -> own appends, prefix unknown
    for f, k, v in t.mops:
        if f == APPEND:
            if k in known:
                known[k] += (v,)
            else:
                suffix[k] = suffix.get(k, ()) + (v,)
            continue
        if f != READ:
            continue
        seen = _list(v)
        if k in known:
            expected, ok = list(known[k]), known[k] == seen
        elif k in suffix:
            tail = suffix[k]
            expected, ok = ["...", *tail], seen[len(seen) - len(tail):] == tail and len(seen) >= len(tail)
        else:
            known[k] = seen
            continue
        if not ok:
            return anomaly("internal", [t], f"T1 read key {plain(k)!r} = {plain(seen)!r}, but its own earlier "
                           f"reads and appends imply {plain(expected)!r}", key=plain(k), expected=plain(expected))
        known[k] = seen
        suffix.pop(k, None)
    return None


def _future_read(t: Txn) -> dict[str, Any] | None:
    """A read that already shows an element the same txn appends only later."""
    own: dict[Any, set[Any]] = defaultdict(set)
    for f, k, v in t.mops:
        if f == APPEND:
            own[k].add(v)
    read: dict[tuple[Any, Any], tuple[Any, ...]] = {}
    for f, k, v in t.mops:
        if f == READ and k in own:
            for e in own[k].intersection(_list(v)):
                read.setdefault((k, e), _list(v))
        elif f == APPEND and (k, v) in read:
            return anomaly("future-read", [t], f"T1 read key {plain(k)!r} = {plain(read[(k, v)])!r}, which "
                           f"includes {v!r}, before appending {v!r} itself", key=plain(k), element=plain(v))
    return None


def _duplicates(possible: list[Txn]) -> list[dict[str, Any]]:
    out = []
    for t in possible:
        for k, v in _reads(t):
            if len(set(v)) != len(v):
                dups = sorted({e for e in v if v.count(e) > 1}, key=repr)
                out.append(anomaly("duplicate-elements", [t], f"T1 read key {plain(k)!r} = {plain(v)!r}, "
                                   f"which holds {plain(dups)!r} more than once", key=plain(k)))
    return out


def _version_orders(possible: list[Txn]) -> tuple[dict[Any, tuple[Any, ...]], list[dict[str, Any]]]:
    """Each key's order of appends: its longest read, which every other read must prefix.
    A key never read non-empty but appended exactly once has the order [that append]."""
    v: Any  # a read's tuple in the first loop, an append's value in the second
    values: dict[Any, set[tuple[Any, ...]]] = defaultdict(set)
    for t in possible:
        for k, v in _reads(t):
            if v:
                values[k].add(v)
    appends: dict[Any, list[Any]] = defaultdict(list)
    for t in possible:
        for f, k, v in t.mops:
            if f == APPEND:
                appends[k].append(v)
    orders: dict[Any, tuple[Any, ...]] = {k: (vs[0],) for k, vs in appends.items() if len(vs) == 1 and k not in values}
    out = []
    for k, vs in values.items():
        ordered = sorted(vs, key=len)
        for a, b in itertools.pairwise(ordered):
            if b[:len(a)] != a:
                out.append({"type": "incompatible-order", "key": plain(k), "values": [plain(a), plain(b)],
                            "explanation": f"key {plain(k)!r} was read as {plain(a)!r} and as {plain(b)!r}: "
                                           "neither is a prefix of the other, so no single order of appends "
                                           "explains both"})
                break
        orders[k] = tuple(dict.fromkeys(ordered[-1]))
    return orders, out


def _garbage_and_dirty_updates(txns: list[Txn], oks: list[Txn]) -> list[dict[str, Any]]:
    """Walk each key's order (from reads by transactions of any outcome) with the outcome of each
    element's writer: a failed append followed, past info ones, by a committed append is a dirty
    update; an element nobody appended is a garbage read."""
    writer: dict[tuple[Any, Any], Txn] = {}
    appended: dict[Any, set[Any]] = defaultdict(set)
    for t in txns:
        for f, k, v in t.mops:
            if f == APPEND:
                writer[(k, v)] = t
                appended[k].add(v)
    out = []
    for t in oks:
        for k, v in _reads(t):
            if appended[k].issuperset(v):
                continue
            for e in sorted(set(v) - appended[k], key=v.index):
                out.append(anomaly("garbage-read", [t], f"T1 read {e!r} in key {plain(k)!r}, which no "
                                   "transaction ever appended", key=plain(k), element=plain(e)))
    longest: dict[Any, tuple[Any, ...]] = {}
    for t in txns:
        for k, v in _reads(t):
            if len(v) > len(longest.get(k, ())):
                longest[k] = v
    for k, order in longest.items():
        base: Txn | None = None  # the last non-info writer so far (None: the committed initial state)
        since: list[Any] = []
        for e in dict.fromkeys(order):
            if (w := writer.get((k, e))) is None:
                continue
            since.append(e)
            if w.type == "info" or (w.type == "fail" and base is not None and base.type == "fail"):
                continue  # can't tell yet / still inside an aborted stretch
            if w.type == "ok" and base is not None and base.type == "fail":
                out.append(anomaly("dirty-update", [base, w], f"in key {plain(k)!r}, T2's committed append of "
                                   f"{e!r} came after T1's failed append (versions {plain(since)!r}), promoting "
                                   "aborted state into committed state", key=plain(k), values=plain(since)))
            base, since = w, [e]
    return out


def _data_edges(edges: Edges, possible: list[Txn], orders: dict[Any, tuple[Any, ...]]) -> None:
    index = {k: {e: i for i, e in enumerate(order)} for k, order in orders.items()}
    writer: dict[tuple[Any, Any], Txn] = {}
    readers: dict[tuple[Any, Any], list[Txn]] = defaultdict(list)
    for t in possible:
        for f, k, v in t.mops:
            if f == APPEND:
                writer[(k, v)] = t
        for k, v in _reads(t):
            readers[(k, v[-1] if v else INIT)].append(t)
    for t in possible:
        for f, k, v in t.mops:
            if f == READ:
                seen = _list(v)
                if seen and (w := writer.get((k, seen[-1]))) is not None:
                    edges.add(w, t, "wr", {"key": plain(k), "value": plain(seen[-1])})
                continue
            at = index.get(k, {}).get(v)
            if at is not None:
                prev = orders[k][at - 1] if at > 0 else INIT
            else:  # never observed: it came after everything that was
                prev = orders[k][-1] if orders.get(k) else INIT
            why = {"key": plain(k), "value": plain(prev), "next": plain(v)}
            if prev != INIT and (w := writer.get((k, prev))) is not None:
                edges.add(w, t, "ww", why)
            for r in readers.get((k, prev), ()):
                edges.add(r, t, "rw", why)
