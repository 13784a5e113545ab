"""Linearizability: Wing–Gong–Lowe search with memoization, checked per key (P-compositionality).

Per key, ops become calls with an invoke position and (for ok ops) a return position, kept in a
doubly linked event list as in Lowe's algorithm: only calls before the first remaining return are
candidates, so ops are linearized "just in time". Each (linearized ok-op bitset, model state) is
searched once, with a subsumption rule for pending ops (see `_search`).

Jepsen semantics: `fail` ops did not happen and are dropped; `info` ops and invokes without a
completion stay pending to the end of the history — each may take effect anywhere after its
invoke, or never — so the search succeeds once every ok op is placed. Pending ops that are equal
(same f and value) are interchangeable, so they are placed in invoke order only; this symmetry cut
keeps histories full of timed-out writes tractable. A pending read is dropped outright.

Results are plain JSON-friendly dicts (see `check`), the shape the HTML report and the Spark job
read. Inside a Spark executor call `check(..., processes=1)` or `check_key` directly.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from reports.checkers.models import INCONSISTENT, MODELS, Model, Register
from reports.checkers.verdict import merge_verdicts
from reports.history import Op, client_ops

if TYPE_CHECKING:
    from reports.checkers.registry import Options

DEFAULT_TIME_LIMIT = 30.0  # seconds per key
DEFAULT_MAX_STATES = 2_000_000  # memoized configurations per key (~300 B each)
_COUNTEREXAMPLES = 3  # longest partial linearizations kept per invalid key
_PARALLEL_MIN_OPS = 50_000  # below this, forking a worker pool costs more than it saves

# the search's persistent list of placements, newest first: (call id, state after it, the rest)
_Chain: TypeAlias = tuple[int, Any, "_Chain | None"]


class Call:
    """One op of a key's history as the search sees it."""

    __slots__ = ("id", "f", "value", "invoke", "complete", "pending", "process")

    def __init__(self, id: int, f: str, value: Any, invoke: Op, complete: Op | None, pending: bool):
        self.id = id
        self.f = f
        self.value = value
        self.invoke = invoke
        self.complete = complete
        self.pending = pending
        self.process = invoke.process

    def describe(self) -> dict[str, Any]:
        return {
            "process": self.process,
            "f": self.f,
            "value": _jsonable(self.value),
            "type": "info" if self.pending else "ok",
            "invoke_index": self.invoke.index,
            "complete_index": None if self.complete is None else self.complete.index,
        }


def _jsonable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((_jsonable(x) for x in v), key=repr)
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v) if isinstance(v, str) else v


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, list) else v


def _calls(ops: list[Op], model: Model) -> tuple[list[Call], list[tuple[int, int]]]:
    """Pair invokes with completions; returns the calls and the event list (history-ordered
    (call id, is_return) pairs)."""
    open_by_process: dict[Any, int] = {}
    pairs: list[list[Any]] = []  # [invoke, invoke position, completion, completion position]
    for pos, op in enumerate(ops):
        if op.type == "invoke":
            open_by_process[op.process] = len(pairs)
            pairs.append([op, pos, None, -1])
        else:
            at = open_by_process.pop(op.process, -1)
            if at >= 0:
                pairs[at][2:] = [op, pos]
    calls: list[Call] = []
    events: list[tuple[int, int, int]] = []  # (position, is_return, call id)
    for inv, inv_pos, comp, comp_pos in pairs:
        if comp is not None and comp.type == "fail":
            continue
        pending = comp is None or comp.type == "info"
        if pending:
            value = inv.value
            if model.read_only(inv.f, value):
                continue
        else:
            value = comp.value if comp.value is not None else inv.value
        call = Call(len(calls), str(inv.f), _freeze(value), inv, comp, pending)
        calls.append(call)
        events.append((inv_pos, 0, call.id))
        if not pending:
            events.append((comp_pos, 1, call.id))
    events.sort()
    return calls, [(cid, kind) for _, kind, cid in events]


def check_key(ops: list[Op], model: Model, time_limit: float = DEFAULT_TIME_LIMIT,
              max_states: int = DEFAULT_MAX_STATES) -> dict[str, Any]:
    """Check one key's ops (already in history order). Returns {verdict, ops, states, ...}."""
    calls, events = _calls(ops, model)
    started = time.monotonic()
    result = _search(calls, events, model, started + time_limit, max_states)
    result["ops"] = len(calls)
    result["seconds"] = round(time.monotonic() - started, 6)
    return result


