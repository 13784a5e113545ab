"""The Log: group commit (order, one vectored write and one sync per group), asyncio
completions, byte-bounded back-pressure, sync policy, roll, truncation, anchors and GC,
and failure handling."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time

import pytest

from node import probes
from node.entry import Entry, EntryType
from node.wal import Log, LogOptions, WalClosed, WalCorruption, WalError, read_log
from node.wal import format as fmt
from node.wal import segment as segment_mod
from node.wal.segment import scan_segment

TABLET = "t-log"
TINY = LogOptions(log_segment_size_mb=4 / 1024)  # 4 KiB segments: rolls happen quickly


def entry(index: int, term: int = 1, size: int = 16) -> Entry:
    return Entry(term, index, EntryType.REPLICATE, index.to_bytes(8, "little") * (size // 8))


def append_durably(log: Log, entries: list[Entry]) -> None:
    done = threading.Event()
    errors: list[BaseException | None] = []
    log.async_append(log.reserve(entries), lambda err: (errors.append(err), done.set()))
    assert done.wait(30)
    assert errors == [None]


class Counting:
    """Counts the syscalls the appender makes (a unit test: no real crash involved)."""

    def __init__(self, monkeypatch):
        self.calls: list[str] = []
        for name in ("pwritev", "fdatasync", "fsync"):
            real = getattr(os, name)
            monkeypatch.setattr(segment_mod.os, name, self._wrap(name, real))

    def _wrap(self, name, real):
        def call(*args):
            self.calls.append(name)
            return real(*args)

        return call


def test_threads_append_in_reservation_order_and_everything_is_recovered(tmp_path):
    log = Log.open(str(tmp_path), TABLET, TINY)
    order_lock = threading.Lock()
    acked: list[int] = []
    state = {"next": 1}

    def writer():
        for _ in range(150):
            with order_lock:
                i = state["next"]
                state["next"] += 1
                res = log.reserve([entry(i)])
            log.async_append(res, lambda err, i=i: acked.append(i if err is None else -i))

    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    assert acked == list(range(1, 1201))
    with Log.open(str(tmp_path), TABLET, TINY) as again:
        assert again.recovered == [entry(i) for i in range(1, 1201)]


def test_a_group_is_one_vectored_write_and_one_sync_with_callbacks_in_order(tmp_path, monkeypatch):
    log = Log.open(str(tmp_path), TABLET)
    counter = Counting(monkeypatch)
    acked: list[int] = []
    reservations = [log.reserve([entry(i)]) for i in range(1, 11)]
    # Fill them in reverse: the appender must wait for the first before writing any.
    for i, res in reversed(list(enumerate(reservations, 1))):
        log.async_append(res, lambda err, i=i: acked.append(i))
    log.close()
    assert acked == list(range(1, 11))
    writes_and_syncs = counter.calls[: counter.calls.index("pwritev", 1)]  # before the footer
    assert writes_and_syncs == ["pwritev", "fdatasync"]


def test_asyncio_writers_get_durability_futures(tmp_path):
    log = Log.open(str(tmp_path), TABLET, TINY)

    async def main():
        counter = iter(range(1, 10**9))

        async def writer():
            for _ in range(40):
                await log.wait_for_space()
                await log.append_future(log.reserve([entry(next(counter))]))

        await asyncio.gather(*(writer() for _ in range(16)))

    asyncio.run(main())
    log.close()
    assert read_log(str(tmp_path), TABLET).entries == [entry(i) for i in range(1, 641)]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_closing_on_the_loop_or_after_it_leaves_no_descriptor_behind(tmp_path):
    """The appender's doorbell and the loop's wake-up descriptor close with the log, whether
    close() runs on the loop or after asyncio.run() closed it."""
    before = open_fds()
    for n, close_on_loop in enumerate([True, False, True, False]):
        log = Log.open(str(tmp_path / str(n)), TABLET)

        async def main(log=log, close_on_loop=close_on_loop):
            for i in range(1, 6):
                await log.append_future(log.reserve([entry(i)]))
            if close_on_loop:
                log.close()

        asyncio.run(main())
        if not close_on_loop:
            log.close()
    assert open_fds() == before


def test_close_from_another_thread_completes_the_futures_on_the_loop(tmp_path):
    async def main():
        before = open_fds()
        log = Log.open(str(tmp_path), TABLET)
        futures = [log.append_future(log.reserve([entry(i)])) for i in range(1, 4)]
        closer = threading.Thread(target=log.close)
        closer.start()
        await asyncio.wait_for(asyncio.gather(*futures), 30)
        await asyncio.get_running_loop().run_in_executor(None, closer.join)
        await asyncio.sleep(0)  # the unbinding ran on this loop: its descriptor is closed
        return open_fds() - before

    assert asyncio.run(main()) == 0
    assert read_log(str(tmp_path), TABLET).entries == [entry(i) for i in range(1, 4)]


def test_reserve_blocks_while_the_queue_is_full_of_bytes(tmp_path):
    log = Log.open(str(tmp_path), TABLET, LogOptions(group_commit_queue_size_bytes=1000))
    head = log.reserve([entry(1)])  # not filled yet: the appender waits for it
    for i in range(2, 20):
        log.async_append(log.reserve([entry(i, size=200)]), lambda err: None)
        if log._queued_bytes >= 1000:
            break
    blocked = threading.Thread(target=lambda: log.async_append(log.reserve([entry(i + 1)]), lambda err: None))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive(), "reserve() went past the byte bound"
    log.async_append(head, lambda err: None)
    blocked.join(30)
    assert not blocked.is_alive()
    log.close()
    assert [e.index for e in read_log(str(tmp_path), TABLET).entries] == list(range(1, i + 2))


def test_wait_for_space_waits_for_the_appender_to_drain(tmp_path):
    log = Log.open(str(tmp_path), TABLET, LogOptions(group_commit_queue_size_bytes=500))

    async def main():
        head = log.reserve([entry(1)])
        tail = log.append_future(log.reserve([entry(2, size=800)]))
        waiter = asyncio.ensure_future(log.wait_for_space())
        await asyncio.sleep(0.2)
        assert not waiter.done()
        first = log.append_future(head)
        await asyncio.wait_for(asyncio.gather(first, tail, waiter), 30)

    asyncio.run(main())
    log.close()


def test_fdatasync_inside_the_preallocated_region_fsync_beyond_it(tmp_path, monkeypatch):
    log = Log.open(str(tmp_path / "pre"), TABLET)
    counter = Counting(monkeypatch)
    append_durably(log, [entry(1)])
    assert counter.calls == ["pwritev", "fdatasync"]
    log.close()
    log = Log.open(str(tmp_path / "nopre"), TABLET, LogOptions(log_preallocate_segments=False))
    counter.calls.clear()
    append_durably(log, [entry(1)])
    assert counter.calls == ["pwritev", "fsync"]
    log.close()


def test_without_force_fsync_groups_are_not_synced(tmp_path, monkeypatch):
    log = Log.open(str(tmp_path), TABLET, LogOptions(log_force_fsync_all=False))
    counter = Counting(monkeypatch)
    for i in range(1, 20):
        append_durably(log, [entry(i)])
    assert set(counter.calls) == {"pwritev"}
    log.close()
    assert "fsync" in counter.calls  # the footer is still synced on close


def test_segments_roll_preallocated_and_are_cut_to_their_length_when_finished(tmp_path):
    log = Log.open(str(tmp_path), TABLET, TINY)
    active = log.segments()[-1]
    assert os.path.getsize(active) == TINY.segment_bytes  # preallocated
    i = 0
    while len(log.segments()) < 4:
        i += 1
        append_durably(log, [entry(i, size=256)])
    log.close()
    for path in log.segments():
        scan = scan_segment(path)
        assert scan.footer is not None and scan.problem is None
        assert scan.size == scan.end + fmt.FOOTER_SIZE  # no preallocated slack left behind
    assert [e.index for e in read_log(str(tmp_path), TABLET).entries] == list(range(1, i + 1))


def test_truncate_suffix_replaces_the_tail_durably(tmp_path):
    with Log.open(str(tmp_path), TABLET, TINY) as log:
        append_durably(log, [entry(i) for i in range(1, 11)])
        with pytest.raises(ValueError):
            log.truncate_suffix(11)
        log.async_append(log.truncate_suffix(6), lambda err: None)
        with pytest.raises(ValueError, match="does not follow"):
            log.reserve([entry(8, term=2)])
        append_durably(log, [entry(7, term=2), entry(8, term=2)])
    with Log.open(str(tmp_path), TABLET, TINY) as log:
        assert log.recovered == [entry(i) for i in range(1, 7)] + [entry(7, term=2), entry(8, term=2)]
        assert log.last_index == 8


def test_gc_deletes_only_segments_below_every_anchor_and_keeps_the_retained(tmp_path):
    log = Log.open(str(tmp_path), TABLET, TINY)
    i = 0
    while len(log.segments()) < 8:
        i += 1
        append_durably(log, [entry(i, size=256)])
    assert log.gc() == []  # no anchor: nothing may be forgotten
    footers = {p: scan_segment(p).footer for p in log.segments()[:-1]}
    log.register_anchor("durability", i)
    log.register_anchor("peer", 1)
    assert log.gc() == []  # the peer still needs everything
    log.register_anchor("peer", footers[log.segments()[3]].min_index)  # moved: pins segment 4 on
    deleted = log.gc()
    assert deleted == list(footers)[:3]
    assert all(footers[p].max_index < footers[log.segments()[0]].min_index for p in deleted)
    log.release_anchor("peer")
    deleted = log.gc()
    assert len(log.segments()) == 2  # one retained closed segment and the active one
    assert not any(os.path.exists(p) for p in deleted)
    log.close()
    with Log.open(str(tmp_path), TABLET, TINY) as again:
        indexes = [e.index for e in again.recovered]
        assert indexes == list(range(indexes[0], i + 1)) and indexes[0] > 1


def test_a_failed_sync_fails_the_group_and_the_log(tmp_path, monkeypatch):
    log = Log.open(str(tmp_path), TABLET)

    def broken(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(segment_mod.os, "fdatasync", broken)
    done = threading.Event()
    errors = []
    log.async_append(log.reserve([entry(1)]), lambda err: (errors.append(err), done.set()))
    assert done.wait(30)
    assert isinstance(errors[0], OSError)
    with pytest.raises(WalClosed, match="failed"):
        log.reserve([entry(2)])
    log.close()


def test_a_failed_roll_never_closes_a_descriptor_another_file_was_given(tmp_path):
    """A roll whose footer write fails (a full disk) closed the old segment in `finish`; the
    log failed, and its close at the replica's stop closed that number again. The process had
    given it out meanwhile, here to another tablet's newest segment, whose next append then
    failed (EBADF: a healthy replica FAILED); had it been given out once more, that appender
    would have written and synced its batches into someone else's file."""
    import errno

    from node.disk import RealDisk

    class FooterFails(RealDisk):
        armed = False

        def pwritev(self, fd, bufs, offset):
            if self.armed and bytes(bufs[0][:8]) == fmt.FOOTER_MAGIC:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().pwritev(fd, bufs, offset)

    disk = FooterFails()
    a = Log.open(str(tmp_path / "a"), "a", LogOptions(log_segment_size_mb=1 / 16), disk=disk)
    index = 1
    while a._next is None and a._next_thread is None:  # until the next segment is prepared
        append_durably(a, [entry(index, size=4096)])
        index += 1
    if a._next_thread is not None:
        a._next_thread.join()
    disk.armed = True
    done, errors = threading.Event(), []
    a.async_append(a.reserve([entry(index, size=4096)]), lambda e: (errors.append(e), done.set()))
    assert done.wait(30) and isinstance(errors[0], OSError), errors
    b = Log.open(str(tmp_path / "b"), "b", LogOptions())
    try:
        append_durably(b, [entry(1)])
        a.close()
        append_durably(b, [entry(2)])  # b's segment is still b's
        assert [e.index for e in read_log(str(tmp_path / "b")).entries] == [1, 2]
    finally:
        b.close()


