"""Replica.stop() ends everything the replica started: once it returns nothing of the replica
writes to its files (a tablet copy may be re-creating the replica at the same path)."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

from replica_net import TABLET, open_session, options

from node import probes
from node.consensus import Member, MemberType, RaftConfig
from node.replica.replica import Replica, bootstrap_replica
from node.tablet.ops import Write
from node.tablet.paths import TabletPaths


def single_replica(tmp_path, **opts) -> Replica:
    paths = TabletPaths(tmp_path / "a", TABLET)
    bootstrap_replica(paths, RaftConfig(0, (Member("a", MemberType.VOTER),)))
    r = Replica("a", paths, lambda *_: None, dataclasses.replace(options(), **opts))
    r.open()
    return r


async def leading_with_session(r: Replica) -> int:
    """Start `r`, wait until it leads (a single voter elects itself), open a client session."""
    r.start()
    deadline = time.monotonic() + 10
    while not r.leader_ready:
        assert time.monotonic() < deadline, "no leader"
        await asyncio.sleep(0.01)
    return await open_session(r)


class SlowWriter:
    """Wraps a save: signals when it is entered, blocks until released, then really writes and
    records when it finished."""

    def __init__(self, real):
        self.real = real
        self.entered = threading.Event()
        self.release = threading.Event()
        self.finished: list[float] = []

    def __call__(self, *args):
        self.entered.set()
        assert self.release.wait(10)
        result = self.real(*args)
        self.finished.append(time.monotonic())
        return result


async def stop_while_blocked(r: Replica, writer: SlowWriter) -> tuple[float, bool]:
    """Stop `r` while `writer` is blocked mid-save; release the save only once stop() has had
    time to return. Returns when stop() returned, and whether it waited for the save."""
    deadline = time.monotonic() + 10
    while not writer.entered.is_set():
        assert time.monotonic() < deadline, "the save never started"
        await asyncio.sleep(0.01)
    stop = asyncio.create_task(r.stop())
    await asyncio.sleep(0.2)
    blocked = not stop.done()  # stop() must wait for the save under way
    writer.release.set()
    await stop
    stopped_at = time.monotonic()
    await asyncio.sleep(0.3)  # room for a straggler to write
    return stopped_at, blocked


def assert_nothing_left(stopped_at: float, blocked: bool, writer: SlowWriter) -> None:
    assert writer.finished, "the save under way was abandoned before it started writing"
    assert all(t <= stopped_at for t in writer.finished), "a save wrote after stop() returned"
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert blocked, "stop() returned while a save was still running"


def test_stop_waits_for_a_snapshot_save_and_leaves_no_task(tmp_path):
    async def main():
        r = single_replica(tmp_path, snapshot_interval_entries=3)
        writer = SlowWriter(r.snapshots.save)
        r.snapshots.save = writer
        gc_calls: list[float] = []
        real_gc = r.wal.gc
        r.wal.gc = lambda: (gc_calls.append(time.monotonic()), real_gc())[1]
        try:
            session = await leading_with_session(r)
            for seq in (1, 2, 3):
                await r.write(Write("k", str(seq)), session=session, seq=seq, acked_below=0)
        finally:
            stopped_at, blocked = await stop_while_blocked(r, writer)
        assert_nothing_left(stopped_at, blocked, writer)
        assert all(t <= stopped_at for t in gc_calls), "WAL GC ran after stop() returned"
        assert r.snapshots.indexes()  # the save completed before stop() returned

    asyncio.run(main())


def test_stop_waits_for_a_cmeta_save_and_leaves_no_task(tmp_path):
    async def main():
        r = single_replica(tmp_path)
        writer = SlowWriter(r.saves._write)
        r.saves._write = writer  # the first election's term and vote
        r.start()
        stopped_at, blocked = await stop_while_blocked(r, writer)
        assert_nothing_left(stopped_at, blocked, writer)
        before = r.paths.consensus_meta.read_bytes()
        await asyncio.sleep(0.2)
        assert r.paths.consensus_meta.read_bytes() == before

    asyncio.run(main())


def test_stop_is_idempotent_and_refuses_new_work(tmp_path):
    async def main():
        r = single_replica(tmp_path)
        r.start()
        await asyncio.gather(r.stop(), r.stop())
        await r.stop()
        assert r._spawn(asyncio.sleep(10), "late") is None
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())


def test_wide_entries_take_a_snapshot_by_bytes_and_keep_a_log_bounded_by_bytes(tmp_path):
    """Entries far below the entry-count interval but past its MiB bound take a snapshot, and
    the log kept behind it holds at most log_retain_mb of payloads: without the byte bounds a
    replica of wide rows held everything since its last snapshot, in memory and in the WAL."""
    async def main():
        r = single_replica(tmp_path, snapshot_interval_entries=10_000, snapshot_interval_mb=0.1,
                           log_retain_entries=10_000, log_retain_mb=0.05)
        try:
            session = await leading_with_session(r)
            deadline = time.monotonic() + 10
            with probes.expect("replica.snapshot.due_to_bytes",
                               "replica.log.retention_bounded_by_bytes"):
                for seq in range(1, 21):  # 20 x 12 KiB: two snapshots' worth
                    await r.write(Write("k", str(seq) * 12_288), session=session, seq=seq,
                                  acked_below=0)
                while r._snapshotting or r.core.log.first_index() == 1:
                    assert time.monotonic() < deadline, "no snapshot by bytes"
                    await asyncio.sleep(0.01)
            log, snapshot = r.core.log, max(r.snapshots.indexes())
            behind = [len(e.payload) for e in log.slice(log.first_index(), snapshot)]
            assert 0 < sum(behind) <= 0.05 * (1 << 20)  # the entries kept behind the snapshot
            assert len(behind) < 10  # far fewer than log_retain_entries
        finally:
            await r.stop()

    asyncio.run(main())
