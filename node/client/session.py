"""Batching client sessions: Kudu's KuduSession flush modes over Tessera's exactly-once writes.

    AUTO_FLUSH_SYNC        every apply is sent at once, alone (`TesseraClient.op`): today's path.
    AUTO_FLUSH_BACKGROUND  applies are buffered per tablet; a tablet's buffer is flushed when it
                           holds `max_batch_ops` ops, when the session's buffered bytes reach
                           `flush_watermark` of `buffer_bytes` (every tablet is flushed then), or
                           `flush_interval_s` after the buffer's first op, whichever comes first.
    MANUAL_FLUSH           applies are buffered until `flush()`; an apply that would pass a
                           buffer bound raises BufferFull, as Kudu's Apply does.

A flush sends ONE `ts.write_batch` per tablet, which the tablet's leader replicates as ONE Raft
entry (ops.Batch, as Kudu replicates one WriteRequest). Every apply returns a future of its own
RowResult: a row error (a cas mismatch, a wrong type) is that row's Result, the other rows apply.

A batch is retried unchanged through leader changes, with the same session and seqs, so each op
applies at most once and a retry gets each op's first result; an op whose outcome is unknown at
the deadline fails its future with OpUnknown, one that certainly did not apply with OpFailed,
exactly as a single op raises them. `close()` flushes.

With `row_futures=False` the session reports outcomes as Kudu's does instead: `apply` returns
None, a row that did not apply ok goes to the session's error collector (`pending_errors()`,
`count_pending_errors()`, unbounded as Kudu's is by default), and the rows that did only count
(`rows_ok`, as Kudu's write-op metrics count them). A caller that needs no row's value (a
loader; `kudu perf loadgen` runs this way) saves the future, its callback and their scheduling:
about half of the client's CPU per row in bench/replication.py's batched point.

Defaults are Kudu's where Kudu has one: 7 MiB of buffer space (SetMutationBufferSpace), a 50 %
flush watermark (SetMutationBufferFlushWatermark), a 1000 ms flush interval
(SetMutationBufferFlushInterval) and two buffers per tablet, one filling while one is flushed
(SetMutationBufferMaxNum): a third waits in `apply` until one is done. Kudu bounds bytes only; the
op count bound is ours: a tablet keeps the last 128 results of a session
(Limits.max_results_per_session) and refuses a larger batch, since it would forget its own
results. A batch of at most 64 leaves the other half of that bound to ops sent alongside on the
same session (single ops of the same handle), so a retried batch finds its results.

Batches of one tablet go out one at a time, in the order they were cut, so their seqs reach the
tablet in order and each batch's `acked_below` lets the tablet forget the batches before it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import Counter, deque
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple, Protocol

import msgspec

from node.client import faults
from node.errors import OpFailed, OpUnknown, TesseraError
from node.probes import alarm, probe
from node.protocol import CLIENT_PROPAGATED, COMMIT_WAIT
from node.tablet.ops import ROW_OP_TYPES, Append, Cas, Result, RowOp, Txn, Write
from node.tablet.state import Limits

if TYPE_CHECKING:
    from node.protocol import Op, Peer, TabletLocation

log = logging.getLogger(__name__)


def check_mode(mode: str | None) -> str | None:
    """`mode` if it names one of Kudu's external consistency modes (or is None: the client's),
    else ValueError."""
    if mode not in (None, CLIENT_PROPAGATED, COMMIT_WAIT):
        raise ValueError(f"external_consistency is {CLIENT_PROPAGATED} or {COMMIT_WAIT}, "
                         f"not {mode!r}")
    return mode

KUDU_BUFFER_BYTES = 7 * 1024 * 1024  # KuduSession::SetMutationBufferSpace default
KUDU_FLUSH_WATERMARK = 0.5  # SetMutationBufferFlushWatermark default
KUDU_FLUSH_INTERVAL_S = 1.0  # SetMutationBufferFlushInterval default, 1000 ms
KUDU_MAX_BUFFERS = 2  # SetMutationBufferMaxNum default
MAX_BATCH_OPS = Limits().max_results_per_session // 2  # see the module docstring


class FlushMode(enum.StrEnum):
    AUTO_FLUSH_SYNC = "auto_flush_sync"
    AUTO_FLUSH_BACKGROUND = "auto_flush_background"
    MANUAL_FLUSH = "manual_flush"


class BufferFull(TesseraError):
    """MANUAL_FLUSH: the op does not fit the session's buffer; flush first. Nothing was sent."""


