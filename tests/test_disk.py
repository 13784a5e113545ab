"""SimDisk (page cache, crashes, faults, fencing) and the engine's storage code running on it:
durable.write_atomic at every crash point, and the real WAL in inline mode."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import random

import pytest

from harness.sim.disk import Fenced, SimDisk, SimFaults
from node import durable
from node.disk import pwrite_all
from node.entry import Entry, EntryType
from node.errors import CorruptionError
from node.faults import Faults
from node.tablet.paths import TabletPaths
from node.tablet.superblock import DataState, KeyRange, Superblock
from node.wal import Log, LogOptions, WalClosed, WalCorruption, WalError

SEEDS = range(12)
TINY = LogOptions(log_segment_size_mb=1 / 1024)  # 1 KiB segments: rolls every few groups


def new_disk(**faults) -> SimDisk:
    disk = SimDisk(random.Random(1), SimFaults(**faults))
    durable.ensure_dir("/d", disk)
    return disk


def write_file(disk: SimDisk, path: str, data: bytes, *, sync: bool) -> None:
    fd = disk.open(path, create=True)
    disk.pwritev(fd, [data], 0)
    if sync:
        disk.fsync(fd)
    disk.close(fd)


class CrashAt:
    """The disk of a process that dies at its k-th disk call: that call and all later ones
    raise (the disk is fenced), everything before it happened."""

    def __init__(self, disk: SimDisk, k: int) -> None:
        self.disk, self.k, self.calls = disk, k, 0

    def __getattr__(self, name):
        attr = getattr(self.disk, name)
        if not callable(attr) or name == "fsync_latency":
            return attr

        def call(*args, **kwargs):
            self.calls += 1
            if self.calls == self.k:
                self.disk.fence()
            return attr(*args, **kwargs)

        return call


# ---- SimDisk itself ----


def test_crash_drops_unsynced_bytes_and_keeps_synced_ones():
    disk = new_disk()
    write_file(disk, "/d/f", b"synced", sync=True)
    disk.fsync_dir("/d")
    fd = disk.open("/d/f")
    disk.pwritev(fd, [b"-lost"], 6)
    assert disk.read("/d/f") == b"synced-lost"  # the page cache serves unsynced data
    after = disk.crash()
    assert after.read("/d/f") == b"synced"


def test_a_seeded_crash_keeps_a_prefix_of_the_unsynced_writes_torn_at_a_sector():
    outcomes = set()
    for seed in range(60):
        disk = new_disk(sector_size=4)
        write_file(disk, "/d/f", b"", sync=True)
        disk.fsync_dir("/d")
        fd = disk.open("/d/f")
        disk.pwritev(fd, [b"aaaaaaaaaa"], 0)
        disk.pwritev(fd, [b"bbbbbbbbbb"], 10)
        got = disk.crash(random.Random(seed)).read("/d/f")
        assert (b"a" * 10 + b"b" * 10).startswith(got)
        assert len(got) in (0, 4, 8, 10, 12, 16, 20)  # whole writes, or cut on a 4-byte sector
        outcomes.add(len(got))
    assert {0, 10, 20} < outcomes and outcomes - {0, 10, 20}  # whole, lost and torn all happen


def test_same_seed_same_crash():
    def run(seed):
        disk = new_disk()
        write_file(disk, "/d/f", bytes(range(200)), sync=False)
        disk.fsync_dir("/d")
        return disk.crash(random.Random(seed)).read("/d/f")

    assert [run(s) for s in SEEDS] == [run(s) for s in SEEDS]


def test_unsynced_create_and_rename_revert_on_crash():
    disk = new_disk()
    write_file(disk, "/d/old", b"old", sync=True)
    disk.fsync_dir("/d")
    write_file(disk, "/d/new", b"new", sync=True)  # content synced, directory entry not
    disk.replace("/d/old", "/d/renamed")
    assert disk.listdir("/d") == ["new", "renamed"]
    after = disk.crash()
    assert after.listdir("/d") == ["old"] and after.read("/d/old") == b"old"
    write_file(after, "/d/kept", b"k", sync=True)
    after.fsync_dir("/d")
    assert after.crash().listdir("/d") == ["kept", "old"]


def test_a_rename_survives_whole_or_not_at_all():
    for seed in range(40):
        disk = new_disk()
        write_file(disk, "/d/a", b"a", sync=True)
        disk.fsync_dir("/d")
        disk.replace("/d/a", "/d/b")
        assert disk.crash(random.Random(seed)).listdir("/d") in (["a"], ["b"])


def test_a_crashed_incarnation_is_fenced():
    disk = new_disk()
    fd = disk.open("/d/f", create=True)
    after = disk.crash()
    with pytest.raises(Fenced):
        disk.pwritev(fd, [b"x"], 0)
    with pytest.raises(Fenced):
        disk.listdir("/d")
    assert after.listdir("/d") == []  # and the file it created never made it


def test_enospc_past_the_quota_and_eio_on_fsync():
    disk = new_disk(quota_bytes=10)
    fd = disk.open("/d/f", create=True)
    disk.pwritev(fd, [b"0123456789"], 0)
    disk.pwritev(fd, [b"abc"], 0)  # overwriting needs no space
    with pytest.raises(OSError) as exc:
        disk.pwritev(fd, [b"!"], 10)
    assert exc.value.errno == errno.ENOSPC
    disk.faults.fsync_eio_rate = 1.0
    with pytest.raises(OSError) as exc:
        disk.fsync(fd)
    assert exc.value.errno == errno.EIO
    disk.faults.fsync_eio_rate = 0.0
    disk.fsync(fd)  # succeeds, but (as on Linux) the failed write-back is gone
    disk.fsync_dir("/d")
    assert disk.crash().read("/d/f") == b""


def test_a_killed_process_leaves_its_page_cache_and_a_power_loss_takes_it():
    """SimDisk.kill (the simulator's `kill` fault): the process dies, the machine does not.
    Its next incarnation reads everything written, unsynced and EIO-dropped pages included;
    only a power loss takes them. The old incarnation is fenced."""
    disk = new_disk()
    write_file(disk, "/d/f", b"synced", sync=True)
    disk.fsync_dir("/d")
    fd = disk.open("/d/f")
    disk.pwritev(fd, [b"-cached"], 6)
    disk.faults.fsync_eio_rate = 1.0
    with pytest.raises(OSError):
        disk.fsync(fd)  # the pages are marked clean, never written
    disk.faults.fsync_eio_rate = 0.0
    write_file(disk, "/d/g", b"unsynced", sync=False)
    assert disk.ahead_of_disk()  # the dropped pages, not the merely unsynced file
    after = disk.kill()
    with pytest.raises(Fenced):
        disk.read("/d/f")
    assert after.read("/d/f") == b"synced-cached" and after.read("/d/g") == b"unsynced"
    assert after.reads_dropped and after.ahead_of_disk()
    lost = after.crash()
    assert lost.read("/d/f") == b"synced" and not lost.exists("/d/g")
    assert not lost.ahead_of_disk() and not lost.reads_dropped


def test_pages_a_failed_sync_dropped_are_ahead_of_the_disk_until_written_again():
    """`ahead_of_disk` (what the nemesis aims a kill, then a power loss, at): only writes a
    failed sync dropped count, not unsynced ones; a write of the same bytes that syncs puts
    them back; a kill does not, and its next incarnation says it started on such pages."""
    disk = new_disk()
    write_file(disk, "/d/f", b"synced", sync=True)
    disk.fsync_dir("/d")
    fd = disk.open("/d/f")
    disk.pwritev(fd, [b"-more"], 6)
    assert not disk.ahead_of_disk()  # unsynced, not dropped
    disk.faults.fsync_eio_rate = 1.0
    with pytest.raises(OSError):
        disk.fsync(fd)
    disk.faults.fsync_eio_rate = 0.0
    assert disk.ahead_of_disk()
    assert disk.kill().reads_dropped  # born of a kill on dropped pages
    again = new_disk()
    write_file(again, "/d/f", b"synced", sync=True)
    fd = again.open("/d/f")
    again.pwritev(fd, [b"-more"], 6)
    again.faults.fsync_eio_rate = 1.0
    with pytest.raises(OSError):
        again.fsync(fd)
    again.faults.fsync_eio_rate = 0.0
    again.pwritev(fd, [again.read("/d/f")], 0)  # written again, as bootstrap does
    assert not again.ahead_of_disk()  # dirty again: an ordinary unsynced write
    again.fsync(fd)
    assert not again.ahead_of_disk() and not again.kill().reads_dropped


def test_a_rename_whose_directory_sync_failed_is_ahead_of_the_disk():
    """A failing disk fails a directory's sync too: the rename stays in the cache only."""
    disk = new_disk()
    write_file(disk, "/d/f", b"one", sync=True)
    disk.fsync_dir("/d")
    write_file(disk, "/d/tmp", b"two", sync=True)
    disk.replace("/d/tmp", "/d/f")
    disk.faults.fsync_dir_eio_rate = 1.0
    with pytest.raises(OSError):
        disk.fsync_dir("/d")
    disk.faults.fsync_dir_eio_rate = 0.0
    assert disk.ahead_of_disk()
    after = disk.kill()
    assert after.read("/d/f") == b"two" and after.reads_dropped
    assert _durable(after, "/d/f") == b"one"  # what the crash below leaves, read beforehand
    assert after.crash().read("/d/f") == b"one"


def _durable(disk: SimDisk, path: str) -> bytes | None:
    f = disk.durable_file(path)
    return None if f is None else bytes(f.durable)


def test_the_durable_file_is_what_a_power_loss_keeping_nothing_unsynced_leaves():
    """The simulator's checks read what a power loss would leave without causing one: a file's
    last synced bytes, through directory entries their last syncs made durable."""
    disk = new_disk()
    write_file(disk, "/d/f", b"one", sync=True)
    assert _durable(disk, "/d/f") is None  # its directory entry was never synced
    disk.fsync_dir("/d")
    assert _durable(disk, "/d/f") == b"one"
    fd = disk.open("/d/f")
    disk.pwritev(fd, [b"two"], 0)
    disk.close(fd)
    assert disk.read("/d/f") == b"two" and _durable(disk, "/d/f") == b"one"
    assert disk.durable_file("/d") is None  # a directory is no file
    assert _durable(disk, "/d/f") == disk.crash().read("/d/f")


def test_a_descriptor_closed_twice_is_recorded_with_its_path():
    """A second close is EBADF here and harmless, since a handle is an object; a real process
    gives the number to the next file it opens, so the simulator records every second close
    (`closed_twice`) for its invariant check. A crashed incarnation's handles are not counted:
    the process is gone."""
    disk = new_disk()
    fd = disk.open("/d/f", create=True)
    disk.close(fd)
    assert disk.closed_twice == []
    with pytest.raises(OSError) as exc:
        disk.close(fd)
    assert exc.value.errno == errno.EBADF and disk.closed_twice == ["/d/f"]
    other = disk.open("/d/g", create=True)
    disk.crash()
    with pytest.raises(Fenced):
        disk.close(other)
    assert disk.closed_twice == ["/d/f"]


def test_a_filling_disk_counts_preallocated_space_and_writes_short():
    """SimFaults.fill, as a real disk fills: preallocated space is held, fallocate past the
    quota fails with ENOSPC, and a write past it writes what fits and returns that count (the
    next one fails), which pwrite_all completes or fails."""
    disk = new_disk(preallocate=True, fill=True)
    fd = disk.open("/d/f", create=True)
    disk.fallocate(fd, 0, 100)
    assert disk.usage() == 100
    disk.faults.quota_bytes = 110
    disk.pwritev(fd, [b"x" * 100], 0)  # into the preallocated space: no room needed
    with pytest.raises(OSError) as exc:
        disk.fallocate(fd, 0, 200)
    assert exc.value.errno == errno.ENOSPC
    assert disk.pwritev(fd, [b"y" * 30], 95) == 15  # short: 10 bytes of room past 100
    with pytest.raises(OSError) as exc:
        pwrite_all(disk, fd, [b"z" * 5], 110)
    assert exc.value.errno == errno.ENOSPC and disk.size("/d/f") == 110


# ---- durable.py on SimDisk ----


def test_write_atomic_leaves_old_or_new_at_every_crash_point():
    old, new = b"old" * 50, b"new" * 70
    k = 0
    while True:
        k += 1
        for seed in [None, *SEEDS]:
            disk = new_disk()
            durable.write_atomic("/d/meta", old, disk)
            proxy = CrashAt(disk, k)
            try:
                durable.write_atomic("/d/meta", new, proxy)
                returned = True
            except Fenced:
                returned = False
            after = disk.crash(None if seed is None else random.Random(seed))
            got = durable.read_verified("/d/meta", after)
            assert got == new if returned else got in (old, new), (k, seed)
            assert all(durable.is_temp_file(n) or n == "meta" for n in after.listdir("/d"))
        if returned:
            break
    assert k > 5  # create, write, sync, close, rename, dir sync: every step was a crash point


def test_a_flipped_bit_is_corruption_not_data():
    for seed in SEEDS:
        disk = new_disk()
        durable.write_atomic("/d/meta", b"payload" * 20, disk)
        disk.flip_bit(random.Random(seed), "/d/meta")
        with pytest.raises(CorruptionError):
            durable.read_verified("/d/meta", disk)


def test_a_chosen_flip_past_the_end_is_refused_not_wrapped_onto_another_byte():
    """A pinned (offset, bit) from an older layout of the file once wrapped silently onto the
    segment's magic: the test then failed on the wrong refusal, far from the cause."""
    disk = new_disk()
    durable.write_atomic("/d/meta", b"payload" * 20, disk)
    size = len(disk.read("/d/meta"))
    for at in ((size, 0), (-1, 0), (3, 8)):
        with pytest.raises(ValueError, match=rf"cannot flip bit .* of /d/meta: it holds {size} "):
            disk.flip_bit(path="/d/meta", at=at)
    assert durable.read_verified("/d/meta", disk) == b"payload" * 20  # nothing flipped
    assert disk.flip_bit(path="/d/meta", at=(size - 1, 7)) == ("/d/meta", size - 1, 7)


def test_tablet_files_go_through_the_paths_disk():
    disk = new_disk()
    paths = TabletPaths("/data", "t1", disk)
    Superblock("t1", "tbl", KeyRange(), DataState.READY).save(paths.superblock, paths.disk)
    assert Superblock.load(paths.superblock, disk).table_name == "tbl"
    assert disk.crash().read("/data/tablet-meta/t1")  # ensure_dir synced every new level


# ---- the WAL on SimDisk (inline mode) ----


def entry(index: int) -> Entry:
    return Entry(1, index, EntryType.REPLICATE, index.to_bytes(8, "little") * 4)


async def append_all(log: Log, n: int, acked: list[int]) -> None:
    """n entries from 3 concurrent writers (so groups form); stops at the first failure."""
    next_index = [1]

    async def writer() -> None:
        while next_index[0] <= n:
            i = next_index[0]
            next_index[0] += 1
            await log.append_future(log.reserve([entry(i)]))
            acked.append(i)

    await asyncio.gather(writer(), writer(), writer())


def recovered(disk: SimDisk, options: LogOptions = TINY) -> list[int]:
    log = Log.open("/d/wal", "t", options, disk=disk)
    try:
        return [e.index for e in log.recovered]
    finally:
        log.close()


def test_inline_log_appends_rolls_and_recovers_without_threads():
    disk = new_disk()
    acked: list[int] = []

    async def main() -> Log:
        log = Log.open("/d/wal", "t", TINY, disk=disk)
        await append_all(log, 60, acked)
        return log

    log = asyncio.run(main())
    assert sorted(acked) == list(range(1, 61))
    assert len(log.segments()) >= 3  # it rolled, preallocating inline
    log.close()
    assert recovered(disk.crash()) == list(range(1, 61))


@pytest.mark.parametrize("preallocate", [False, True])
def test_inline_log_recovers_exactly_the_durable_prefix_at_every_crash_point(preallocate):
    """Also on a disk that preallocates (the damage seeds' disks): a crash anywhere never
    leaves what bootstrap takes for a preallocated segment cut short."""
    k = 0
    while True:
        k += 1
        for seed in [None, *SEEDS[:4]]:
            disk = new_disk(sector_size=1 if seed and seed % 2 else 512,  # torn anywhere, or not
                            preallocate=preallocate)
            proxy = CrashAt(disk, k)
            acked: list[int] = []
            try:
                log = Log.open("/d/wal", "t", TINY, disk=proxy)
            except Fenced:
                log = None
            if log is not None:
                with contextlib.suppress(Fenced, WalError):  # the process died mid-way
                    asyncio.run(append_all(log, 30, acked))
            finished = proxy.calls < k
            got = recovered(disk.crash(None if seed is None else random.Random(seed)))
            assert got == list(range(1, len(got) + 1)), (k, seed)  # a gap-free prefix
            if seed is None:
                assert got == sorted(acked), (k, seed)  # exactly what was synced, i.e. acked
            else:
                assert set(acked) <= set(got), (k, seed)  # nothing acknowledged is lost
        if finished:
            break
    assert k > 30  # opening, rolls and every group were crash points


def test_the_simulator_catches_ack_before_fsync():
    disk = new_disk()
    options = LogOptions(faults=Faults(fault_ack_before_fsync=True))
    acked: list[int] = []

    async def main() -> None:
        log = Log.open("/d/wal", "t", options, disk=disk)
        await append_all(log, 5, acked)

    asyncio.run(main())
    assert sorted(acked) == [1, 2, 3, 4, 5]
    assert recovered(disk.crash(), options) != sorted(acked)  # an acknowledged entry is gone


def test_a_flipped_bit_in_a_segment_is_walcorruption():
    for seed in SEEDS:
        disk = new_disk()

        async def main(d=disk) -> None:
            log = Log.open("/d/wal", "t", TINY, disk=d)
            await append_all(log, 40, [])
            log.close()

        asyncio.run(main())
        segments = [n for n in disk.listdir("/d/wal")]
        victim = segments[random.Random(seed).randrange(len(segments) - 1)]  # not the newest
        disk.flip_bit(random.Random(seed), f"/d/wal/{victim}")
        with pytest.raises(WalCorruption):
            recovered(disk.crash())


def test_enospc_fails_the_log_instead_of_hanging():
    disk = new_disk()

    async def main() -> None:
        log = Log.open("/d/wal", "t", TINY, disk=disk)
        await log.append_future(log.reserve([entry(1)]))
        disk.faults.quota_bytes = disk._usage() + 300
        with pytest.raises(OSError) as exc:
            for i in range(2, 100):
                await asyncio.wait_for(log.append_future(log.reserve([entry(i)])), 5)
        assert exc.value.errno == errno.ENOSPC
        with pytest.raises(WalClosed, match="failed"):
            log.reserve([entry(i + 1)])
        log.close()

    asyncio.run(main())


def test_inline_back_pressure_and_sync_latency():
    disk = new_disk(fsync_latency=(0.001, 0.002))
    options = LogOptions(group_commit_queue_size_bytes=200)

    async def main() -> None:
        log = Log.open("/d/wal", "t", options, disk=disk)
        futures = [log.append_future(log.reserve([entry(i)])) for i in range(1, 20)]
        assert log._queued_bytes >= 200  # reserve() does not block the only thread
        await asyncio.wait_for(log.wait_for_space(), 5)
        assert log._queued_bytes < 200
        pending = log.append_future(log.reserve([entry(20)]))
        log.close()  # completes the group in flight and writes the rest, inline
        await asyncio.gather(*futures, pending)

    asyncio.run(main())
    assert recovered(disk.crash(), options) == list(range(1, 21))


def test_a_simulated_log_run_replays_bit_for_bit():
    def run(seed: int) -> list[tuple[str, bytes]]:
        disk = new_disk(fsync_latency=(0.0, 0.0005), sector_size=1)

        async def main() -> None:
            log = Log.open("/d/wal", "t", TINY, disk=disk)
            await append_all(log, 20, [])
            await log.append_future(log.truncate_suffix(15))

        asyncio.run(main())
        after = disk.crash(random.Random(seed))
        return [(n, after.read(f"/d/wal/{n}")) for n in after.listdir("/d/wal")]

    assert [run(s) for s in SEEDS[:4]] == [run(s) for s in SEEDS[:4]]


def test_file_serials_tell_older_files_from_newer_ones_across_crashes():
    """What the simulator's tombstone invariant reads: each file's creation order, kept by a
    rename and by a crash, and a mark that every later file is above."""
    disk = new_disk()
    durable.ensure_dir("/d/t", disk)
    write_file(disk, "/d/t/old", b"a", sync=True)
    disk.fsync_dir("/d/t")
    mark = disk.serial_mark()
    durable.write_atomic("/d/t/new", b"b", disk)  # a temp file renamed into place
    serials = dict(disk.file_serials("/d/t"))
    assert serials["/d/t/old"] <= mark < serials["/d/t/new"]
    after = disk.crash()
    assert dict(after.file_serials("/d/t")) == serials and after.serial_mark() == disk.serial_mark()
    write_file(after, "/d/t/newer", b"c", sync=False)
    assert dict(after.file_serials("/d/t"))["/d/t/newer"] > serials["/d/t/new"]
    assert after.file_serials("/d/none") == [] and after.usage() == 1 + 1 + 1 + durable.HEADER_SIZE


def test_fsync_meter_sums_the_sampled_latency_of_the_syncs_inside():
    from harness.sim.disk import fsync_meter

    disk = new_disk(fsync_latency=(0.1, 0.1))
    with fsync_meter() as outer:
        write_file(disk, "/d/a", b"x", sync=True)
        with fsync_meter() as inner:  # the innermost meter is charged
            disk.fsync_dir("/d")
    assert outer.seconds == pytest.approx(0.1) and inner.seconds == pytest.approx(0.1)
    disk.fsync_dir("/d")  # no meter: nothing to charge
    disk.faults.fsync_latency = (0.0, 0.0)
    with fsync_meter() as none:
        durable.write_atomic("/d/b", b"y", disk)
    assert none.seconds == 0.0


def test_preallocation_reads_as_zeros_and_lasts_once_synced_and_a_truncation_frees_it():
    disk = new_disk(preallocate=True)
    fd = disk.open("/d/f", create=True)
    disk.fallocate(fd, 0, 4096)
    disk.pwritev(fd, [b"abc"], 0)
    assert disk.size("/d/f") == 4096 and disk.read("/d/f") == b"abc" + bytes(4093)
    assert disk.read("/d/f", 4090, 100) == bytes(6) and disk.read("/d/f", 1, 3) == b"bc\0"
    disk.fsync_dir("/d")
    assert disk.crash().size("/d/f") == 0  # neither the data nor the allocation was synced
    disk = new_disk(preallocate=True)
    fd = disk.open("/d/f", create=True)
    disk.fallocate(fd, 0, 4096)
    disk.pwritev(fd, [b"abc"], 0)
    disk.fsync(fd)
    disk.fsync_dir("/d")
    disk.ftruncate(fd, 100)  # unsynced: a crash keeps the allocation
    assert disk.size("/d/f") == 100
    after = disk.crash()
    assert after.size("/d/f") == 4096 and after.read("/d/f", 0, 4) == b"abc\0"
    fd = after.open("/d/f")
    after.ftruncate(fd, 10)
    after.fsync(fd)
    assert after.crash().read("/d/f") == b"abc" + bytes(7)
    plain = new_disk()  # without the model fallocate is a no-op, as it always was
    fd = plain.open("/d/f", create=True)
    plain.fallocate(fd, 0, 4096)
    assert plain.size("/d/f") == 0


def _written_log(preallocate: bool, n: int = 40) -> SimDisk:
    disk = new_disk(preallocate=preallocate)

    async def main() -> None:
        log = Log.open("/d/wal", "t", TINY, disk=disk)
        await append_all(log, n, [])

    asyncio.run(main())  # not closed: the newest segment is left unfinished, as by a crash
    return disk.crash()


def test_a_preallocated_newest_segment_cut_short_is_refused_and_one_never_preallocated_is_not():
    """A crash never shrinks a preallocated segment, so the reader refuses one that is
    shorter than its header says it was made (wal.recover.cut_short_refused). Without
    preallocation a cut at a batch boundary is a log that ended there: why the damage
    fault cuts the newest segment only where it was preallocated."""
    from node import probes
    from node.wal.segment import scan_segment

    for preallocate in (True, False):
        disk = _written_log(preallocate)
        newest = f"/d/wal/{disk.listdir('/d/wal')[-1]}"
        scan = scan_segment(newest, disk=disk)
        assert bool(scan.header.prealloc) == preallocate and scan.footer is None
        disk.truncate_at_rest(newest, scan.records[-1].offset)  # the last batch cut off
        if preallocate:
            with probes.expect("wal.recover.cut_short_refused"), pytest.raises(
                    WalCorruption, match="cut short"):
                recovered(disk)
        else:
            assert recovered(disk)[-1] < 40  # an entry lost, and nothing can tell


def test_damage_at_rest_truncates_zeroes_loses_and_misplaces_files():
    disk = new_disk(preallocate=True)
    write_file(disk, "/d/a", b"a" * 1000, sync=True)
    write_file(disk, "/d/b", b"b" * 10, sync=True)
    disk.fsync_dir("/d")
    disk.zero_at_rest("/d/a", 512, 512)
    assert disk.read("/d/a") == b"a" * 512 + bytes(488)
    disk.truncate_at_rest("/d/a", 100)
    disk.misplace_at_rest("/d/b", disk, "/d/a")
    disk.lose_at_rest("/d/a")
    after = disk.crash()
    assert after.listdir("/d") == ["b"] and after.read("/d/b") == b"a" * 100
    fd = after.open("/d/b")
    after.pwritev(fd, [b"x"], 0)  # unsynced: not at rest
    with pytest.raises(ValueError, match="not at rest"):
        after.truncate_at_rest("/d/b", 1)
    assert after.durable_bytes("/d/b") == b"a" * 100


def test_a_file_lost_while_its_process_runs_is_gone_for_reads_and_crashes_alike():
    """lose_live: only a name at rest may go (its directory holds no unsynced change of it);
    a handle the process holds still writes to the file, as Linux keeps an unlinked inode, and
    neither reads nor a crash find the name again."""
    disk = new_disk()
    write_file(disk, "/d/a", b"a" * 10, sync=True)
    write_file(disk, "/d/b", b"b" * 10, sync=True)
    disk.fsync_dir("/d")
    write_file(disk, "/d/c", b"c", sync=True)  # its name not synced yet
    assert disk.losable("/d") == ["/d/a", "/d/b"]
    with pytest.raises(ValueError, match="not a file whose name is at rest"):
        disk.lose_live("/d/c")
    fd = disk.open("/d/a")
    disk.lose_live("/d/a")
    disk.pwritev(fd, [b"x"], 0)  # the orphan takes the write
    disk.fsync(fd)
    assert not disk.exists("/d/a") and disk.listdir("/d") == ["b", "c"]
    assert disk.crash().listdir("/d") in (["b"], ["b", "c"])


def test_bytes_held_is_walked_again_after_every_change():
    """bytes_held is cached between changes: after each kind of change (and across a crash's
    incarnations, which share the files) it still equals a fresh walk."""
    disk = SimDisk(random.Random(1))
    steps = [
        lambda d: d.mkdir("/d"),
        lambda d: d.pwritev(d.open("/d/a", create=True), [b"x" * 100], 0),
        lambda d: d.fsync(d.open("/d/a")),
        lambda d: d.pwritev(d.open("/d/a"), [b"y" * 50], 90),
        lambda d: d.ftruncate(d.open("/d/a"), 20),
        lambda d: d.replace("/d/a", "/d/b"),
        lambda d: d.fsync_dir("/d"),
        lambda d: d.pwritev(d.open("/d/c", create=True), [b"z" * 7], 0),
        lambda d: d.unlink("/d/c"),
        lambda d: d.crash(random.Random(2)),
        lambda d: d.rmtree("/d"),
        lambda d: d.fsync_dir("/"),
    ]
    for step in steps:
        assert disk.bytes_held() == disk._walk_held()
        out = step(disk)
        if isinstance(out, SimDisk):
            disk = out
        assert disk.bytes_held() == disk._walk_held()