def test_closed_log_refuses_appends(tmp_path):
    log = Log.open(str(tmp_path), TABLET)
    log.close()
    with pytest.raises(WalClosed):
        log.reserve([entry(1)])
    scan = scan_segment(log.segments()[-1])
    assert scan.footer == fmt.Footer(0, -1, -1)


def test_a_suffix_truncated_across_segments_and_collected_below_an_anchor_reads_back(tmp_path):
    log = Log.open(str(tmp_path), TABLET, TINY)
    i = 0
    while len(log.segments()) < 5:
        i += 1
        append_durably(log, [entry(i, size=256)])
    log.async_append(log.truncate_suffix(i - 3), lambda err: None)
    append_durably(log, [entry(i - 2, term=2)])
    expected = [entry(n, size=256) for n in range(1, i - 2)] + [entry(i - 2, term=2)]
    # Anchored just past the oldest segment, wherever it ended: a segment rolls once its
    # successor is preallocated in the background, so on a busy machine the oldest may hold
    # far more entries than the size alone gives, and a fixed anchor could fall inside it.
    anchor = scan_segment(log.segments()[0]).footer.max_index + 1
    log.register_anchor("peer", anchor)
    log.gc()
    log.close()
    again = Log.open(str(tmp_path), TABLET, TINY)
    first = again.recovered[0].index
    assert 1 < first <= anchor, "GC kept nothing below the anchor's segment, and nothing above it"
    assert again.recovered == expected[first - 1 :]
    again.close()


