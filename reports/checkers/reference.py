"""A reference executor: transactional histories whose truth is known, to hold the Elle-style
checker to account in both directions (it must flag nothing in a correct history, and must name
every anomaly we plant).

`execute(level, seed, ...)` simulates client processes issuing short random transactions against
an in-memory multi-version store that implements one isolation level exactly, and records the
Jepsen history (invoke, then ok / fail / info, interleaved; info ops that did and did not take
effect; fails that did not; nil reads of never-written keys); `run` returns the same history with
what only the executor knows (the stale reads it served). `inject(anomaly, seed, ...)` takes a
strict-serializable execution and splices in a small gadget of transactions, on keys of its own,
that exhibits one anomaly class under its Elle name. Dedicated keys keep the background from
masking the planted anomaly or adding others; what the gadget itself entails besides (a G1b read
also makes a G-single cycle, a lost update a G-single or G2-item one, a dirty update a G1a read)
is never proscribed by a weaker model than the planted class. The background keeps the checker
honest about noise.

Two flavours: "list-append" (["append", k, x], ["r", k, list-or-None]) and "rw-register"
(["w", k, x], ["r", k, x-or-None]); None is the read of a key never written, as Tessera's tablet
returns for a missing key. Written values are unique per key.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from reports.history import Op

FLAVOURS = ("list-append", "rw-register")
LEVELS = ("strict-serializable", "serializable", "snapshot-isolation", "read-committed")

P_READ_ONLY = 0.25  # read-only txns are what the serializable level may serve from a stale snapshot
P_STALE = 0.2  # of those, how many the serializable level serves from an older snapshot...
MAX_LAG = 8  # ...at most this many commits old
P_ABORT = 0.05  # a commit that aborts on its own (no effect, reported fail)
P_INFO = 0.04  # a completion lost to a crash: info, whether or not the txn took effect
P_CRASH = 0.03  # a client crash before commit: no effect, reported info


class Stale(NamedTuple):
    """An ok read-only txn (the serializable level's) that missed a committed write to a key it
    read. `realtime` says the writer had completed ok before the reader was invoked: then no
    serial order that respects real time explains the read."""

    reader: int  # invoke index
    writer: int  # invoke index
    key: Any
    seen: Any  # the value the reader saw
    realtime: bool


@dataclass
class Execution:
    """A history plus what only the executor knows: whether each txn (by invoke index) took
    effect, and the stale reads it served."""

    ops: list[Op]
    took_effect: dict[int, bool] = field(default_factory=dict)
    stale: list[Stale] = field(default_factory=list)


class _Txn:
    __slots__ = ("mops", "invoke", "steps", "snapshot", "buffer", "result", "aborted", "crashed", "writes",
                 "missed", "complete")

    def __init__(self, mops: list[list[Any]], invoke: int, steps: list[str]):
        self.mops = mops
        self.invoke = invoke  # index of the invoke op
        self.steps = steps
        self.snapshot = 0
        self.buffer: dict[Any, list[Any]] = {}  # key -> own appends, or [last own write]
        self.result: list[list[Any]] = []
        self.aborted = False
        self.crashed = False
        self.writes: set[Any] = set()
        self.missed: list[tuple[_Txn, Any, Any]] = []
        self.complete: tuple[int, str] | None = None  # (index, type) of the completion


class _Store:
    """Committed versions per key, each stamped with the commit sequence number that made it."""

    def __init__(self, flavour: str):
        self.append = flavour == "list-append"
        self.seq = 0
        self.versions: dict[Any, list[tuple[int, Any, _Txn]]] = {}
        self.locks: dict[Any, _Txn] = {}  # read-committed's write locks

    def value(self, k: Any, at: int) -> Any:
        """The committed value of k as of sequence number `at` (None if never written by then)."""
        for seq, v, _ in reversed(self.versions.get(k, ())):
            if seq <= at:
                return v
        return None

    def last_seq(self, k: Any) -> int:
        vs = self.versions.get(k)
        return vs[-1][0] if vs else 0

    def writers_between(self, k: Any, lo: int, hi: int) -> list[_Txn]:
        return [t for seq, _, t in self.versions.get(k, ()) if lo < seq <= hi]

    def commit(self, t: _Txn) -> None:
        self.seq += 1
        for k, own in t.buffer.items():
            if self.append:
                new = tuple(self.value(k, self.seq) or ()) + tuple(own)
            else:
                new = own[-1]
            self.versions.setdefault(k, []).append((self.seq, new, t))

    def read(self, t: _Txn, k: Any, at: int) -> Any:
        """What t reads of k: the committed value as of `at`, overlaid with its own writes."""
        base, own = self.value(k, at), t.buffer.get(k)
        if not own:
            return list(base) if self.append and base is not None else base
        return list(base or ()) + own if self.append else own[-1]


def _steps(level: str, n_mops: int) -> list[str]:
    if level in ("strict-serializable", "serializable"):
        return ["atomic", "complete"]
    if level == "snapshot-isolation":
        return ["begin", "commit", "complete"]
    if level == "read-committed":
        return ["mop"] * n_mops + ["commit", "complete"]
    raise ValueError(f"unknown isolation level {level!r}; known: {', '.join(LEVELS)}")


def _run_mops(store: _Store, t: _Txn, at: int, mops: list[list[Any]]) -> None:
    """Execute mops against the snapshot `at`, buffering writes; record results."""
    for f, k, v in mops:
        if f == "r":
            t.result.append([f, k, store.read(t, k, at)])
        else:
            t.buffer.setdefault(k, []).append(v)
            t.writes.add(k)
            t.result.append([f, k, v])


def run(level: str, seed: int, txns: int = 60, processes: int = 5, keys: int = 4,
        flavour: str = "list-append", max_mops: int = 4) -> Execution:
    """Run `txns` random transactions at `level` (see LEVELS) and record the history.

    strict-serializable: each txn takes effect atomically at one instant between invoke and
    completion. serializable: the same, except that some read-only txns read a stale but
    consistent snapshot (a prefix of the commit order), so the serial order can disagree with
    real time. snapshot-isolation: reads from the snapshot taken at begin, commit at end,
    first committer wins (a txn whose written key was committed since its snapshot aborts).
    read-committed: every read sees the latest committed state at that moment (plus the txn's own
    writes); a write takes the key's lock (no-wait: a txn finding it taken aborts) and is applied
    at commit, so no one commits over a txn's pending appends, which its own reads already show.
    """
    if flavour not in FLAVOURS:
        raise ValueError(f"unknown flavour {flavour!r}; known: {', '.join(FLAVOURS)}")
    rng = random.Random(seed)
    store = _Store(flavour)
    write_f = "append" if flavour == "list-append" else "w"
    ops: list[Op] = []
    done: list[_Txn] = []
    flight: dict[int, _Txn] = {}
    idle = list(range(processes))
    next_process = processes
    counter = 0
    invoked = 0

    def emit(type_: str, process: int, value: Any) -> int:
        last = ops[-1].time if ops else 0
        assert last is not None  # every op emitted here has a time
        t = last + rng.randint(1, 1000)
        ops.append(Op(index=len(ops), type=type_, f="txn", value=value, process=process, time=t))
        return len(ops) - 1

    while invoked < txns or flight:
        if idle and invoked < txns and (not flight or rng.random() < 0.4):
            p = idle.pop(rng.randrange(len(idle)))
            read_only = rng.random() < P_READ_ONLY
            mops = []
            for _ in range(rng.randint(1, max_mops)):
                k = rng.randrange(keys)
                if read_only or rng.random() < 0.5:
                    mops.append(["r", k, None])
                else:
                    counter += 1
                    mops.append([write_f, k, counter])
            flight[p] = _Txn(mops, emit("invoke", p, [list(m) for m in mops]), _steps(level, len(mops)))
            invoked += 1
            continue
        p = rng.choice(list(flight))
        t = flight[p]
        step = t.steps.pop(0)
        if step == "atomic":
            at = store.seq
            if level == "serializable" and all(f == "r" for f, _, _ in t.mops) and rng.random() < P_STALE:
                at = rng.randint(max(0, store.seq - MAX_LAG), store.seq)
                for _, k, _ in t.mops:
                    for w in store.writers_between(k, at, store.seq):
                        t.missed.append((w, k, store.read(t, k, at)))
            _run_mops(store, t, at, t.mops)
            _finish(store, t, rng)
        elif step == "begin":
            t.snapshot = store.seq
        elif step == "mop":
            mop = t.mops[len(t.result)]
            if mop[0] != "r" and store.locks.setdefault(mop[1], t) is not t:
                t.aborted = True
                t.steps = ["complete"]
                _finish(store, t, rng)
            else:
                _run_mops(store, t, store.seq, [mop])
        elif step == "commit":
            if level == "snapshot-isolation":
                _run_mops(store, t, t.snapshot, t.mops)
                if any(store.last_seq(k) > t.snapshot for k in t.writes):
                    t.aborted = True  # first committer wins
            _finish(store, t, rng)
        else:  # complete
            del flight[p]
            done.append(t)
            if t.crashed or rng.random() < P_INFO:
                t.complete = (emit("info", p, [list(m) for m in t.mops]), "info")
                idle.append(next_process)
                next_process += 1
            elif t.aborted:
                t.complete = (emit("fail", p, [list(m) for m in t.mops]), "fail")
                idle.append(p)
            else:
                t.complete = (emit("ok", p, t.result), "ok")
                idle.append(p)
    return Execution(ops, {t.invoke: not t.aborted for t in done}, _stale(done))


def _finish(store: _Store, t: _Txn, rng: random.Random) -> None:
    """Commit t unless it already aborted, aborts now on its own or its client crashes; release
    its locks."""
    if not t.aborted and rng.random() < P_ABORT + P_CRASH:
        t.aborted = True
        t.crashed = rng.random() < P_CRASH / (P_ABORT + P_CRASH)
    if not t.aborted:
        store.commit(t)
    for k in t.writes:
        if store.locks.get(k) is t:
            del store.locks[k]


def _completion(t: _Txn) -> tuple[int, str]:
    """(index, type) of t's completion: set for every txn once `run` has drained its flight."""
    assert t.complete is not None
    return t.complete


def _stale(done: list[_Txn]) -> list[Stale]:
    return [Stale(t.invoke, w.invoke, k, seen, _completion(w)[1] == "ok" and _completion(w)[0] < t.invoke)
            for t in done if _completion(t)[1] == "ok" for w, k, seen in t.missed]


def execute(level: str, seed: int, txns: int = 60, processes: int = 5, keys: int = 4,
            flavour: str = "list-append", max_mops: int = 4) -> list[Op]:
    """The history of `run` (see there for the levels)."""
    return run(level, seed, txns, processes, keys, flavour, max_mops).ops


# ------------------------------------------------------------------------------ injection
#
# A gadget is a list of phases; each phase a list of txns (type, mops as completed) whose
# invokes and completions interleave at random; every txn of a phase completes before the next
# phase begins. Keys are offsets from the first key of the gadget, values are unique per key.


def _gadget(anomaly: str, flavour: str, rng: random.Random) -> list[list[tuple[str, list[Any]]]]:
    la = flavour == "list-append"
    W = "append" if la else "w"
    nil = not la or rng.random() < 0.5  # one spelling of the empty list per gadget: Elle tells them apart

    def r(k: int, *elems: int) -> list[Any]:
        """A read of key k that saw `elems` (list-append) or the last of them (register)."""
        if not elems:
            return ["r", k, None if nil else []]
        return ["r", k, list(elems) if la else elems[-1]]

    x, y, a, b = 0, 1, 2, 3
    if anomaly == "G0":  # T1 and T2 append to x and y in opposite orders
        return [[("ok", [[W, x, 1], [W, y, 1]]), ("ok", [[W, x, 2], [W, y, 2]])],
                [("ok", [r(x, 1, 2), r(y, 2, 1)])]]
    if anomaly == "G1a":  # a read of a failed txn's write
        return [[("fail", [[W, x, 1]])], [("ok", [r(x, 1)])]]
    if anomaly == "G1b":  # a read of a txn's intermediate (not final) write
        return [[("ok", [[W, x, 1], [W, x, 2]]), ("ok", [r(x, 1)])]]
    if anomaly == "G1c":  # each of two txns reads the other's write
        return [[("ok", [[W, x, 1], r(y, 1)]), ("ok", [[W, y, 1], r(x, 1)])]]
    if anomaly == "G-single":  # read skew: T1 sees T2's y but not its x
        return [[("ok", [r(x), r(y, 1)]), ("ok", [[W, x, 1], [W, y, 1]])],
                [("ok", [r(x, 1), r(y, 1)])]]
    if anomaly == "G-nonadjacent":  # T1 -rw-> T2 -wr-> T3 -rw-> T4 -wr-> T1
        return [[("ok", [r(x), r(b, 1)]), ("ok", [[W, x, 1], [W, y, 1]]),
                 ("ok", [r(y, 1), r(a)]), ("ok", [[W, a, 1], [W, b, 1]])],
                [("ok", [r(x, 1), r(a, 1)])]]
    if anomaly == "G2-item":  # write skew: each reads both keys empty, writes a different one
        return [[("ok", [r(x), r(y), [W, x, 1]]), ("ok", [r(x), r(y), [W, y, 1]])],
                [("ok", [r(x, 1), r(y, 1)])]]
    if anomaly == "lost-update":  # both read the same x, both write x
        return [[("ok", [r(x), [W, x, 1]]), ("ok", [r(x), [W, x, 2]])],
                [("ok", [r(x, 1, 2)])]]
    if anomaly == "internal":  # a read that ignores the txn's own earlier write
        return [[("ok", [[W, x, 1], r(x)])]]
    if anomaly == "G-single-realtime":  # a read, begun after a write completed, misses it
        return [[("ok", [[W, x, 1]])], [("ok", [r(x)])], [("ok", [r(x, 1)])]]
    if not la:
        raise ValueError(f"{anomaly!r} is not injectable into rw-register histories")
    if anomaly == "future-read":  # a read of an element the txn appends only later
        return [[("ok", [["r", x, [1]], [W, x, 1]])]]
    if anomaly == "duplicate-elements":
        return [[("ok", [[W, x, 1]])], [("ok", [["r", x, [1, 1]]])]]
    if anomaly == "incompatible-order":  # two reads that no single append order explains
        return [[("ok", [[W, x, 1]]), ("ok", [[W, x, 2]])],
                [("ok", [["r", x, [1, 2]]]), ("ok", [["r", x, [2, 1]]])]]
    if anomaly == "dirty-update":  # a committed append ordered after an aborted one
        return [[("fail", [[W, x, 1]])], [("ok", [[W, x, 2]])], [("ok", [["r", x, [1, 2]]])]]
    if anomaly == "garbage-read":  # an element nobody appended: not Elle's (it stops), the checker's
        return [[("ok", [[W, x, 1]])], [("ok", [["r", x, [1, 99]]])]]
    raise ValueError(f"unknown anomaly {anomaly!r}; known: {', '.join(sorted(INJECTABLE))}")


BOTH = frozenset(FLAVOURS)
LIST_ONLY = frozenset({"list-append"})
INJECTABLE: dict[str, frozenset[str]] = {
    "G0": LIST_ONLY,  # Elle infers no ww edges between blind register writes
    "G1a": BOTH,
    "G1b": BOTH,
    "G1c": BOTH,
    "G-single": BOTH,
    "G-nonadjacent": BOTH,
    "G2-item": BOTH,
    "lost-update": BOTH,
    "internal": BOTH,
    "G-single-realtime": BOTH,
    "future-read": LIST_ONLY,
    "duplicate-elements": LIST_ONLY,
    "incompatible-order": LIST_ONLY,
    "dirty-update": LIST_ONLY,
    "garbage-read": LIST_ONLY,  # Elle reads an unknown register value as the initial state
}
"""Injectable anomalies and the flavours in which Elle can see them."""


TIGHT = frozenset({"G-single-realtime"})
"""Gadgets whose phases follow each other with no background event between: each phase's first
invoke comes right after the previous phase's last completion, so that completed txn is the
invoked one's direct realtime predecessor. Otherwise the realtime path from the write to the stale
read may run only through a pair of background txns also joined by an rw edge, which Elle's
explainer calls rw, naming the cycle G-nonadjacent-realtime instead."""


def inject(anomaly: str, seed: int, flavour: str = "list-append", txns: int = 40,
           processes: int = 5, keys: int = 4) -> list[Op]:
    """A strict-serializable history (see `run`) with one `anomaly` gadget spliced in at random
    points in time, on keys and processes the background never uses (see INJECTABLE)."""
    if flavour not in INJECTABLE.get(anomaly, BOTH):
        raise ValueError(f"{anomaly!r} is not injectable into {flavour} histories")
    rng = random.Random(seed)
    background = execute("strict-serializable", rng.randrange(2**32), txns, processes, keys, flavour)
    phases = _gadget(anomaly, flavour, rng)
    process = 1 + max(cast(int, op.process) for op in background)  # run() numbers processes
    blocks: list[list[tuple[str, int, list[Any]]]] = []  # runs of (type, process, value) kept together
    for i, phase in enumerate(phases):
        glue = i > 0 and anomaly in TIGHT
        procs = list(range(process, process + len(phase)))
        process += len(phase)
        pending = {p: t for p, t in zip(procs, phase, strict=True)}
        invoked: set[int] = set()
        while pending:
            p = rng.choice(sorted(pending))
            type_, mops = pending[p]
            mops = [[f, k + keys, v] for f, k, v in mops]
            if p not in invoked:
                invoked.add(p)
                event = ("invoke", p, [[f, k, None if f == "r" else v] for f, k, v in mops])
            else:
                del pending[p]
                if type_ == "fail":
                    mops = [[f, k, None if f == "r" else v] for f, k, v in mops]
                event = (type_, p, mops)
            if glue:
                blocks[-1].append(event)
                glue = False
            else:
                blocks.append([event])
    slots = sorted(rng.randint(0, len(background)) for _ in blocks)
    merged: list[tuple[str, Any, Any]] = [(op.type, op.process, op.value) for op in background]
    for slot, block in reversed(list(zip(slots, blocks, strict=True))):
        merged[slot:slot] = block
    return [Op(index=i, type=type_, f="txn", value=value, process=p, time=1000 * (i + 1))
            for i, (type_, p, value) in enumerate(merged)]