@dataclass(frozen=True)
class SessionOptions:
    mode: FlushMode = FlushMode.AUTO_FLUSH_SYNC  # Kudu's default mode
    max_batch_ops: int = MAX_BATCH_OPS  # per tablet and batch
    buffer_bytes: int = KUDU_BUFFER_BYTES  # encoded ops buffered, all tablets together
    flush_watermark: float = KUDU_FLUSH_WATERMARK  # of buffer_bytes (AUTO_FLUSH_BACKGROUND)
    flush_interval_s: float = KUDU_FLUSH_INTERVAL_S  # AUTO_FLUSH_BACKGROUND
    max_buffers: int = KUDU_MAX_BUFFERS  # per tablet: filling plus flushing
    row_futures: bool = True  # False: Kudu's error collector instead (see the module docstring)
    # Kudu's KuduSession::SetExternalConsistencyMode: CLIENT_PROPAGATED or COMMIT_WAIT for this
    # session's writes (node.protocol); None, the client's own mode.
    external_consistency: str | None = None

    def __post_init__(self) -> None:
        bound = Limits().max_results_per_session
        if not 1 <= self.max_batch_ops <= bound:
            raise ValueError(f"max_batch_ops must be 1..{bound} (the results a tablet keeps "
                             f"per session), not {self.max_batch_ops}")
        if self.buffer_bytes < 1 or not 0 < self.flush_watermark <= 1:
            raise ValueError("buffer_bytes must be >= 1 and flush_watermark in (0, 1]")
        if self.flush_interval_s <= 0 or self.max_buffers < 1:
            raise ValueError("flush_interval_s must be > 0 and max_buffers >= 1")
        check_mode(self.external_consistency)


class RowError(NamedTuple):
    """A row that did not apply ok, as Kudu's KuduError holds it: the op and why (its row error
    Result, or the OpFailed / OpUnknown of a batch no replica answered). `row_futures=False`."""

    op: RowOp
    error: Result | OpFailed | OpUnknown


class Sent(NamedTuple):
    """What ties a reply to the request it answers: the op as sent (its caller checks, by
    identity, that it is its own), the tablet and client session it went to, its seq, the first
    seq and the size of the request it travelled in (its batch), and the seq the replica's
    answer said it answers (`echo`; BatchResult.seq + the op's place in the batch)."""

    op: RowOp
    tablet: str
    session: int
    seq: int
    batch: int
    size: int
    echo: int

    def wrong(self, op: RowOp) -> bool:
        """This reply is not `op`'s: another op's slot, or an answer to another seq."""
        return self.op is not op or self.echo != self.seq

    def evidence(self) -> dict:
        """What a history records of it on the op's completion (Op.sent)."""
        return {"tablet": self.tablet, "session": self.session, "seq": self.seq,
                "batch": self.batch, "ops": self.size, "echo": self.echo}


class RowResult(NamedTuple):
    """One applied op's outcome: its Result (ok, or a row error), the replica that gave it, and
    what ties it to its request (None for a read, sent in no session). A tuple: one is made per
    op, and a frozen dataclass costs several times as much to build."""

    result: Result
    peer: Peer | None
    sent: Sent | None = None


class Answered(NamedTuple):
    """A batch's answer (`write_batch`): one Result or OpUnknown per op, the replica that gave
    them, the client session and first seq the batch went as, and the seq the answer echoed."""

    results: list[Result | OpUnknown]
    peer: Peer
    tablet: str
    session: int
    first: int
    echo: int

    def rows(self, ops: list[RowOp]) -> list[RowResult | OpUnknown]:
        """Op i's outcome, tied to op i as sent (`Sent`); every op's OpUnknown when the answer
        does not hold one result per op (which of them applied is unknown)."""
        peer, tablet, session, first, echo, n = (self.peer, self.tablet, self.session,
                                                  self.first, self.echo, len(ops))
        if len(self.results) != n:
            probe("client.answered.result_count_mismatch")
            return [OpUnknown(f"{len(self.results)} results came back for {n} writes")] * n
        rows = [r if isinstance(r, OpUnknown)
                else RowResult(r, peer, Sent(op, tablet, session, first + i, first, n, echo + i))
                for i, (op, r) in enumerate(zip(ops, self.results, strict=True))]
        if faults.FAULTS.misroute:  # a deliberate bug (node.client.faults): one place off
            rows = rows[1:] + rows[:1]
        return rows