def test_gc_takes_a_segment_lost_at_rest_as_deleted_and_collects_the_rest(tmp_path):
    """A closed segment below every anchor loses its name while the log runs (a file system
    check, a stray rm). GC deletes the others and forgets it; before, the FileNotFoundError left
    every doomed segment listed, so each later GC failed on it again and the log only grew."""
    log = Log.open(str(tmp_path), TABLET, LogOptions(log_segment_size_mb=4 / 1024,
                                                     log_min_segments_to_retain=1))
    i = 0
    while len(log.segments()) < 5:
        i += 1
        append_durably(log, [entry(i, size=256)])
    first, *rest = log.segments()
    os.unlink(first)
    log.register_anchor("core", i)
    with probes.expect("wal.gc.segment_already_gone"):
        deleted = log.gc()
    # the newest closed segment stays (log_min_segments_to_retain), and the active one
    assert deleted == [first, *rest[:2]] and log.segments() == rest[2:]
    assert log.gc() == []
    log.close()


def test_gc_keeps_log_min_segments_to_retain(tmp_path):
    log = Log.open(str(tmp_path), TABLET, LogOptions(log_segment_size_mb=4 / 1024, log_min_segments_to_retain=3))
    i = 0
    while len(log.segments()) < 6:
        i += 1
        append_durably(log, [entry(i, size=256)])
    log.register_anchor("all-done", i + 1)
    log.gc()
    assert len(log.segments()) == 4  # three closed segments and the active one
    log.close()