def _search(calls: list[Call], events: list[tuple[int, int]], model: Model, deadline: float,
            max_states: int) -> dict[str, Any]:
    """Depth-first WGL over the event list; {verdict, states[, reason][, counterexample]}."""
    n_ev = len(events)
    head = n_ev  # sentinel; events are nodes 0..n_ev-1 of a doubly linked list, -1 ends it
    nxt = list(range(1, n_ev + 1)) + [0 if n_ev else -1]
    prv = list(range(-1, n_ev))
    if n_ev:
        nxt[n_ev - 1] = -1
        prv[0] = head
    ev_call = [cid for cid, _ in events]
    ev_is_ret = [kind for _, kind in events]
    ret_event = [-1] * len(calls)
    for i, (cid, kind) in enumerate(events):
        if kind:
            ret_event[cid] = i
    f_of = [c.f for c in calls]
    val_of = [c.value for c in calls]
    pending_of = [c.pending for c in calls]
    # symmetry: a pending call may be placed only after the previous equal pending call
    prev_equal = [-1] * len(calls)
    last_of_class: dict[Any, int] = {}
    for cid, kind in events:
        c = calls[cid]
        if not kind and c.pending:
            cls = (c.f, repr(c.value))
            prev_equal[cid] = last_of_class.get(cls, -1)
            last_of_class[cls] = cid

    step = model.step
    state = model.init()
    done = 0  # bitset of linearized ok calls
    used = 0  # bitset of linearized pending calls
    remaining = sum(1 for c in calls if not c.pending)
    # (done, state) -> the pending-call sets it was reached with. A configuration reached again
    # with a superset of pending calls already spent has no future the earlier one lacked
    # (pending calls have no deadline), so it is pruned: subsumption, not just equality.
    cache: dict[tuple[int, Any], list[int]] = {}
    states = 0
    stack: list[tuple[int, Any]] = []
    chain: _Chain | None = None  # persistent list of (call id, state after, parent) for reports
    best_depth = -1
    best: list[tuple[_Chain | None, int, Any]] = []
    iterations = 0
    entry = nxt[head]
    while remaining:
        iterations += 1
        if not iterations & 0x3FFF:
            if time.monotonic() > deadline:
                return {"verdict": "unknown", "reason": "time limit", "states": states}
            if states > max_states:
                return {"verdict": "unknown", "reason": f"more than {max_states} states", "states": states}
        if entry >= 0:
            if not ev_is_ret[entry]:
                cid = ev_call[entry]
                p = prev_equal[cid]
                if p < 0 or (used >> p) & 1:
                    new_state = step(state, f_of[cid], val_of[cid])
                    if new_state is not INCONSISTENT:
                        if pending_of[cid]:
                            new_done, new_used = done, used | (1 << cid)
                        else:
                            new_done, new_used = done | (1 << cid), used
                        key = (new_done, new_state)
                        seen = cache.get(key)
                        fresh = seen is None
                        if seen is None:  # that is, fresh
                            cache[key] = [new_used]
                        else:
                            for earlier in seen:
                                if not earlier & ~new_used:
                                    break
                            else:
                                # Keep the sets an antichain: one that new_used is a subset of
                                # prunes nothing new_used does not, so it goes. Without this the
                                # lists grew to thousands, and the scan above, not the search,
                                # took a key with 37 pending calls 44 s (1.2 s now, the same
                                # states visited).
                                seen[:] = [e for e in seen if new_used & ~e]
                                seen.append(new_used)
                                fresh = True
                        if fresh:
                            states += 1
                            stack.append((entry, state))
                            chain = (cid, new_state, chain)
                            done, used, state = new_done, new_used, new_state
                            if not pending_of[cid]:
                                remaining -= 1
                            # lift the call and its return out of the list
                            a, b = prv[entry], nxt[entry]
                            nxt[a] = b
                            if b >= 0:
                                prv[b] = a
                            r = ret_event[cid]
                            if r >= 0:
                                a, b = prv[r], nxt[r]
                                nxt[a] = b
                                if b >= 0:
                                    prv[b] = a
                            entry = nxt[head]
                            continue
                entry = nxt[entry]
                continue
            # a return: its call had to be placed by now and could not be
            depth = len(stack)
            if depth > best_depth:
                best_depth, best = depth, [(chain, ev_call[entry], state)]
            elif depth == best_depth and len(best) < _COUNTEREXAMPLES:
                best.append((chain, ev_call[entry], state))
        # backtrack: undo the most recent placement and try the next candidate after it
        if not stack:
            return {"verdict": "invalid", "states": states,
                    "counterexample": _counterexample(calls, model, best)}
        entry, state = stack.pop()
        cid = ev_call[entry]
        chain = chain[2]  # type: ignore[index]  # not None: every placement on the stack consed a link
        if pending_of[cid]:
            used ^= 1 << cid
        else:
            done ^= 1 << cid
            remaining += 1
        r = ret_event[cid]
        if r >= 0:
            nxt[prv[r]] = r
            if nxt[r] >= 0:
                prv[nxt[r]] = r
        nxt[prv[entry]] = entry
        if nxt[entry] >= 0:
            prv[nxt[entry]] = entry
        entry = nxt[entry]
    return {"verdict": "valid", "states": states}