def answer(futures: list[asyncio.Future], outcomes: list) -> None:
    """Each caller's future its own outcome: a RowResult, the exception its op raises, or None
    (the batch's task was cancelled: so is the op). A caller that gave up (its future done,
    cancelled) is skipped: its outcome is nobody else's."""
    reused: list = []
    for future, out in zip(futures, outcomes, strict=True):
        if future.done():
            if faults.FAULTS.reuse_slot:  # a deliberate bug (node.client.faults)
                reused.append(out)
            continue
        if reused:
            reused.append(out)
            out = reused.pop(0)
        if out is None:
            future.cancel()
        elif isinstance(out, BaseException):
            future.set_exception(out)
        else:
            future.set_result(out)


@dataclass(slots=True)
class _Buffer:
    """One tablet's ops not yet flushed, and each one's future, in the order applied: two
    parallel lists, since a record per op cost more than the rest of buffering it."""

    tablet: TabletLocation
    ops: list[RowOp] = field(default_factory=list)
    futures: list[asyncio.Future] = field(default_factory=list)
    bytes: int = 0
    timer: asyncio.TimerHandle | None = None


_size = msgspec.msgpack.Encoder().encode
_decode_row_op = msgspec.msgpack.Decoder(Write | Cas | Append | Txn).decode
_MUTABLE = frozenset((list, dict, bytearray))


def kept(op: RowOp) -> RowOp:
    """The op a Table handle sends for its caller: `op`, or a copy decoded from its encoding
    where it holds something the caller may still change (a list, a dict or a bytearray value,
    a transaction step's too). Kudu's Apply takes the row as it is then, and an asyncio caller
    may reuse its buffer while its op waits: before, a buffered op sent what the caller put in
    its list later, and any op what the caller put in its bytearray during a location lookup
    or before a retry (the harness's reused buffers found both: Workload.value_buffers).
    (An op given to `Session.apply` directly is the session's from then on, as Kudu's Apply
    takes it.)"""
    kind = type(op)  # on every write's path: no tuple, no generator for the common three
    if kind is Write:
        mutable = type(op.value) in _MUTABLE  # type: ignore[union-attr]
    elif kind is Cas:
        mutable = type(op.new) in _MUTABLE or type(op.expected) in _MUTABLE  # type: ignore[union-attr]
    elif kind is Append:
        mutable = type(op.element) in _MUTABLE  # type: ignore[union-attr]
    else:
        mutable = any(type(step.value) in _MUTABLE for step in op.ops)  # type: ignore[union-attr]
    if mutable:
        probe("client.op.value_copied")
        return _decode_row_op(_size(op))
    return op


@dataclass
class TabletSession:
    """One tablet session's seqs. Seqs are handed out in increasing order as runs (one for a
    single op, len(ops) for a batch), each finished as a whole, so the runs in flight form a
    queue sorted by their first seq, and the lowest seq in flight (what the tablet may not
    forget) is the head run's first: O(1) per run, whatever its length."""

    id: int
    next_seq: int = 1
    inflight: deque = field(default_factory=deque)  # first seqs of runs, ascending
    finished: set = field(default_factory=set)  # first seqs of runs finished behind the head

    def begin(self, n: int = 1) -> int:
        """Hand out a run of `n` seqs; its first."""
        first = self.next_seq
        self.next_seq = first + n
        self.inflight.append(first)
        return first

    def end(self, first: int) -> None:
        """The run that begins at `first` is finished (answered or given up on)."""
        inflight, finished = self.inflight, self.finished
        if inflight[0] != first:
            finished.add(first)
            return
        inflight.popleft()
        while finished and inflight and inflight[0] in finished:
            finished.discard(inflight.popleft())

    def acked_below(self) -> int:
        return self.inflight[0] if self.inflight else self.next_seq