def test_a_truncation_is_written_only_once_its_callback_is_attached(tmp_path):
    """A truncation reserved behind an unfilled reservation used to be ready at once: the group
    that wrote the reservation ahead of it took the truncation too, before its owner attached
    a callback, and the completion was lost (the appender called a None callback)."""
    calls: list[str] = []
    done = {k: threading.Event() for k in ("first", "truncate", "after")}

    def cb(name):
        return lambda err: (calls.append(f"{name}:{err}"), done[name].set())

    with Log.open(str(tmp_path), TABLET) as log:
        first = log.reserve([entry(i) for i in range(1, 4)])
        trunc = log.truncate_suffix(1)
        log.async_append(first, cb("first"))  # rings the appender: it writes the ready prefix
        assert done["first"].wait(30)
        log.async_append(trunc, cb("truncate"))  # attached after that group was written
        assert done["truncate"].wait(5), "the truncation's completion was lost"
        log.async_append(log.reserve([entry(2, term=2)]), cb("after"))
        assert done["after"].wait(30)
        assert calls == ["first:None", "truncate:None", "after:None"]
        assert log._queued_bytes == 0
    with Log.open(str(tmp_path), TABLET) as log:
        assert log.recovered == [entry(1), entry(2, term=2)]


def test_a_truncation_future_resolves_in_order_with_the_appends_after_it(tmp_path):
    """The asyncio path the replica uses: truncate_suffix then append_future."""

    async def main():
        with Log.open(str(tmp_path), TABLET) as log:
            first = log.reserve([entry(i) for i in range(1, 4)])
            trunc = log.truncate_suffix(2)
            await asyncio.wait_for(log.append_future(first), 30)
            resolved: list[str] = []
            after = log.append_future(log.reserve([entry(3, term=2)]))
            after.add_done_callback(lambda _f: resolved.append("after"))
            await asyncio.sleep(0.2)
            assert not after.done(), "an append was durable before the truncation ahead of it"
            fut = log.append_future(trunc)
            fut.add_done_callback(lambda _f: resolved.append("truncate"))
            await asyncio.wait_for(asyncio.gather(fut, after), 30)
            assert resolved == ["truncate", "after"]
        with Log.open(str(tmp_path), TABLET) as log:
            assert log.recovered == [entry(1), entry(2), entry(3, term=2)]

    asyncio.run(main())


