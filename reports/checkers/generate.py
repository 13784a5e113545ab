"""Random concurrent histories produced by running a real sequential model, for property tests
and benchmarks: each op takes effect at one instant between its invoke and its completion, so
the history is linearizable by construction (unless deliberately corrupted afterwards)."""

from __future__ import annotations

import random
from typing import Any

from reports.history import Op


def register_history(
    seed: int,
    n_ops: int,
    processes: int = 5,
    keys: int = 1,
    cas: bool = True,
    values: int = 5,
    pending: int = 0,
    pending_f: tuple[str, ...] = ("write", "cas"),
) -> list[Op]:
    """A (cas-)register history of `n_ops` ops over `keys` keys. `pending` of the write/cas ops
    never return (half of them logged as :info, half simply without completion); each may or
    may not have taken effect. Processes that crash are replaced by fresh process ids."""
    rng = random.Random(seed)
    state: dict[int, Any] = {}
    ops: list[Op] = []
    pending_left = pending
    fs = ("read", "write", "cas") if cas else ("read", "write")
    idle = list(range(processes))
    next_process = processes
    # in flight: process -> [f, key, invoke value, applied?, result]
    flight: dict[int, list[Any]] = {}
    invoked = 0
    t = 0

    def emit(type_: str, process: int, f: str, key: int, value: Any) -> None:
        nonlocal t
        t += rng.randint(1, 1000)
        ops.append(Op(index=len(ops), type=type_, f=f, value=value, process=process, time=t,
                      key=key if keys > 1 else None))

    while invoked < n_ops or flight:
        choice = rng.random()
        if idle and invoked < n_ops and (choice < 0.4 or not flight):
            p = idle.pop(rng.randrange(len(idle)))
            f = rng.choice(fs)
            k = rng.randrange(keys)
            v: Any = None if f == "read" else rng.randrange(values)
            if f == "cas":
                v = [rng.randrange(values), rng.randrange(values)]
            flight[p] = [f, k, v, False, None]
            invoked += 1
            emit("invoke", p, f, k, v)
            continue
        p = rng.choice(list(flight))
        f, k, v, applied, result = flight[p]
        if not applied and choice < 0.75:
            cur = state.get(k)
            if f == "read":
                result = ("ok", cur)
            elif f == "write":
                state[k], result = v, ("ok", v)
            elif cur == v[0]:
                state[k], result = v[1], ("ok", v)
            else:
                result = ("fail", v)
            flight[p][3:] = [True, result]
            continue
        if f in pending_f and pending_left and rng.random() < 0.5:
            # the op never returns; whether it took effect is left as it is now
            pending_left -= 1
            del flight[p]
            if rng.random() < 0.5:
                emit("info", p, f, k, v)
            idle.append(next_process)
            next_process += 1
            continue
        if not applied:
            continue
        del flight[p]
        emit(result[0], p, f, k, result[1])
        idle.append(p)
    return ops


def corrupt_one_read(ops: list[Op], seed: int) -> list[Op]:
    """The same history with one ok read's value changed to a value never written."""
    rng = random.Random(seed)
    reads = [i for i, op in enumerate(ops) if op.type == "ok" and op.f == "read"]
    if not reads:
        raise ValueError("history has no ok read to corrupt")
    i = rng.choice(reads)
    out = list(ops)
    bad = ops[i]
    out[i] = Op(index=bad.index, type=bad.type, f=bad.f, value=-1, process=bad.process,
                time=bad.time, key=bad.key)
    return out


