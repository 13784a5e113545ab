"""What a failed directory sync leaves in the page cache is made durable before it is trusted.

After a directory fsync fails with EIO, Linux keeps the new entry (a mkdir, a rename) in the
page cache, clean, and a later sync of that directory does not write it: a process restarted
without a power loss sees it, and the next power loss takes it. SimDisk models this. Each test
fails its sync, kills the process with its cache (`kill`), lets the restarted process act on
what it reads, then takes the power away (`crash`): what the restarted process acted on must
still be there. Found by a review of everything the engine writes durably."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from node.entry import Entry, EntryType
from node.server.daemon import load_or_create_instance
from node.tablet.superblock import DataState, KeyRange, OpId, Superblock
from node.wal import Log, LogOptions


def _disk():
    from harness.sim.disk import SimDisk, SimFaults
    from harness.sim.loop import SimLoop
    from harness.sim.network import SimNetwork

    disk = SimDisk(random.Random(1), SimFaults())
    disk.mkdir("/data")
    disk.fsync_dir("/")
    return SimLoop(SimNetwork(0)), disk


def _entry(i: int, size: int = 8) -> Entry:
    return Entry(1, i, EntryType.REPLICATE, i.to_bytes(8, "little") * (size // 8))


class _FailingDirSyncs:
    """Inside the block, syncs of the directory `only` (else of every directory) fail with EIO,
    as SimDisk fails them: the entries they were to make durable stay in the cache only."""

    def __init__(self, disk, only: str | None = None):
        self.disk, self.only, self.real = disk, only, disk.fsync_dir

    def _sync(self, path):
        failing = self.only is None or str(path) == self.only
        self.disk.faults.fsync_dir_eio_rate = 1.0 if failing else 0.0
        try:
            return self.real(path)
        finally:
            self.disk.faults.fsync_dir_eio_rate = 0.0

    def __enter__(self):
        self.disk.fsync_dir = self._sync

    def __exit__(self, *exc):
        self.disk.fsync_dir = self.real


def test_a_wal_directory_whose_mkdir_sync_failed_is_synced_before_entries_go_in_it():
    """The first open's mkdir of the tablet's WAL directory is not durable; the restarted
    server's open found the directory, trusted it, and acknowledged entries written (and
    synced) in it; a power loss then took the directory and every entry with it."""
    loop, disk = _disk()
    with _FailingDirSyncs(disk):
        try:
            Log.open("/data/wals/t1", "t1", disk=disk)
        except OSError:
            pass  # the tablet's creation fails; the directory stays in the cache
    restarted = disk.kill()

    async def acknowledge():
        log = Log.open("/data/wals/t1", "t1", disk=restarted)
        await log.append_future(log.reserve([_entry(1), _entry(2), _entry(3)]))
        log.close()

    loop.run_until_complete(acknowledge())
    after_power_loss = Log.open("/data/wals/t1", "t1", disk=restarted.crash())
    assert [e.index for e in after_power_loss.recovered] == [1, 2, 3]
    after_power_loss.close()


def test_a_superblock_whose_save_was_not_durable_is_saved_again_before_the_replica_acts():
    """A copy's READY superblock replaced COPYING (last OpId (0, 0): a brand-new replica), but
    the rename's directory sync failed. Restarted, the server read READY, ran the replica and
    acknowledged entries; a power loss brought COPYING back, and start-up tombstoned the
    replica as brand new, voting for candidates with empty logs. Superblock.open (start-up's
    read) saves what it read again first."""
    _, disk = _disk()
    path = "/data/tablet-meta/t1"
    copying = Superblock("t1", "tbl", KeyRange(), DataState.COPYING, tombstone_last_opid=OpId(0, 0))
    copying.save(path, disk)
    with _FailingDirSyncs(disk, only="/data/tablet-meta"):
        try:
            copying.with_state(DataState.READY).save(path, disk)
        except OSError:
            pass
    restarted = disk.kill()
    assert Superblock.open(path, restarted).data_state is DataState.READY  # the server acts on it
    assert Superblock.load(path, restarted.crash()).data_state is DataState.READY


def test_a_server_uuid_whose_save_was_not_durable_is_saved_again_at_start():
    """A new data directory's instance file saved with a failed directory sync: the restarted
    server ran as that uuid, and a power loss gave it another."""
    _, disk = _disk()
    with _FailingDirSyncs(disk, only="/data/ts"):
        try:
            load_or_create_instance(Path("/data/ts"), "tserver", random.Random(7), disk)
        except OSError:
            pass
    restarted = disk.kill()
    uuid = load_or_create_instance(Path("/data/ts"), "tserver", random.Random(8), restarted)
    assert load_or_create_instance(Path("/data/ts"), "tserver", random.Random(9),
                                   restarted.crash()) == uuid


def test_wal_gc_after_a_failed_directory_sync_still_deletes_later():
    """GC unlinked its segments and the directory sync failed: the segments stayed listed, so
    every later gc() failed unlinking the first one again, and the log never shrank."""
    loop, disk = _disk()
    tiny = LogOptions(log_segment_size_mb=4 / 1024)

    async def run():
        log = Log.open("/data/wal", "t1", tiny, disk=disk)
        for i in range(1, 201):
            await log.append_future(log.reserve([_entry(i, 64)]))
        log.register_anchor("core", 100)
        with _FailingDirSyncs(disk), pytest.raises(OSError):
            log.gc()
        for i in range(201, 401):
            await log.append_future(log.reserve([_entry(i, 64)]))
        log.register_anchor("core", 380)
        deleted = log.gc()
        listed = log.segments()
        log.close()
        return deleted, listed

    deleted, listed = loop.run_until_complete(run())
    assert deleted
    assert sorted(listed) == sorted(f"/data/wal/{n}" for n in disk.listdir("/data/wal")
                                    if n.startswith("wal-"))