def test_a_reservation_handed_over_twice_is_refused(tmp_path):
    with Log.open(str(tmp_path), TABLET) as log:
        res = log.reserve([entry(1)])
        log.async_append(res, lambda err: None)
        with pytest.raises(WalError, match="twice"):
            log.async_append(res, lambda err: None)


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_a_wake_pending_when_another_thread_closes_the_log_is_handled(tmp_path, loop_kind):
    """Found by the copy-race chaos test: the appender had rung the loop's wake descriptor, a
    tombstone closed the log from a worker thread while the loop was busy, and the loop then
    ran the wake callback on a descriptor the close had already forgotten (an unhandled
    ValueError in the tablet server's log, every time it happened)."""
    errors = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        log = Log.open(str(tmp_path), TABLET)
        futures = [log.append_future(log.reserve([entry(i)])) for i in range(1, 4)]
        while not log._done and not all(f.done() for f in futures):  # the appender rang
            time.sleep(0.001)  # blocks the loop: the wake stays pending
        closer = threading.Thread(target=log.close)
        closer.start()
        closer.join()  # still blocking the loop: the close lands while the wake is pending
        await asyncio.wait_for(asyncio.gather(*futures), 30)
        for _ in range(3):
            await asyncio.sleep(0)

    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        uvloop.run(main())
    else:
        asyncio.run(main())
    assert errors == []
    assert read_log(str(tmp_path), TABLET).entries == [entry(i) for i in range(1, 4)]


def _unfinished(tmp_path, n: int = 6) -> tuple[str, list[int]]:
    """The image a crash leaves: a preallocated newest segment holding `n` durable entries,
    never finished (copied while the log is open). Its path, and where each batch starts."""
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    with Log.open(str(live), TABLET, TINY) as log:
        for i in range(1, n + 1):
            append_durably(log, [entry(i)])
        shutil.copytree(live, crashed)
        path = str(crashed / os.path.basename(log.segments()[-1]))
    return path, [r.offset for r in scan_segment(path).records]


@pytest.mark.parametrize("where", ["mid-batch", "batch-boundary"])
def test_a_preallocated_segment_cut_short_is_damage_not_a_torn_tail(tmp_path, where):
    """A crash never shrinks a preallocated file, so a newest segment shorter than the length
    its header says it was made is refused (the disk nemesis's truncation, which bootstrap
    used to cut as a torn tail, losing fsynced entries it had acknowledged)."""
    path, offsets = _unfinished(tmp_path)
    assert fmt.parse_segment_header(open(path, "rb").read(64)).prealloc == TINY.segment_bytes
    cut = offsets[4] + (7 if where == "mid-batch" else 0)
    os.truncate(path, cut)
    with (probes.expect("wal.recover.cut_short_refused"),
          pytest.raises(WalCorruption, match="cut short, not a torn write") as err):
        Log.open(os.path.dirname(path), TABLET, TINY)
    assert (err.value.path, err.value.offset) == (path, cut)


def test_a_torn_write_inside_the_preallocation_is_still_cut_as_torn(tmp_path):
    """The same batch lost to a torn write (its sectors never written: zeros, the file's
    length unchanged) is a torn tail: the entries before it are recovered."""
    path, offsets = _unfinished(tmp_path)
    with open(path, "r+b") as f:
        f.seek(offsets[5])
        f.write(b"\0" * 16)
    assert os.path.getsize(path) == TINY.segment_bytes
    with (probes.expect("wal.recover.torn_tail_cut"),
          Log.open(os.path.dirname(path), TABLET, TINY) as log):
        assert log.last_index == 5