class Sessions:
    """Client sessions by tablet. Each Table handle keeps its own unless given one to share
    (TesseraClient.table): a tablet keeps only the last 128 results of a session, so on one
    session shared by many callers, a retry stalled behind a fault finds its result forgotten
    (STALE_SEQ: an `info`) once the others have run on. `external_consistency`: the mode of
    the writes made through these sessions (node.protocol); None, the TesseraClient's. So
    handles on one client can write in different modes, as Kudu's sessions can."""

    def __init__(self, external_consistency: str | None = None):
        self.external_consistency = check_mode(external_consistency)
        self.by_tablet: dict[str, TabletSession] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        # (tablet, bind) -> (ops, futures): the writes issued this turn, sent together at its
        # end (TesseraClient._corked)
        self.corked: dict[tuple, tuple[list, list]] = {}
        self.sent: Counter[int] = Counter()  # writes per request _uncork sent -> requests
        # The highest hybrid timestamp the writes made through these sessions were given, sent
        # with each of their writes (Kudu's propagated timestamp), so the next is given a
        # larger one on any tablet: a writer's own order. Kept here, not per TesseraClient, so
        # handles that share one client but not their sessions stay separate clients, whose
        # mutual order only COMMIT_WAIT promises.
        self.last_observed = 0


class Client(Protocol):
    """What a Session needs of its TesseraClient (node.client, which makes sessions and so
    imports this module): its op timeout, one op, the tablet of a key, one batch."""

    timeout: float

    async def op(self, table: str, key: str, op: Op, bind: tuple[str, int | None] | None = None,
                 sessions: Sessions | None = None) -> RowResult: ...

    def cached_tablet(self, table: str, key: str) -> TabletLocation | None: ...

    async def _tablet_for(self, table: str, key: str,
                          deadline: float | None = None) -> TabletLocation: ...

    async def write_batch(self, table: str, t: TabletLocation, ops: list[RowOp],
                          deadline: float, bind: tuple[str, int | None] | None = None,
                          sessions: Sessions | None = None,
                          external_consistency: str | None = None) -> Answered: ...


