"""The log: bootstrap on open, group commit, segment roll, suffix truncation, anchors and GC.

Threads: the caller's (reserve/async_append, under the caller's own ordering), one appender
thread (the only writer of segment files), and a short-lived preallocation thread per roll.

Inline mode, for the deterministic simulator, is chosen by the disk (`Log.open(..., disk=d)`
with `d.inline` true, as for SimDisk): no threads and no file descriptors of the log's own. A
hand-over schedules the appender's step on the running event loop (call_soon); the step
writes and syncs the ready prefix of the queue through the same _commit/_settle_locked/
_complete as the thread and delivers completions directly on the loop (after the disk's
simulated fsync latency, if any); preallocation and close() run inline; the queue's byte
bound is enforced by wait_for_space() only (reserve() cannot block the only thread). Every
call must come from the one running loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from collections.abc import Callable

import msgspec

from node import durable
from node.disk import REAL, Disk
from node.entry import Entry
from node.faults import Faults
from node.probes import probe
from node.wal import format as fmt
from node.wal.errors import WalClosed, WalError
from node.wal.reader import UnclosedTail, read_log
from node.wal.segment import Scan, WritableSegment, entry_stats, finish_file

logger = logging.getLogger("tessera.wal")

Callback = Callable[[BaseException | None], None]


class LogOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Kudu's flag names and (except for fsync, which is safe by default here) its defaults."""

    log_force_fsync_all: bool = True  # sync every group before its callbacks run
    log_segment_size_mb: float = 8  # roll to a new segment past this size
    log_preallocate_segments: bool = True  # fallocate segments to their full size up front
    log_min_segments_to_retain: int = 1  # closed segments gc() always keeps
    # reserve() blocks (an asyncio caller's wait_for_space() waits) while this much is queued
    # and not yet written: Kudu's flag (its default is 4 MiB; here twice that, for the group
    # commit of frame-sized writes)
    group_commit_queue_size_bytes: int = 8 << 20
    faults: Faults = msgspec.field(default_factory=Faults)  # fault_ack_before_fsync acts here

    @property
    def segment_bytes(self) -> int:
        return int(self.log_segment_size_mb * (1 << 20))


class Reservation:
    """A slot in the append queue, in reserve() order. Filled by async_append/append_future.

    The appender writes a slot only once `data` is set, and `data` is set (under the log's
    lock) only after the callback or future is attached: a slot is never written, nor its
    completion delivered, before its owner can observe it. `record` holds a pre-encoded
    record (a truncation) until then."""

    __slots__ = ("entries", "data", "record", "callback", "future", "first", "last", "count")

    def __init__(self, entries: list[Entry], record: bytes | None, first: int, last: int) -> None:
        self.entries = entries
        self.data: bytes | None = None
        self.record = record
        self.callback: Callback | None = None
        self.future: asyncio.Future[None] | None = None
        self.first, self.last, self.count = first, last, len(entries)


class ClosedSegment(msgspec.Struct, frozen=True):
    path: str
    seq: int
    footer: fmt.Footer


class Recovery(msgspec.Struct, frozen=True):
    """What Log.open had to repair, for the caller to report."""

    unclosed: UnclosedTail | None  # the newest segment was cut here and given a footer
    removed: list[str]  # files deleted: leftover temporary segments, an empty unclosed segment