def test_a_crash_between_the_footer_and_the_cut_reads_as_a_torn_footer(tmp_path):
    """Finishing syncs the footer before it cuts the preallocated rest: a crash in between
    leaves a full-length file with the footer followed by zeros, whose entries all recover."""
    path, offsets = _unfinished(tmp_path)
    end = scan_segment(path).end
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(fmt.encode_footer(fmt.Footer(6, 1, 6)))
    with Log.open(os.path.dirname(path), TABLET, TINY) as log:
        assert log.last_index == 6


def test_every_crash_point_of_finishing_a_segment_recovers_every_entry(tmp_path):
    """A crash after any step of finishing the newest segment leaves a log that opens with
    every entry: the file is cut short of its preallocation only once its footer is synced
    (were it cut first, the cut file without its footer would read as damage)."""
    from node.disk import RealDisk

    class Imaging(RealDisk):
        """Keeps the segment's bytes after each write, cut or sync of the close: each is what
        a crash right after that step could leave."""

        def __init__(self):
            self.images: list[bytes] | None = None

        def _image(self, fd):
            if self.images is not None:
                with open(os.readlink(f"/proc/self/fd/{fd}"), "rb") as f:
                    self.images.append(f.read())

        def pwritev(self, fd, bufs, offset):
            n = super().pwritev(fd, bufs, offset)
            self._image(fd)
            return n

        def ftruncate(self, fd, length):
            super().ftruncate(fd, length)
            self._image(fd)

    disk = Imaging()
    live = tmp_path / "live"
    log = Log.open(str(live), TABLET, TINY, disk=disk)
    for i in range(1, 7):
        append_durably(log, [entry(i)])
    name = os.path.basename(log.segments()[-1])
    disk.images = []
    log.close()
    assert len(disk.images) >= 2  # the footer, and the cut
    for n, image in enumerate(disk.images):
        crashed = tmp_path / f"crash{n}"
        shutil.copytree(live, crashed)
        (crashed / name).write_bytes(image)
        with Log.open(str(crashed), TABLET, TINY) as reopened:
            assert reopened.last_index == 6, n


def test_on_a_disk_whose_syncs_take_time_a_group_is_durable_only_when_its_sync_ends():
    """Inline mode (the simulator): a group is written at once and synced at the end of the
    disk's fsync latency, when it is acknowledged. A power loss inside that window keeps any
    prefix of the group, torn at a sector in some crashes: bootstrap cuts the torn tail and
    keeps the acknowledged group before it, every time."""
    import copy
    import random

    from harness.sim.disk import SimDisk, SimFaults
    from harness.sim.loop import SimLoop
    from harness.sim.network import SimNetwork

    loop = SimLoop(SimNetwork(0))
    disk = SimDisk(random.Random(1), SimFaults(fsync_latency=(0.25, 0.25)))

    _written_log = []

    async def write():
        log = Log.open("/wal", TABLET, disk=disk)
        _written_log.append(log)
        await log.append_future(log.reserve([entry(1, size=2000)]))
        acked_at = loop.time()
        pending = log.append_future(log.reserve([entry(2, size=2000), entry(3, size=2000)]))
        await asyncio.sleep(0.1)  # inside the second group's sync
        return acked_at, pending

    acked_at, pending = loop.run_until_complete(write())
    assert acked_at == pytest.approx(0.25) and not pending.done()
    log = _written_log[0]
    # a tablet copy sends the synced log only: the group inside its sync is not offered yet
    # (the whole-stack simulator's follower-source copies rely on it, as production does)
    assert log.copy_extents(1)[1:] == (1, 1)
    assert disk.unsynced() == ["/wal/wal-000000001"]
    kept = []
    with probes.expect("wal.recover.torn_tail_cut") as hits:
        for s in range(20):
            crashed = copy.deepcopy(disk).crash(random.Random(s))
            log = loop.run_until_complete(_open(crashed))
            kept.append(log.last_index)
            log.close()
    assert min(kept) >= 1  # the acknowledged entry, always
    assert hits["wal.recover.torn_tail_cut"] >= 1 and set(kept) <= {1, 3}, kept


async def _open(disk):
    return Log.open("/wal", TABLET, disk=disk)


def _simulated_disk():
    """A simulated loop and a SimDisk without faults yet (it models what a failed sync leaves
    in the page cache)."""
    import random

    from harness.sim.disk import SimDisk, SimFaults
    from harness.sim.loop import SimLoop
    from harness.sim.network import SimNetwork

    return SimLoop(SimNetwork(0)), SimDisk(random.Random(1), SimFaults())