class Session:
    """Made by `TesseraClient.new_session` or `Table.new_session`; one per logical writer or
    shared by many, as Kudu's. Its own client sessions (dedup records) per tablet."""

    def __init__(self, client: Client, table: str, options: SessionOptions,
                 bind: tuple[str, int | None] | None = None):
        self.client, self.table, self.options, self.bind = client, table, options, bind
        self.sessions: Sessions = Sessions(options.external_consistency)  # every flush mode's
        self._buffers: dict[str, _Buffer] = {}  # tablet -> ops not yet flushed
        self._bytes = 0  # buffered, all tablets
        self._locks: dict[str, asyncio.Lock] = {}  # one batch in flight per tablet
        self._queued: Counter = Counter()  # tablet -> batches cut and not yet answered
        # The options apply() reads per op, decided once: an enum compare or a product per
        # op was a tenth of buffering one.
        self._sync = options.mode == FlushMode.AUTO_FLUSH_SYNC
        self._background = options.mode == FlushMode.AUTO_FLUSH_BACKGROUND
        self._watermark_bytes = options.flush_watermark * options.buffer_bytes
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of the first apply
        self._done = asyncio.Condition()
        self._flushes: set[asyncio.Task] = set()
        self._closed = False
        self.flush_reasons: Counter = Counter()  # why batches were cut: count, bytes, ...
        self.ops_cut = 0  # ops in the batches cut so far (over sum(flush_reasons): per batch)
        self.rows_ok = 0  # rows that applied ok, as Kudu's write-op metrics count them
        self._futures = options.row_futures
        self._errors: list[RowError] = []  # row_futures=False: Kudu's error collector

    @property
    def buffered(self) -> int:
        """Ops applied and not yet flushed."""
        return sum(len(b.ops) for b in self._buffers.values())

    async def apply(self, key: str, op: RowOp) -> asyncio.Future | None:
        """Buffer (or, in AUTO_FLUSH_SYNC, send) one row op on the row `key`; a future of its
        RowResult, failed with OpFailed or OpUnknown when no result came back. With
        `row_futures=False`, None: the outcome goes to rows_ok or the error collector."""
        if self._closed:
            raise OpFailed("session closed")
        if not isinstance(op, ROW_OP_TYPES):
            raise TypeError(f"a session applies Write, Cas, Append and Txn, not "
                            f"{type(op).__name__}")
        loop = self._loop or self._bind_loop()
        o = self.options
        if self._sync:
            return await self._apply_now(key, op, loop)
        t = self.client.cached_tablet(self.table, key)
        if t is None:
            t = await self.client._tablet_for(self.table, key, loop.time() + self.client.timeout)
            # closed while we looked: its close has returned, and nothing would send what we
            # buffer now (unless someone flushed a closed session)
            if self._closed and not faults.FAULTS.buffer_after_close:  # a deliberate bug
                probe("client.session.apply_closed_while_locating")
                raise OpFailed("session closed")
        size = len(_size(op))
        tablet_id = t.tablet_id
        buf = self._buffers.get(tablet_id)
        if not self._background:  # MANUAL_FLUSH
            if buf is not None and len(buf.ops) >= o.max_batch_ops:
                probe("client.session.buffer_full_ops")
                raise BufferFull(f"tablet {tablet_id} has {len(buf.ops)} ops buffered, the "
                                 f"most one batch takes: flush first")
            if self._bytes + size > o.buffer_bytes:
                probe("client.session.buffer_full_bytes")
                raise BufferFull(f"{self._bytes} + {size} bytes exceed the buffer space of "
                                 f"{o.buffer_bytes}: flush first")
        elif self._queued[tablet_id] >= o.max_buffers:
            probe("client.session.apply_waits_for_buffer")
            # Kudu's Apply blocks while every buffer is in use: max_buffers batches of this
            # tablet in flight, none free to fill.
            async with self._done:
                await self._done.wait_for(
                    lambda: self._queued[tablet_id] < o.max_buffers or self._closed)
            if self._closed:
                raise OpFailed("session closed")
            buf = self._buffers.get(tablet_id)
        if buf is None:
            buf = self._buffers[tablet_id] = _Buffer(t)
            if self._background:
                buf.timer = loop.call_later(o.flush_interval_s, self._cut, tablet_id,
                                            "interval")
        if self._closed:  # every wait above checks: nothing would send what we buffer now
            alarm("client.session.op_buffered_after_close")
        buf.ops.append(op)
        future = None
        if self._futures:
            future = loop.create_future()
            buf.futures.append(future)
        buf.bytes += size
        self._bytes += size
        if self._background:
            if len(buf.ops) >= o.max_batch_ops:
                probe("client.session.flush_count")
                self._cut(tablet_id, "count")
            elif self._bytes >= self._watermark_bytes:
                probe("client.session.flush_bytes")
                for other in list(self._buffers):
                    self._cut(other, "bytes")
        return future

    async def _apply_now(self, key: str, op: RowOp, loop) -> asyncio.Future | None:
        """AUTO_FLUSH_SYNC: the op sent alone, its outcome reported as the session reports."""
        try:
            row = await self.client.op(self.table, key, op, self.bind, self.sessions)
        except (OpFailed, OpUnknown) as e:
            if not self._futures:
                self._fail_all([op], [], e)
                return None
            future = loop.create_future()
            future.set_exception(e)
            return future
        if not self._futures:
            self._collect([op], [row.result])
            return None
        self.rows_ok += row.result.ok
        future = loop.create_future()
        future.set_result(row)
        return future

    def count_pending_errors(self) -> int:
        """Rows in the error collector (row_futures=False), as KuduSession::CountPendingErrors."""
        return len(self._errors)

    def pending_errors(self) -> list[RowError]:
        """The error collector's rows, which it then forgets (KuduSession::GetPendingErrors;
        never overflowed: unbounded, Kudu's default)."""
        errors, self._errors = self._errors, []
        return errors

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        """The running loop, kept: a session's futures and timers live on one loop."""
        self._loop = asyncio.get_running_loop()
        return self._loop

    async def flush(self) -> None:
        """Send every buffered op, one batch per tablet, and wait until every batch of this
        session has its results (each op's future is done). A caller that gives up on the
        wait (wait_for, a cancelled close) leaves the batches running: each op still gets its
        outcome."""
        for tablet_id in list(self._buffers):
            self._cut(tablet_id, "flush")
        while self._flushes:
            if faults.FAULTS.cancel_batches:  # a deliberate bug (node.client.faults)
                await asyncio.gather(*list(self._flushes), return_exceptions=True)
                continue
            # asyncio.wait, not gather: a caller that gives up on the flush (wait_for, a
            # cancelled close) must not cancel the batches. A batch cancelled in flight was
            # never answered, though the tablet may have applied it: its ops' futures never
            # ended, and without row futures its rows were neither ok nor errors.
            await asyncio.wait(list(self._flushes))

    async def close(self) -> None:
        """Flush, then refuse further applies."""
        self._closed = True
        for tablet_id in list(self._buffers):
            self._cut(tablet_id, "close")
        await self.flush()

    # -- batches ---------------------------------------------------------------------------
    def _cut(self, tablet_id: str, reason: str) -> None:
        """Take the tablet's buffer as one batch and send it in the background."""
        buf = self._buffers.pop(tablet_id, None)
        if buf is None:
            return
        if reason == "interval":
            probe("client.session.flush_interval")
        if buf.timer is not None:
            buf.timer.cancel()
        self._bytes -= buf.bytes
        self.flush_reasons[reason] += 1
        self.ops_cut += len(buf.ops)
        self._queued[tablet_id] += 1
        deadline = asyncio.get_running_loop().time() + self.client.timeout
        task = asyncio.create_task(self._send(buf, deadline), name=f"flush-{tablet_id}")
        self._flushes.add(task)
        task.add_done_callback(self._sent)

    def _sent(self, task: asyncio.Task) -> None:
        self._flushes.discard(task)
        if task.cancelled():  # nothing of the session's cancels a batch: a caller's did
            alarm("client.session.batch_cancelled_in_flight")

    async def _send(self, buf: _Buffer, deadline: float) -> None:
        tablet_id = buf.tablet.tablet_id
        try:
            async with self._locks.setdefault(tablet_id, asyncio.Lock()):
                # An op its caller gave up on before it was sent is dropped: never applied,
                # which an indeterminate op may be.
                ops, futures = buf.ops, buf.futures
                if futures and any(map(asyncio.Future.done, futures)):
                    probe("client.session.cancelled_ops_dropped")
                    kept = [i for i, f in enumerate(futures) if not f.done()]
                    if not kept:
                        return
                    ops, futures = [ops[i] for i in kept], [futures[i] for i in kept]
                try:
                    answered = await self.client.write_batch(
                        self.table, buf.tablet, ops, deadline, self.bind, self.sessions,
                        self.options.external_consistency)
                except (OpFailed, OpUnknown) as e:
                    # without its traceback: that holds this frame, which holds `futures`,
                    # which would hold it (a cycle, with the batch's ops, that only a full
                    # collection frees: a load of wide values outgrew memory before one ran)
                    self._fail_all(ops, futures, e.with_traceback(None))
                    return
                except Exception as e:  # the outcome is unknown, never failed
                    probe("client.session.batch_unexpected_error")
                    log.warning("batch of %d ops to tablet %s: %s: %s", len(ops), tablet_id,
                                type(e).__name__, e, exc_info=e)
                    self._fail_all(ops, futures, OpUnknown(f"{type(e).__name__}: {e}"))
                    return
                results = answered.results
                if not self._futures:
                    self._collect(ops, results)
                    return
                self.rows_ok += len(results) if all_ok(results) else sum(
                    not isinstance(r, Exception) and r.ok for r in results)
                rows = answered.rows(ops)
                if faults.FAULTS.drop_error and self._background:  # a deliberate bug (faults)
                    rows = [_applied(row, answered.peer) for row in rows]
                answer(futures, rows)
        finally:
            self._queued[tablet_id] -= 1
            async with self._done:
                self._done.notify_all()

    def _collect(self, ops: list[RowOp], results: list[Result | OpUnknown]) -> None:
        """A batch's outcome into rows_ok and the error collector (row_futures=False)."""
        if all_ok(results):
            self.rows_ok += len(results)
            return
        errors = [RowError(op, r) for op, r in zip(ops, results, strict=True)
                  if isinstance(r, Exception) or not r.ok]
        self.rows_ok += len(results) - len(errors)
        self._errors += errors

    def _fail_all(self, ops: list[RowOp], futures: list[asyncio.Future], e: Exception) -> None:
        """No result came back for the batch: each op's future fails, or each op is an error."""
        if not self._futures:
            self._errors += [RowError(op, e) for op in ops]
        if faults.FAULTS.drop_error and self._background:  # a deliberate bug (node.client.faults)
            answer(futures, [_applied(e, None)] * len(futures))
            return
        for future in futures:
            if not future.done():  # its caller stopped waiting (cancelled)
                future.set_exception(e)


def _applied(row: RowResult | Exception, peer: Peer | None) -> RowResult:
    """The `drop-error` fault's answer for a row: applied, whatever it was."""
    if isinstance(row, RowResult):
        return row if row.result.ok else row._replace(result=Result(True))
    return RowResult(Result(True), peer)


_is_ok = attrgetter("ok")


def all_ok(results: list[Result | OpUnknown]) -> bool:
    """Every item an ok Result: the usual answer, checked in C (an OpUnknown has no `ok`)."""
    try:
        return all(map(_is_ok, results))
    except AttributeError:
        return False