def _counterexample(calls: list[Call], model: Model, best: list[tuple[_Chain | None, int, Any]]) -> dict[str, Any]:
    """The longest partial linearizations, the op that could not be placed after each, and the
    model state it met."""
    paths = []
    for chain, blocked, state in best:
        steps = []
        while chain is not None:
            cid, after, chain = chain
            steps.append({"op": calls[cid].describe(), "state": _jsonable(model.describe(after))})
        steps.reverse()
        c = calls[blocked]
        paths.append({"linearized": steps, "blocked_op": c.describe(),
                      "state": _jsonable(model.describe(state))})
    first = paths[0] if paths else None
    explanation = ""
    if first:
        op = first["blocked_op"]
        explanation = (
            f"after linearizing {len(first['linearized'])} ops the model state is "
            f"{first['state']!r}; process {op['process']}'s {op['f']} {op['value']!r} "
            f"(history index {op['complete_index']}) must take effect before it returns, but no "
            f"order of the ops concurrent with it allows that"
        )
    return {"paths": paths, "explanation": explanation}


def _split_by_key(ops: Iterable[Op]) -> dict[Any, list[Op]]:
    by_key: dict[Any, list[Op]] = defaultdict(list)
    for op in client_ops(ops):
        by_key[_freeze(op.key)].append(op)
    return by_key


# Fork-inherited work for the worker pool: sending only key indices avoids pickling the history.
_WORK: dict[str, Any] = {}


def _check_nth(i: int) -> dict[str, Any]:
    key, ops = _WORK["groups"][i]
    return check_key(ops, _WORK["model"], _WORK["time_limit"], _WORK["max_states"])


def _daemonic() -> bool:
    import multiprocessing

    return multiprocessing.current_process().daemon


def check(ops: Iterable[Op], model: Model | str, time_limit: float = DEFAULT_TIME_LIMIT,
          max_states: int = DEFAULT_MAX_STATES, processes: int | None = None) -> dict[str, Any]:
    """Check a whole history, key by key.

    Returns {"checker", "model", "verdict", "keys": [{"key", "verdict", "ops", "states",
    "seconds", "reason"?, "counterexample"?}], "invalid_keys", "unknown_keys"}."""
    if isinstance(model, str):
        model = MODELS[model]()
    groups = list(_split_by_key(ops).items())
    total = sum(len(g) for _, g in groups)
    workers = processes if processes is not None else min(2, os.cpu_count() or 1)
    if _daemonic():  # a pool's worker (the simulator's seeds) may not start processes of its own
        workers = 1
    if workers > 1 and len(groups) > 1 and total >= _PARALLEL_MIN_OPS:
        import multiprocessing

        _WORK.update(groups=groups, model=model, time_limit=time_limit, max_states=max_states)
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                results = pool.map(_check_nth, range(len(groups)), chunksize=max(1, len(groups) // (8 * workers)))
        finally:
            _WORK.clear()
    else:
        results = [check_key(g, model, time_limit, max_states) for _, g in groups]
    keys = []
    for (key, _), r in zip(groups, results, strict=True):
        keys.append({"key": _jsonable(key), **r})
    return {
        "checker": "linearizability",
        "model": model.name,
        "verdict": merge_verdicts(k["verdict"] for k in keys),
        "keys": keys,
        "invalid_keys": [k["key"] for k in keys if k["verdict"] == "invalid"],
        "unknown_keys": [k["key"] for k in keys if k["verdict"] == "unknown"],
    }


def _judge_by(name: str) -> Callable[[list[Op], Options], list[dict[str, Any]]]:
    """The linearizability search alone, over the model `name` (models.MODELS)."""
    def judge(ops: list[Op], opts: Options) -> list[dict[str, Any]]:
        from reports.checkers.models import MultiRegister

        spec: Model
        if name == "multi-register":
            spec = MultiRegister(opts.initial)
        elif name in ("register", "cas-register"):
            spec = cast(type[Register], MODELS[name])(nil_read_unknown=opts.nil_read_unknown)  # both are Registers
        else:
            spec = MODELS[name]()
        return [check(ops, spec, time_limit=opts.time_limit, max_states=opts.max_states)]
    return judge


def _register() -> None:
    from reports.checkers.registry import Model as Entry
    from reports.checkers.registry import register

    for name in ("cas-register", "register", "mutex", "queue", "multi-register"):
        register(Entry(name, _judge_by(name), linearizable=True))


_register()
