"""What a workload is: a stream of operations per logical process, a final phase, the mapping of
each operation onto the client, and the checker that judges its history (Jepsen's workload map
of client, generator and checker).

Op streams are generated per worker thread from a seed, so the sequence of operations each thread
issues is reproducible from the run's seed no matter how the threads interleave in time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from workloads.outcomes import OpFailed, OpUnknown, WrongReply

# How the workers' writes reach the client (Workload.writes; `tessera test --writes`).
WRITE_MODES = ("own", "shared", "session-background", "session-manual", "session-sync")
SESSION_MODES = ("session-background", "session-manual")  # through a batching session
DEFAULT_BATCH = 16  # ops per batch of the session modes when `batch` is 0


@dataclass(frozen=True)
class Invocation:
    f: str
    value: Any = None
    key: Any = None


@dataclass(frozen=True)
class Checker:
    """How a workload's history is judged: a `tessera check` model with its options (the bank's
    total). test.json records it, so every later analysis judges the run the same way."""

    model: str
    options: dict = field(default_factory=dict)

    def check(self, ops: list, **overrides) -> dict:
        """`overrides`: check_history options for this call only (the simulator's time limit)."""
        from reports.checkers.check import check_history

        return check_history(ops, self.model, **{**self.options, **overrides})

    def to_json(self) -> dict:
        return {"model": self.model, "options": dict(self.options)}


@dataclass(frozen=True)
class Completion:
    type: str  # ok | fail | info
    value: Any = None
    error: Any = None  # a string; ["wrong-reply", reply] for a reply that was not this op's


def answer(invoked: list[list], reply: Any) -> list[list]:
    """A transaction's completion value built from its invocation, Jepsen style: the invoked
    micro-ops with the reply's read results filled in. WrongReply when the reply's micro-ops
    differ from the invocation in number, kind, key or a written value."""
    from reports.checkers.replies import answered

    done = answered(invoked, reply)
    if done is None:
        raise WrongReply(reply)
    return done


class KVClient(Protocol):
    """The client surface workloads need; node.client implements it against a real cluster."""

    async def read(self, key: str) -> Any: ...
    async def write(self, key: str, value: Any) -> None: ...
    async def cas(self, key: str, expected: Any, new: Any) -> bool: ...
    async def append(self, key: str, element: Any) -> None: ...
    async def txn(self, ops: list[list]) -> list[list]: ...


@dataclass
class Workload:
    """Base class; subclasses override `checker`, `ops`, `apply`, and optionally `setup` /
    `final`."""

    name: str = "workload"
    tablets: int = 1  # tablets of the test table (transactions need their keys in one tablet)
    # Which of `tablets` replication groups holds a key, (key, groups) -> group: the system's
    # client adapter sets it when it opens the run's clients (Tessera's: its hash partitioning),
    # since a transaction must keep its keys in one group. None: the system has no groups.
    placement: ClassVar[Callable[[str, int], int] | None] = None
    # How the workers' writes (cas, append, txn; reads never) reach the client, one of
    # WRITE_MODES; each op is still invoked, completed and recorded on its own in every mode.
    #   own: each worker has a handle of its own, and every write is one ts.write.
    #   shared: the workers that share a node share one handle's client sessions, so the writes
    #     they issue in one turn of the client's loop leave as ONE ts.write_batch (node.client's
    #     `_corked`), as a program's concurrent callers of one handle do; each op keeps its own
    #     seq, result and place in the history (best with workers back to back: --rate 0).
    #   session-background: each node's workers share one AUTO_FLUSH_BACKGROUND session
    #     (node.client.session): batches of up to `batch` ops per tablet, cut at latest
    #     `batch_interval_ms` after their first op. The interval is shorter than Kudu's 1000 ms
    #     default: each worker waits for its own op, so batches fill from concurrent workers,
    #     and a long interval would only idle them.
    #   session-manual: each node's workers share one MANUAL_FLUSH session of up to `batch` ops
    #     per tablet; a worker applies its op and flushes (node.client.Table._op), so a flush
    #     carries what the node's other workers applied in the same turn.
    #   session-sync: each worker writes through a session of its own in AUTO_FLUSH_SYNC,
    #     Kudu's default flush mode (what a program that opens a session and never sets a
    #     mode runs): every apply is sent alone and answered before it returns, in the
    #     session's own external consistency mode.
    writes: str = "own"
    batch: int = 0  # ops per batch, session modes only; 0: DEFAULT_BATCH
    # The workers build each string value in a buffer (a bytearray) and reuse it as soon as
    # the client has taken the op, as an application serializing rows into one buffer does:
    # what the client sends must be the value as it was handed over (the system's client
    # adapter does the handing over and reading back).
    value_buffers: bool = False
    batch_interval_ms: float = 50.0
    # Session modes only: a node's shared session is closed and replaced by a new one after
    # this many writes through it (0: kept for the run), as a program that opens a session
    # per unit of work and closes it while its other callers may still be applying does.
    session_ops: int = 0
    # With session_ops: each renewed session is opened on a client of its own, made at the
    # renewal and closed once done with, as a program run once per unit of work opens a client
    # and a session and closes both: the new client knows no tablet's location, so its
    # session's first applies wait for a lookup while the other callers go on writing.
    fresh_clients: bool = False
    # Kudu's external consistency mode of Tessera's client for the workers' writes
    # (client-propagated, commit-wait; checked by harness.validate, since workloads know no
    # system); None: the client's default, client-propagated. `--external-consistency`.
    external_consistency: str | None = None

    def __post_init__(self) -> None:
        if self.writes not in WRITE_MODES:
            raise ValueError(f"writes={self.writes!r}: one of {', '.join(WRITE_MODES)}")
        if not isinstance(self.batch, int) or isinstance(self.batch, bool) or self.batch < 0:
            raise ValueError(f"batch is a number of ops, not {self.batch!r}")
        if self.batch and self.writes not in SESSION_MODES:
            raise ValueError(f"batch={self.batch} sizes a batching session's batches: it takes "
                             f"writes {' or '.join(SESSION_MODES)}, not {self.writes}")
        if (not isinstance(self.session_ops, int) or isinstance(self.session_ops, bool)
                or self.session_ops < 0):
            raise ValueError(f"session_ops is a number of writes, not {self.session_ops!r}")
        if self.session_ops and self.writes not in SESSION_MODES:
            raise ValueError(f"session_ops={self.session_ops} renews a shared batching session: "
                             f"it takes writes {' or '.join(SESSION_MODES)}, not {self.writes}")
        if not isinstance(self.fresh_clients, bool):
            raise ValueError(f"fresh_clients is true or false, not {self.fresh_clients!r}")
        if self.fresh_clients and not self.session_ops:
            raise ValueError("fresh_clients opens a client per renewed session: it needs "
                             "session_ops=N")
        # A batch size the system's sessions cannot keep is the system's to refuse
        # (Deployment.check_workload), before any host is touched.

    @property
    def checker(self) -> Checker:
        raise NotImplementedError

    def ops(self, thread: int, threads: int, rng: random.Random) -> Iterator[Invocation]:
        raise NotImplementedError

    def setup(self) -> list[Invocation]:
        """Ops run once, before the clock starts (e.g. initial bank balances)."""
        return []

    def final(self) -> list[Invocation]:
        """Ops run after the nemesis healed (e.g. the set's final read)."""
        return []

    async def apply(self, client: KVClient, inv: Invocation) -> Any:
        raise NotImplementedError

    async def invoke(self, client: KVClient, inv: Invocation) -> Completion:
        """Run one op; classify errors the Jepsen way: only a definite failure is `fail`. A reply
        that answers another op is `info` (this op's effect is unknown) and carries the reply,
        which the checker judges a `wrong-reply`."""
        from reports.checkers.replies import WRONG_REPLY

        try:
            return Completion("ok", await self.apply(client, inv))
        except WrongReply as e:
            return Completion("info", error=[WRONG_REPLY, e.reply])
        except OpFailed as e:
            return Completion("fail", error=str(e) or type(e).__name__)
        except OpUnknown as e:
            return Completion("info", error=str(e) or type(e).__name__)
        except Exception as e:  # an unexpected error leaves the outcome unknown, never failed
            return Completion("info", error=f"{type(e).__name__}: {e}")


_WORKLOADS: dict[str, type[Workload]] = {}


def register(cls: type[Workload]) -> type[Workload]:
    """Class decorator: `tessera test --workload NAME` runs it (NAME: its `name`)."""
    _WORKLOADS[cls.name] = cls
    return cls