def test_batches_a_failed_sync_left_in_the_page_cache_are_made_durable_before_they_are_trusted():
    """An fsync that fails with EIO leaves its pages clean in the page cache (as Linux does;
    SimDisk models it): a process restarted without a power loss read those never-durable
    batches as intact, and a power loss later took them from under entries it had acknowledged
    (the newest segment then refused to open). Bootstrap writes the recovered tail again and
    syncs it before it trusts it. Found by a review of the recovery paths."""
    loop, disk = _simulated_disk()

    async def write():
        log = Log.open("/wal", TABLET, disk=disk)
        await log.append_future(log.reserve([entry(1), entry(2), entry(3)]))
        disk.faults.fsync_eio_rate = 1.0
        with pytest.raises(OSError):  # the log fails (the replica goes FAILED)
            await log.append_future(log.reserve([entry(4), entry(5), entry(6)]))
        disk.faults.fsync_eio_rate = 0.0

    loop.run_until_complete(write())
    restarted = loop.run_until_complete(_open(disk))  # the process died; the cache did not
    assert [e.index for e in restarted.recovered] == [1, 2, 3, 4, 5, 6]
    after_power_loss = loop.run_until_complete(_open(disk.crash()))
    assert [e.index for e in after_power_loss.recovered] == [1, 2, 3, 4, 5, 6]
    after_power_loss.close()


def test_a_footer_whose_sync_failed_is_made_durable_before_a_newer_segment_is_made():
    """A clean close (or a roll) writes the segment's footer and syncs it; if that sync fails
    with EIO, the footer stays readable in the page cache but never reached the disk. A
    process restarted without a power loss read the segment as finished and began the next
    one; a power loss later took the footer, and the older segment, with no footer and not the
    newest, refused to open (the replica FAILED on an undamaged disk). Bootstrap writes the
    newest segment again and syncs it before it trusts its footer. Found by the whole-stack
    simulator's disk-fault mix."""
    loop, disk = _simulated_disk()

    async def first_life():
        log = Log.open("/wal", TABLET, disk=disk)
        await log.append_future(log.reserve([entry(1), entry(2), entry(3)]))
        disk.faults.fsync_eio_rate = 1.0
        with pytest.raises(OSError):  # the footer's sync
            log.close()
        disk.faults.fsync_eio_rate = 0.0

    async def second_life(log):
        await log.append_future(log.reserve([entry(4)]))
        log.close()

    loop.run_until_complete(first_life())
    restarted = loop.run_until_complete(_open(disk))  # the process died; the cache did not
    assert [e.index for e in restarted.recovered] == [1, 2, 3]
    loop.run_until_complete(second_life(restarted))
    after_power_loss = loop.run_until_complete(_open(disk.crash()))
    assert [e.index for e in after_power_loss.recovered] == [1, 2, 3, 4]
    after_power_loss.close()


def test_gc_keeps_every_file_a_pinned_copy_lists(tmp_path):
    """An empty closed segment (a restart with no writes) before the ones a copy needs: GC
    may delete it whatever the anchors, so the copy must not list it. It did, and the copy
    failed on it as a pinned file gone missing."""
    d, opts = str(tmp_path / "wal"), LogOptions(log_preallocate_segments=False)

    def reopened(first: int, last: int) -> Log:
        wal = Log.open(d, TABLET, opts)
        if first <= last:
            append_durably(wal, [Entry(1, i, EntryType.NO_OP) for i in range(first, last + 1)])
        return wal

    reopened(1, 10).close()  # wal-1: 1..10
    reopened(1, 0).close()  # wal-2: empty
    reopened(11, 20).close()  # wal-3: 11..20
    wal = reopened(1, 0)  # wal-4, active
    try:
        wal.register_anchor("copy:s", 12)  # a copy from snapshot 11 on (CopyPins.pin)
        extents, first, last = wal.copy_extents(12)
        wal.register_anchor("core", 12)
        wal.gc()
        assert [os.path.basename(p) for p, _ in extents] == ["wal-000000003", "wal-000000004"]
        assert all(os.path.exists(p) for p, _ in extents)
        assert (first, last) == (11, 20)
    finally:
        wal.close()
