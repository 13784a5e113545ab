"""A replica's writes of Raft entries to its WAL, one per Ready that has entries: either
awaited by the Ready, or left to run behind it (ready_steps.Steps.write_behind: a leader's own
write, which its followers' answers need not wait for). Any number run behind at once, in the
WAL's FIFO order, so a leader whose disk is slow goes on heartbeating and replicating while its
syncs run, and its followers commit at their own pace, as Kudu's local peer is one voter among
the others; the WAL's group commit still gathers the writes queued meanwhile into one sync.

The WAL's queue bound (group_commit_queue_size_bytes) is what holds a leader back, and it holds
back only its new proposals. A write that finds the queue full is held here, in order, until
the queue has room, and the driver goes on: it ticks, heartbeats, answers votes and applies
what its followers commit, as Kudu's peers go on sending while its appender blocks on a full
log queue. Meanwhile the driver parks the writes it is handed (`parks`; single row ops go on
joining one group) and proposes them once every held write is queued, so what waits beyond the
bound is one Ready's entries. Before, the driver awaited the queue's room, and a leader on a
slow disk with a full queue sent its followers nothing until its syncs ended, and lost its
leadership. See docs/decisions/write-behind.md. If the WAL fails while writes are held, each
fails, and the driver parks on until the replica fails, which refuses what it parked as never
proposed (docs/decisions/answers-owed-at-stop.md)."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from node.entry import Entry
from node.logfmt import TabletLog
from node.probes import probe
from node.wal import Log


class WalWrites:
    def __init__(self, wal: Log, log: TabletLog, stats: dict,
                 spawn: Callable[[Coroutine[Any, Any, Any], str], Any],
                 resume: Callable[[], None]):
        """`spawn(coro, name)`: a task of the replica's, which its stop() cancels; `resume()`:
        wake the driver, to propose the writes it parked meanwhile."""
        self.wal, self.log, self.stats = wal, log, stats
        self._spawn, self._resume = spawn, resume
        self.behind = 0  # writes running behind their Readys
        # writes that found the WAL's queue full: (entries, their future, started), in order
        self._held: deque[tuple[tuple[Entry, ...], asyncio.Future, float]] = deque()
        self.failed: BaseException | None = None  # the WAL's error that failed a held write

    def start(self, entries: tuple[Entry, ...]) -> asyncio.Future:
        """Hand `entries` to the WAL (first a truncation of what they replace), or hold them
        until its queue has room; the future is done once they are durable, with the write's
        time counted in `stats`."""
        loop = asyncio.get_running_loop()
        written = loop.create_future()
        if self.failed is not None:  # the replica fails on it, through the Ready's path
            written.set_exception(self.failed)
        elif self._held or not self.wal.has_space():
            if not self._held:
                self._spawn(self._queue_held(), "wal-held")
            probe("replica.wal.write_held")
            self._held.append((entries, written, loop.time()))
        else:
            self._queue(entries, written, loop.time())
        return written

    @property
    def held(self) -> int:
        """How many writes wait for room in the WAL's queue (a look that fires no probe)."""
        return len(self._held)

    def parks(self) -> bool:
        """Whether the driver parks the writes it was handed: writes wait for the WAL's queue,
        or the WAL failed under them."""
        parks = bool(self._held) or self.failed is not None
        if parks:
            probe("replica.proposal.parked")
        return parks

    def _queue(self, entries: tuple[Entry, ...], written: asyncio.Future, started: float) -> None:
        loop = asyncio.get_running_loop()
        first, last = entries[0].index, self.wal.last_index
        pending = []
        if last is not None and first <= last:
            self.log.info("truncating WAL entries %d..%d: uncommitted, replaced by the "
                          "leader's entries from term %d", first, last, entries[0].term)
            pending.append(self.wal.append_future(self.wal.truncate_suffix(first - 1)))
        pending.append(self.wal.append_future(self.wal.reserve(list(entries))))

        def durable(f: asyncio.Future) -> None:
            err = None if f.cancelled() else f.exception()
            if written.done():
                return
            if f.cancelled():
                written.cancel()
            elif err is not None:
                written.set_exception(err)
            else:
                self.stats["wal_groups"] += 1
                self.stats["wal_entries"] += len(entries)
                self.stats["wal_seconds"] += loop.time() - started
                written.set_result(None)

        asyncio.gather(*pending).add_done_callback(durable)

    async def _queue_held(self) -> None:
        """Queue the held writes in order as the WAL's queue makes room, then let the driver
        propose what it parked meanwhile. If the WAL fails first, each held write fails with its
        error (its Ready's path then fails the replica) and the driver parks on: no write handed
        in since is proposed to a failed log, and the replica's failure refuses each as never
        proposed (node.replica.inbox). Cancelled (the replica stops), so are the held writes."""
        try:
            while self._held:
                await self.wal.wait_for_space()
                self._queue(*self._held[0])
                self._held.popleft()
        except BaseException as e:
            held, self._held = self._held, deque()
            for _, written, _ in held:
                if isinstance(e, asyncio.CancelledError):
                    written.cancel()
                elif not written.done():
                    written.set_exception(e)
            if not isinstance(e, Exception):
                raise
            probe("replica.wal.held_write_failed")
            self.failed = e
            return
        self._resume()

    def leave_behind(self, written: asyncio.Future, durable: Callable[[], None],
                     failed: Callable[[BaseException], None]) -> None:
        """Let the Ready end while `written` runs: `durable()` once it is, else `failed(err)`
        (nothing when stop() cancelled it)."""
        self.behind += 1

        def done(f: asyncio.Future) -> None:
            self.behind -= 1
            if f.cancelled():
                return
            err = f.exception()
            if err is None:
                durable()
            else:
                failed(err)

        written.add_done_callback(done)