class Log:
    """See the package docstring for the contract."""

    def __init__(self, directory: str, tablet_id: str, options: LogOptions, disk: Disk) -> None:
        """Use Log.open."""
        self.directory = directory
        self.tablet_id = tablet_id
        self.options = options
        self._disk = disk
        self._inline = disk.inline
        self.recovered: list[Entry] = []
        self.recovery = Recovery(None, [])
        self._lock = threading.Lock()
        # The appender sleeps reading this eventfd while idle; whoever makes a slot ready writes
        # it. Not a Lock: the wake-up is on every lone-writer append's path, and an eventfd
        # hand-off measured cheaper (docs/benchmarks.md). Opened with the appender thread.
        self._doorbell = -1
        self._space = threading.Condition(self._lock)  # reserve(): queue below its byte bound
        self._queue: list[Reservation] = []
        self._queued_bytes = 0
        self._space_futures: list[asyncio.Future[None]] = []
        self._space_waiters = 0  # threads blocked in reserve()
        self._idle = False
        self._closing = False
        self._failed: BaseException | None = None
        self._last_index: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Completions for the loop: the appender queues (futures, space waiters, error) here and
        # writes _wake_fd, which the loop watches with add_reader (cheaper than the loop's own
        # call_soon_threadsafe: no Handle and no self-pipe drain loop on the hot path).
        self._wake_fd = -1
        self._wake_loop: Callable[[], object] = self._deliver  # thread mode: rings _wake_fd
        self._inflight: tuple[asyncio.TimerHandle, Callable[[], None]] | None = None  # inline: a group being synced
        self._done: list[tuple[list[asyncio.Future[None]], list[asyncio.Future[None]], BaseException | None]] = []
        self._segments_lock = threading.Lock()
        self._closed: list[ClosedSegment] = []
        # the oldest segment's word on the last index before it, when opened (format.py):
        # the snapshot must reach it, or entries were lost with segments that were not collected
        self.base_index = 0
        self._segment: WritableSegment
        self._next_thread: threading.Thread | None = None
        self._next: WritableSegment | BaseException | None = None
        self._anchors: dict[str, int] = {}
        self._anchor_lock = threading.Lock()
        self._sync_owed = False  # fault_ack_before_fsync: the last group was acknowledged unsynced
        self._thread: threading.Thread | None = None

    # ---- open and close ----

    @classmethod
    def open(cls, directory: str, tablet_id: str, options: LogOptions | None = None, *,
             disk: Disk = REAL) -> Log:
        """Bootstrap the log in `directory` (created if missing) and start appending after it.
        Raises WalCorruption (file and offset) for anything but a torn tail of the newest segment.
        A disk with `inline` set runs the log without threads on the caller's event loop."""
        log = cls(directory, tablet_id, options or LogOptions(), disk)
        durable.ensure_dir(directory, disk)
        contents = read_log(directory, tablet_id, disk)
        removed = list(contents.leftovers)
        segments = contents.segments
        unclosed = contents.unclosed
        if unclosed is not None:
            last = segments[-1]
            if last.records:
                probe("wal.recover.unfinished_segment_closed")
                finish_file(last.path, unclosed.offset, entry_stats(last.records), disk)
                last.footer = entry_stats(last.records)
            else:
                probe("wal.recover.empty_unfinished_segment_removed")
                removed.append(last.path)
                segments = segments[:-1]
            if unclosed.garbage_bytes:
                probe("wal.recover.torn_tail_cut")
                logger.warning("%s: cut a torn tail at offset %d (%d bytes: %s)", unclosed.path,
                               unclosed.offset, unclosed.garbage_bytes, unclosed.reason)
        elif segments:
            _seal_again(segments[-1], disk)
        for path in removed:
            disk.unlink(path)
        if removed:
            disk.fsync_dir(directory)
        # what the oldest segment says the log held before it, read before an empty newest
        # segment goes: the one a restart left may be all that says so (format.py)
        log.base_index = contents.segments[0].header.base if contents.segments else 0
        log._closed = [ClosedSegment(s.path, s.header.seq, s.footer) for s in segments]  # type: ignore[arg-type]  # every footer is set: read_log refuses an older segment without one, and the newest got one above
        log.recovered = contents.entries
        log.recovery = Recovery(unclosed, removed)
        if contents.next_index is not None:
            log._last_index = contents.next_index - 1
        held = contents.next_index - 1 if contents.next_index is not None else 0
        log._segment = log._new_segment(segments[-1].header.seq + 1 if segments else 1,
                                        max(held, log.base_index))
        log._segment.activate()
        if log._inline:
            log._idle = True
            log._ring = log._ring_inline  # type: ignore[method-assign]  # inline mode swaps the method on the instance, on purpose (see _ring_inline)
        else:
            log._doorbell = os.eventfd(0, os.EFD_CLOEXEC)
            log._thread = threading.Thread(target=log._append_loop, name=f"wal-appender-{tablet_id}", daemon=True)
            log._thread.start()
        return log

    def close(self) -> None:
        """Write out everything appended so far, finish the segment with its footer."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            if self._thread is not None:
                self._ring()
            self._space.notify_all()
        if self._thread is None:
            self._drain_inline()
        else:
            self._thread.join()
            os.close(self._doorbell)
            self._unbind_loop()
        if self._next_thread is not None:
            self._next_thread.join()
        if isinstance(self._next, WritableSegment):
            self._next.discard()
        if self._failed is None:
            self._segment.finish()
        else:  # leave the failed segment as it is: bootstrap judges it next time
            probe("wal.close.failed_segment_left")
            with contextlib.suppress(OSError):  # a failing device may fail the close too
                self._segment.close()  # once: a failed roll's finish closed it already

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- appending ----

    @property
    def threaded(self) -> bool:
        """Appends are written by the appender thread (a real disk), not on the loop."""
        return not self._inline

    @property
    def last_index(self) -> int | None:
        """Index of the last entry reserved (durable or not); None for a log that never had one."""
        return self._last_index

    def reserve(self, entries: list[Entry]) -> Reservation:
        """Take the next place in the log. Call under the caller's ordering lock: reservation
        order is disk order. Indexes must continue the log without a gap. Blocks while the
        queue holds group_commit_queue_size_bytes (an asyncio caller awaits wait_for_space() first)."""
        if not entries:
            raise ValueError("reserve() needs at least one entry")
        first = entries[0].index
        for i, e in enumerate(entries):
            if e.index != first + i:
                raise ValueError(f"entry indexes must be consecutive: {[e.index for e in entries]}")
        with self._lock:
            self._wait_for_space_locked()
            if self._last_index is not None and first != self._last_index + 1:
                raise ValueError(f"index {first} does not follow the last index {self._last_index}")
            res = Reservation(entries, None, first, first + len(entries) - 1)
            self._queue.append(res)
            self._last_index = res.last
        return res

    def truncate_suffix(self, after_index: int) -> Reservation:
        """Reserve a record that replaces every entry above `after_index` (Raft overwriting a
        divergent tail). The next reserve() must start at after_index + 1. The truncation is
        durable when its reservation's callback/future completes; until then a crash keeps the
        old tail, which is safe because nothing after the truncation can be durable before it.
        Like reserve(), the record is written only once async_append/append_future hands it
        over, so its completion always reaches the caller, and entries reserved after it wait
        behind it (the appender writes the ready prefix of the queue, in order)."""
        with self._lock:
            self._wait_for_space_locked()
            if self._last_index is not None and after_index > self._last_index:
                raise ValueError(f"cannot truncate after {after_index}: the last index is {self._last_index}")
            probe("wal.truncate_suffix.reserved")
            res = Reservation([], fmt.encode_truncate(after_index), 0, 0)
            self._queue.append(res)
            self._last_index = after_index
        return res

    def async_append(self, res: Reservation, callback: Callback) -> None:
        """Serialize `res` (outside any lock) and hand it to the appender. `callback(None)` runs
        on the appender thread once the entries are durable (in reservation order), or
        `callback(error)` if the write or sync failed. It must be quick and must not block."""
        if res.data is not None:
            raise WalError("reservation handed to the log twice")
        res.callback = callback
        self._hand_over(res)

    def append_future(self, res: Reservation) -> asyncio.Future[None]:
        """async_append for asyncio callers: a future resolved on the running loop when `res` is
        durable. Completions are delivered once per group, not once per entry."""
        if res.data is not None:
            raise WalError("reservation handed to the log twice")
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._bind_loop(loop)
        res.future = loop.create_future()
        self._hand_over(res)
        return res.future

    def has_space(self) -> bool:
        """Whether the queue is below its byte bound: reserve() would not block now."""
        return self._queued_bytes < self.options.group_commit_queue_size_bytes or self._closing

    async def wait_for_space(self) -> None:
        """Return once the queue is below its byte bound, without blocking the event loop."""
        while self._queued_bytes >= self.options.group_commit_queue_size_bytes:  # racy: the lock decides
            with self._lock:
                if self._queued_bytes < self.options.group_commit_queue_size_bytes or self._closing:
                    return
                loop = asyncio.get_running_loop()
                self._bind_loop(loop)
                fut = loop.create_future()
                probe("wal.queue.backpressure_waited")
                self._space_futures.append(fut)
            await fut

    def _bind_loop(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        """Make `loop` (the running one) this log's one loop, on first use."""
        if self._loop is None:
            if not self._inline:
                self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
                loop.add_reader(self._wake_fd, self._on_wake, self._wake_fd)
                self._wake_loop = functools.partial(os.eventfd_write, self._wake_fd, 1)
            self._loop = loop
        elif self._loop is not loop:
            raise WalError("a Log serves futures to one event loop only")
        return loop

    def _on_wake(self, fd: int) -> None:
        """On the loop: resolve what the appender finished. `fd` is the descriptor this
        reader watches, not `_wake_fd`: a close from another thread forgets that at once and
        leaves the descriptor open until its unbinding runs here, and a wake may be pending
        in between (uvloop still runs it)."""
        with contextlib.suppress(BlockingIOError):  # already drained by an earlier call
            os.eventfd_read(fd)
        self._deliver()

    def _deliver(self) -> None:
        """On the loop: resolve the futures of settled groups."""
        with self._lock:
            done, self._done = self._done, []
        for futures, space, error in done:
            _resolve(futures, space, error)

    def _unbind_loop(self) -> None:
        """Stop watching _wake_fd, delivering what is still queued. Runs on close(), after the
        appender stopped: on the loop itself, or for a loop in another thread, there."""
        loop, fd = self._loop, self._wake_fd
        if loop is None:
            return
        self._loop, self._wake_fd = None, -1

        def unbind() -> None:
            loop.remove_reader(fd)
            os.close(fd)
            self._deliver()

        if loop.is_closed():
            os.close(fd)  # nobody is waiting any more
        elif loop.is_running() and not _running_loop_is(loop):
            loop.call_soon_threadsafe(unbind)
        else:
            unbind()

    def _hand_over(self, res: Reservation) -> None:
        """Make `res` (its callback or future attached) ready for the appender."""
        data = res.record if res.record is not None else fmt.encode_entries(res.entries)
        with self._lock:
            res.data = data
            self._queued_bytes += len(data)
            self._ring()

    def _ring(self) -> None:
        """Wake the appender if it sleeps. Call with self._lock held."""
        if self._idle:
            self._idle = False
            os.eventfd_write(self._doorbell, 1)

    def _ring_inline(self) -> None:
        """Inline mode's _ring (set on the instance, so the thread path pays no branch):
        schedule the appender's step unless one is scheduled or in flight."""
        if self._idle:
            self._idle = False
            (self._loop or self._bind_loop(asyncio.get_running_loop())).call_soon(self._step)

    def _wait_for_space_locked(self) -> None:
        while True:
            if self._closing:
                raise WalClosed("log is closed")
            if self._failed is not None:
                probe("wal.append.refused_failed")
                raise WalClosed(f"log failed: {self._failed!r}")
            if self._queued_bytes < self.options.group_commit_queue_size_bytes or self._inline:
                return
            self._space_waiters += 1
            try:
                self._space.wait()
            finally:
                self._space_waiters -= 1

    # ---- the appender thread ----

    def _append_loop(self) -> None:
        # SCHED_BATCH: waking the appender must not preempt the thread that rang (it holds the
        # GIL the appender needs next); it runs once that thread blocks, saving a GIL
        # ping-pong on every lone-writer append (docs/benchmarks.md).
        with contextlib.suppress(OSError):  # only a cost if refused
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
        written: tuple[list[Reservation], int, BaseException | None] | None = None
        while True:
            # One lock round per group: settle the group just written and take the next one.
            futures: list[asyncio.Future[None]] = []
            space: list[asyncio.Future[None]] = []
            stop = False
            with self._lock:
                if written is not None:
                    futures, space = self._settle_locked(*written)
                group = self._take_ready_locked()
                if not group:
                    stop = self._closing and not self._queue
            if written is not None:
                self._complete(written[0], futures, space, written[2])
            if group:
                written = self._commit(group)
            elif stop:
                return
            else:
                written = None
                os.eventfd_read(self._doorbell)  # written exactly once by _ring()

    def _take_ready_locked(self) -> list[Reservation]:
        """The next group: the ready prefix of the queue (none: the appender goes idle)."""
        queue = self._queue
        ready = 0
        while ready < len(queue) and queue[ready].data is not None:
            ready += 1
        group, self._queue = queue[:ready], queue[ready:]
        if not group:
            self._idle = True
        return group

    # ---- inline mode: the appender's loop as event-loop callbacks ----

    def _step(self) -> None:
        """Write and sync the ready prefix; complete it after the disk's fsync latency."""
        if self._closing:  # close() writes the rest itself
            return
        with self._lock:
            group = self._take_ready_locked()
        if not group:
            return
        delay = self._disk.fsync_latency()
        if delay > 0 and self._syncs_each_group():
            # The sync lasts `delay`: the group is written now and durable only at the end,
            # so a power loss meanwhile may keep a prefix of it, torn at a sector: the torn
            # tail a real crash leaves, which bootstrap must cut (never acknowledged).
            written = self._commit(group, sync=False)
            assert self._loop is not None
            done = functools.partial(self._sync_and_finish, written)
            self._inflight = (self._loop.call_later(delay, done), done)
        elif delay > 0:
            written = self._commit(group)
            assert self._loop is not None
            done = functools.partial(self._finish, written)
            self._inflight = (self._loop.call_later(delay, done), done)
        else:
            self._finish(self._commit(group))

    def _syncs_each_group(self) -> bool:
        return self.options.log_force_fsync_all and not self.options.faults.fault_ack_before_fsync

    def _sync_and_finish(self, written: tuple[list[Reservation], int, BaseException | None]) -> None:
        """Inline mode: the end of a group's sync, written at its start; then its completion."""
        group, nbytes, error = written
        if error is None:
            error = self._guarded(self._segment.sync)
        if error is None:  # a copy sends the log up to here: synced bytes only (copy_extents)
            seg = self._segment
            seg.readable = (seg.offset, seg.max_index)
        self._finish((group, nbytes, error))

    def _finish(self, written: tuple[list[Reservation], int, BaseException | None]) -> None:
        """Settle and complete a written group, then take the next one (scheduled: a callback
        that appends again must not recurse)."""
        self._inflight = None
        with self._lock:
            futures, space = self._settle_locked(*written)
        self._complete(written[0], futures, space, written[2])
        if not self._closing:
            assert self._loop is not None
            self._loop.call_soon(self._step)

    def _drain_inline(self) -> None:
        """close() in inline mode: complete the group in flight, write what is ready."""
        if self._inflight is not None:
            handle, done = self._inflight
            handle.cancel()
            done()  # the sync, if it was left for the end, and the completion
        while True:
            with self._lock:
                group = self._take_ready_locked()
            if not group:
                break
            self._finish(self._commit(group))
        if self._queue:
            logger.warning("WAL %s: closed with %d reservations never handed over", self.directory, len(self._queue))
        self._loop = None

    def _commit(self, group: list[Reservation], sync: bool = True
                ) -> tuple[list[Reservation], int, BaseException | None]:
        """Write and (unless told not to) sync `group`; (group, its bytes, the error if that
        failed)."""
        bufs: list[bytes] = []
        nbytes = count = 0
        lo, hi = -1, -1
        for r in group:
            bufs.append(r.data)  # type: ignore[arg-type]  # not None: a group is the ready prefix (_take_ready_locked)
            nbytes += len(r.data)  # type: ignore[arg-type]  # not None: as above
            if r.count:
                if count == 0 or r.first < lo:
                    lo = r.first
                hi = max(hi, r.last)
                count += r.count
        error = self._failed
        if error is None:
            error = self._guarded(self._write, bufs, count, lo, hi, sync)
        return group, nbytes, error

    def _guarded(self, step: Callable[..., None], *args: object) -> BaseException | None:
        """Run a write or sync step; what it raised fails the log and is returned."""
        try:
            step(*args)
        except BaseException as e:
            logger.exception("WAL %s: write failed; the log is now failed", self.directory)
            probe("wal.write.failed")
            self._failed = e
            return e
        return None

    def _settle_locked(
        self, group: list[Reservation], nbytes: int, error: BaseException | None
    ) -> tuple[list[asyncio.Future[None]], list[asyncio.Future[None]]]:
        """Free the queue space of a written group; queue its futures for the loop."""
        self._queued_bytes -= nbytes
        if self._space_waiters:
            self._space.notify_all()
        space, self._space_futures = self._space_futures, []
        futures = [r.future for r in group if r.future is not None]
        if futures or space:
            self._done.append((futures, space, error))
        return futures, space

    def _complete(self, group: list[Reservation], futures: list[asyncio.Future[None]],
                  space: list[asyncio.Future[None]], error: BaseException | None) -> None:
        """Outside the lock: wake the loop for the futures, run the thread API's callbacks."""
        if futures or space:
            self._wake_loop()
        if len(futures) < len(group):
            for r in group:
                if r.future is None:
                    try:
                        r.callback(error)  # type: ignore[misc]  # not None: a slot is handed over with a future or a callback
                    except Exception:
                        logger.exception("WAL append callback raised")

    def _write(self, bufs: list[bytes], count: int, lo: int, hi: int, sync: bool = True) -> None:
        """One vectored write and (with log_force_fsync_all) one sync for the whole group.
        With fault_ack_before_fsync the group is acknowledged unsynced and synced only before
        the next group is written: its callbacks run before its fsync."""
        if self._sync_owed:
            self._segment.sync()
            self._sync_owed = False
        self._swap_if_ready()
        seg = self._segment
        seg.write(bufs)
        seg.count(count, lo, hi)
        if self.options.log_force_fsync_all:
            if self.options.faults.fault_ack_before_fsync:
                self._sync_owed = True
            elif sync:
                seg.sync()
        if sync or not self._syncs_each_group():  # else readable at the sync's end
            seg.readable = (seg.offset, seg.max_index)
        if seg.offset >= self.options.segment_bytes and self._next_thread is None and self._next is None:
            probe("wal.segment.preallocate_started")
            base = max(seg.max_index, seg.base)
            if self._inline:
                self._preallocate(seg.seq + 1, base)
            else:
                self._next_thread = threading.Thread(
                    target=self._preallocate, args=(seg.seq + 1, base), name="wal-preallocate",
                    daemon=True)
                self._next_thread.start()

    # ---- segment roll ----

    def _new_segment(self, seq: int, base: int) -> WritableSegment:
        """Segment `seq`, its header saying the log's last index before it is `base`."""
        prealloc = self.options.segment_bytes if self.options.log_preallocate_segments else 0
        return WritableSegment(self.directory, self.tablet_id, seq, prealloc, self._disk, base)

    def _preallocate(self, seq: int, base: int) -> None:
        try:
            self._next = self._new_segment(seq, base)
        except BaseException as e:
            probe("wal.segment.preallocate_failed")
            self._next = e

    def _swap_if_ready(self) -> None:
        """Roll once the preallocation is done (it sets _next last): finish the old segment
        (footer, sync), then rename the new one into place. A crash between the two leaves a
        finished newest segment plus a temporary file, which bootstrap deletes."""
        if self._next is None:
            return
        if self._next_thread is not None:
            self._next_thread.join()
        nxt, self._next, self._next_thread = self._next, None, None
        if isinstance(nxt, BaseException):
            raise WalError("creating the next segment failed") from nxt
        assert nxt is not None
        probe("wal.segment.rolled")
        old = self._segment
        _roll(old, nxt)
        with self._segments_lock:
            self._closed.append(ClosedSegment(old.path, old.seq, old.footer()))
            self._segment = nxt

    # ---- anchors and GC ----

    def register_anchor(self, name: str, index: int) -> None:
        """Keep entries from `index` on (register again to move it). Holders: durability,
        peers catching up, tablet copy sessions."""
        with self._anchor_lock:
            self._anchors[name] = index

    def release_anchor(self, name: str) -> None:
        with self._anchor_lock:
            del self._anchors[name]

    def gc(self) -> list[str]:
        """Delete the oldest closed segments whose entries all lie below every anchor, keeping
        log_min_segments_to_retain closed segments. With no anchor registered nothing is
        deleted: an unanchored log is one nobody has said it may forget. Returns deleted paths."""
        with self._anchor_lock:
            if not self._anchors:
                return []
            floor = min(self._anchors.values())
        with self._segments_lock:
            limit = len(self._closed) - self.options.log_min_segments_to_retain
            doomed: list[ClosedSegment] = []
            for seg in self._closed[: max(0, limit)]:
                if seg.footer.num_entries and seg.footer.max_index >= floor:
                    break
                doomed.append(seg)
            for seg in doomed:  # oldest first: a crash midway still leaves a gap-free log
                try:
                    self._disk.unlink(seg.path)
                except FileNotFoundError:  # lost at rest (a file system check, a stray rm):
                    # nothing needed it, and raising left it listed, so every later GC failed
                    # on it and the log grew for good
                    probe("wal.gc.segment_already_gone")
                    logger.warning("%s: a segment log GC would delete is gone already",
                                   seg.path)
            if doomed:  # forgotten before the sync, which may fail: never unlinked twice
                probe("wal.gc.segments_deleted")
                del self._closed[: len(doomed)]
                self._disk.fsync_dir(self.directory)
        return [s.path for s in doomed]

    def copy_extents(self, first_index: int) -> tuple[list[tuple[str, int]], int, int]:
        """What a tablet copy sends of the log from `first_index` on: each segment file that
        may hold it, with the length to send, then the lowest and highest index written in
        those bytes (-1: none). The highest may have been cut by a later truncation, but only
        above the commit index. The newest segment is sent up to its synced end: bytes below
        that never change, and the receiver's bootstrap closes such an unfinished tail as it
        would after a crash. Hold an anchor at or below `first_index` so GC keeps the files."""
        with self._segments_lock:
            closed = list(self._closed)
            active = self._segment
            (active_end, active_last), active_first = active.readable, active.min_index
        while closed and (not closed[0].footer.num_entries  # empty: GC may delete it anyway
                          or closed[0].footer.max_index < first_index):
            del closed[0]
        extents = [(s.path, self._disk.size(s.path)) for s in closed] + [(active.path, active_end)]
        firsts = [s.footer.min_index for s in closed if s.footer.num_entries]
        lasts = [s.footer.max_index for s in closed if s.footer.num_entries]
        if active_last >= 0:
            firsts.append(active_first)
            lasts.append(active_last)
        return extents, min(firsts, default=-1), max(lasts, default=-1)

    def segments(self) -> list[str]:
        """Paths of the segments on disk, oldest first, the one being written last."""
        with self._segments_lock:
            return [s.path for s in self._closed] + [self._segment.path]


def _seal_again(newest: Scan, disk: Disk) -> None:
    """Write the newest segment, finished as read, again and sync it before a newer one is
    made. Its footer may be in the page cache only: a close or a roll whose footer sync failed
    with EIO left it readable yet never durable (finish_file says why a later sync does not
    help). Once a newer segment exists, a power loss taking that footer would leave an older
    segment without one, which bootstrap refuses (the replica FAILED on an undamaged disk).
    One segment's bytes written again per open, as an unclosed tail already is."""
    assert newest.footer is not None  # read_log: only the newest may lack one, and it did not
    finish_file(newest.path, newest.end, newest.footer, disk)


def _roll(old: WritableSegment, nxt: WritableSegment) -> None:
    """Finish `old` and activate `nxt`. If either fails, `nxt` is closed and left for bootstrap
    (a temporary file it deletes, or an empty newest segment), as after a crash there."""
    try:
        old.finish()
        nxt.activate()
    except BaseException:
        nxt.close()
        raise


def _running_loop_is(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _resolve(futures: list[asyncio.Future[None]], space: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for f in futures:
        if not f.done():
            if error is None:
                f.set_result(None)
            else:
                f.set_exception(error)
    for f in space:
        if not f.done():
            f.set_result(None)
