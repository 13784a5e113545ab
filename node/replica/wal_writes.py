"""A replica's writes of Raft entries to its WAL, one per Ready that has entries: either
awaited by the Ready, or left to run behind it (ready_steps.Steps.write_behind: a leader's own
write, which its followers' answers need not wait for). Any number run behind at once, in the
WAL's FIFO order, so a leader whose disk is slow goes on heartbeating and replicating while its
syncs run, and its followers commit at their own pace, as Kudu's local peer is one voter among
the others; the WAL's group commit still gathers the writes queued meanwhile into one sync,
and its queue bound (`wait_for_space`) is what holds a leader back. See
docs/decisions/write-behind.md."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from node.entry import Entry
from node.logfmt import TabletLog
from node.wal import Log


class WalWrites:
    def __init__(self, wal: Log, log: TabletLog, stats: dict):
        self.wal, self.log, self.stats = wal, log, stats
        self.behind = 0  # writes running behind their Readys

    async def start(self, entries: tuple[Entry, ...]) -> asyncio.Future:
        """Hand `entries` to the WAL (first a truncation of what they replace); the future is
        done once they are durable, with the write's time counted in `stats`."""
        loop = asyncio.get_running_loop()
        started, first, last = loop.time(), entries[0].index, self.wal.last_index
        pending = []
        await self.wal.wait_for_space()  # reserve() blocks the thread when the queue is full
        if last is not None and first <= last:
            self.log.info("truncating WAL entries %d..%d: uncommitted, replaced by the "
                          "leader's entries from term %d", first, last, entries[0].term)
            pending.append(self.wal.append_future(self.wal.truncate_suffix(first - 1)))
        pending.append(self.wal.append_future(self.wal.reserve(list(entries))))

        def counted(f: asyncio.Future) -> None:
            if not f.cancelled() and f.exception() is None:
                self.stats["wal_groups"] += 1
                self.stats["wal_entries"] += len(entries)
                self.stats["wal_seconds"] += loop.time() - started

        written = asyncio.gather(*pending)
        written.add_done_callback(counted)
        return written

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