def list_append_history(seed: int, n_txns: int, processes: int = 5, keys: int = 5,
                        max_mops: int = 4, corrupt: bool = False, registers: bool = False) -> list[Op]:
    """List-append transactions against a serializable in-memory store: each txn applies
    atomically between its invoke and completion; some fail (no effect) or crash (:info, with or
    without effect). With `corrupt`, a few reads drop their last element (stale reads). With
    `registers`, the same as an rw-register history: `w` writes a unique value, `r` reads the
    latest (None before any write)."""
    rng = random.Random(seed)
    db: dict[int, list[int]] = {}
    counter = 0
    ops: list[Op] = []
    flight: dict[int, list[Any]] = {}  # process -> [invoke mops, applied?, result mops or None]
    idle = list(range(processes))
    next_process = processes
    invoked = 0

    def emit(type_: str, process: int, value: Any) -> None:
        ops.append(Op(index=len(ops), type=type_, f="txn", value=value, process=process, time=len(ops)))

    while invoked < n_txns or flight:
        if idle and invoked < n_txns and (rng.random() < 0.4 or not flight):
            p = idle.pop(rng.randrange(len(idle)))
            mops: list[list[Any]] = []
            for _ in range(rng.randint(1, max_mops)):
                k = rng.randrange(keys)
                if rng.random() < 0.5:
                    counter += 1
                    mops.append(["w" if registers else "append", k, counter])
                else:
                    mops.append(["r", k, None])
            flight[p] = [mops, False, None]
            invoked += 1
            emit("invoke", p, mops)
            continue
        p = rng.choice(list(flight))
        mops, applied, result = flight[p]
        roll = rng.random()
        if not applied and roll < 0.7:
            if rng.random() < 0.05:
                flight[p][1:] = [True, None]  # aborted: no effect
                continue
            result = []
            for f, k, v in mops:
                if f != "r":
                    db.setdefault(k, []).append(v)
                    result.append([f, k, v])
                elif registers:
                    result.append([f, k, db[k][-1] if db.get(k) else None])
                else:
                    result.append([f, k, list(db.get(k, []))])
            flight[p][1:] = [True, result]
            continue
        if roll > 0.97:  # crash: outcome unknown
            del flight[p]
            emit("info", p, mops)
            idle.append(next_process)
            next_process += 1
            continue
        if not applied:
            continue
        del flight[p]
        emit("ok" if result is not None else "fail", p, result if result is not None else mops)
        idle.append(p)
    if corrupt:
        reads = [(i, j) for i, op in enumerate(ops) if op.type == "ok"
                 for j, m in enumerate(op.value) if m[0] == "r" and len(m[2]) > 1]
        for i, j in rng.sample(reads, min(5, len(reads))):
            ops[i].value[j][2] = ops[i].value[j][2][:-1]
    return ops


def stale_read_history(seed: int, n_txns: int, processes: int = 10, keys: int = 3,
                       stale: float = 0.8, max_lag: int = 200, appends_per_key: int = 200) -> list[Op]:
    """List-append transactions over a few hot keys (each touched once per transaction; a key
    is retired for a fresh one after `appends_per_key` appends, as Elle's generator does, so
    reads stay short). A fraction `stale` of read-only transactions read a consistent snapshot
    up to `max_lag` transactions old, as a lagging replica would serve: the history stays
    serializable, but each stale read has an rw edge back to an append that often completed
    before the read began, so with realtime order the whole history ties into one giant
    strongly connected component, the shape of Elle's huge-scc test."""
    rng = random.Random(seed)
    active = list(range(keys))
    db: dict[int, list[tuple[int, int]]] = {k: [] for k in active}  # key -> [(sequence, value)]
    seq = counter = 0
    commits = [0]  # the sequence number after each transaction: the snapshots a read may see
    ops: list[Op] = []
    flight: dict[int, list[Any]] = {}  # process -> [invoke mops, result mops once applied]
    idle = list(range(processes))
    invoked = 0

    def emit(type_: str, process: int, value: Any) -> None:
        ops.append(Op(index=len(ops), type=type_, f="txn", value=value, process=process, time=len(ops)))

    while invoked < n_txns or flight:
        if idle and invoked < n_txns and (rng.random() < 0.5 or not flight):
            p = idle.pop(rng.randrange(len(idle)))
            mops = []
            for k in rng.sample(active, rng.randint(1, min(3, keys))):
                counter += 1
                mops.append(["append", k, counter] if rng.random() < 0.5 else ["r", k, None])
            flight[p] = [mops, None]
            invoked += 1
            emit("invoke", p, mops)
            continue
        p = rng.choice(list(flight))
        mops, result = flight[p]
        if result is None:  # apply atomically now
            read_only = all(f == "r" for f, _, _ in mops)
            lag = rng.randint(1, max_lag) if read_only and rng.random() < stale else 0
            snapshot = commits[max(0, len(commits) - 1 - lag)]
            result = []
            for f, k, v in mops:
                if f == "append":
                    seq += 1
                    db[k].append((seq, v))
                    result.append([f, k, v])
                    if len(db[k]) >= appends_per_key and k in active:
                        active[active.index(k)] = fresh = max(db) + 1
                        db[fresh] = []
                else:
                    result.append([f, k, [v for s, v in db[k] if s <= snapshot]])
            commits.append(seq)
            flight[p][1] = result
            continue
        del flight[p]
        emit("ok", p, result)
        idle.append(p)
    return ops
