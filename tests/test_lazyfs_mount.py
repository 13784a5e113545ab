"""lazyfs on real FUSE mounts: what survives `lose`, what `flush`, fsync and a clean unmount make
durable, metadata, the WAL on top of it, and a writer SIGKILLed mid-stream."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading

import pytest
from lazyfs_helpers import DEADLINE, REPO, Mount, mounted, start_lazyfs, wait_until
from wal_mutants import trust_the_cached_tail

from nemeses.lazyfs import CONTROL_NAME, mount_command
from node.wal import Log, LogOptions, read_log
from node.wal.errors import WalCorruption

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse"),
]


def write_file(path: str, data: bytes, offset: int = 0, sync: bool = False, flags: int = 0) -> None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | flags, 0o644)
    try:
        os.pwrite(fd, data, offset)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# ---- data semantics ----


def test_reads_show_unsynced_writes_and_lose_drops_exactly_them(lazy):
    f = lazy.path("f")
    write_file(f, b"A" * 100, sync=True)
    write_file(f, b"B" * 50, offset=80)  # overwrites 20 durable bytes, grows the file by 30
    assert read_file(f) == b"A" * 80 + b"B" * 50
    assert os.path.getsize(f) == 130
    assert lazy.backing_bytes("f") == b"A" * 100
    stats = lazy.stats()
    assert stats["files"] == {"/f": 50} and stats["unsynced_bytes"] == 50
    lazy.command("lose")
    assert read_file(f) == b"A" * 100
    assert os.path.getsize(f) == 100
    assert lazy.stats()["unsynced_bytes"] == 0 and lazy.stats()["lost_bytes"] == 50


def test_close_is_not_durable_and_fdatasync_is(lazy):
    write_file(lazy.path("closed"), b"gone")
    fd = os.open(lazy.path("synced"), os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"kept")
    os.fdatasync(fd)
    os.write(fd, b"+lost")
    os.close(fd)
    lazy.command("lose")
    assert read_file(lazy.path("closed")) == b""  # the name survives: metadata is immediate
    assert read_file(lazy.path("synced")) == b"kept"


def test_append_mode_writes_flush_to_their_offsets(lazy):
    f = lazy.path("log")
    write_file(f, b"0123456789", sync=True)
    with open(f, "ab") as app, open(f, "r+b") as rw:
        app.write(b"tail")
        app.flush()
        rw.write(b"X")  # offset 0, through another handle, unsynced too
        rw.flush()
        os.fsync(app.fileno())
    assert lazy.backing_bytes("log") == b"X123456789tail"


def test_o_dsync_writes_are_durable_each(lazy):
    write_file(lazy.path("d"), b"each write synced", flags=os.O_DSYNC)
    assert lazy.backing_bytes("d") == b"each write synced"
    lazy.command("lose")
    assert read_file(lazy.path("d")) == b"each write synced"


def test_flush_makes_everything_durable(lazy):
    write_file(lazy.path("a"), b"alpha")
    os.mkdir(lazy.path("dir"))
    write_file(lazy.path("dir/b"), b"beta", offset=10)  # a hole before the data
    assert read_file(lazy.path("dir/b")) == bytes(10) + b"beta"
    lazy.command("flush")
    assert lazy.backing_bytes("a") == b"alpha"
    assert lazy.backing_bytes("dir/b") == bytes(10) + b"beta"
    lazy.command("lose")
    assert read_file(lazy.path("dir/b")) == bytes(10) + b"beta"


def test_truncate_applies_to_unsynced_bytes_and_backing_alike(lazy):
    f = lazy.path("t")
    write_file(f, b"D" * 100, sync=True)
    write_file(f, b"U" * 100, offset=100)  # unsynced growth to 200
    os.truncate(f, 150)
    assert read_file(f) == b"D" * 100 + b"U" * 50
    lazy.command("lose")
    # The size change was metadata, applied at once: the lost bytes read back as zeros.
    assert read_file(f) == b"D" * 100 + bytes(50)

    write_file(f, b"N" * 30, offset=50)  # unsynced overwrite of 50..80
    fd = os.open(f, os.O_RDWR)
    os.ftruncate(fd, 60)
    os.close(fd)
    assert read_file(f) == b"D" * 50 + b"N" * 10
    lazy.command("lose")
    assert read_file(f) == b"D" * 60

    write_file(f, b"W" * 10)
    with open(f, "wb") as out:  # O_TRUNC: the kernel truncates first, then writes
        out.write(b"new")
    assert read_file(f) == b"new"
    lazy.command("lose")
    assert read_file(f) == b""


def test_large_file_round_trip(lazy):
    data = os.urandom(24 << 20)
    f = lazy.path("big")
    with open(f, "wb") as out:
        for i in range(0, len(data), 1 << 20):
            out.write(data[i : i + (1 << 20)])
    assert read_file(f) == data
    assert lazy.stats()["unsynced_bytes"] == len(data)
    with open(f, "rb+") as out:
        os.fsync(out.fileno())
    assert lazy.backing_bytes("big") == data
    assert lazy.stats()["unsynced_bytes"] == 0


def test_concurrent_writers_and_readers(lazy):
    blobs = {f"w{i}": os.urandom(1 << 20) for i in range(4)}
    errors: list[BaseException] = []

    def writer(name: str, blob: bytes) -> None:
        try:
            path = lazy.path(name)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            for off in range(0, len(blob), 4096):
                os.pwrite(fd, blob[off : off + 4096], off)
                got = os.pread(fd, 4096, off)
                assert got == blob[off : off + 4096]
                if off % (256 << 10) == 0:
                    os.fsync(fd)
            os.close(fd)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=writer, args=item) for item in blobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for name, blob in blobs.items():
        assert read_file(lazy.path(name)) == blob
    lazy.command("flush")
    for name, blob in blobs.items():
        assert lazy.backing_bytes(name) == blob


def test_posix_fallocate_works_and_is_durable_only_after_fsync(lazy):
    f = lazy.path("prealloc")
    fd = os.open(f, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 8 << 20)  # glibc's fallback: the kernel says EOPNOTSUPP
        assert os.fstat(fd).st_size == 8 << 20
        assert lazy.stats()["unsynced_bytes"] > 0  # the zeros glibc wrote, one per block
        os.pwrite(fd, b"header", 0)
        assert os.pread(fd, 16, 0) == b"header" + bytes(10)
        assert os.pread(fd, 16, (8 << 20) - 16) == bytes(16)
    finally:
        os.close(fd)
    lazy.command("lose")
    assert os.path.getsize(f) == 0
    fd = os.open(f, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 8 << 20)
        os.fsync(fd)
    finally:
        os.close(fd)
    lazy.command("lose")
    assert os.path.getsize(f) == 8 << 20


# ---- metadata ----


def test_rename_carries_unsynced_bytes_and_fsync_under_the_new_name(lazy):
    write_file(lazy.path("old"), b"moving")
    os.rename(lazy.path("old"), lazy.path("new"))
    assert read_file(lazy.path("new")) == b"moving"
    assert lazy.stats()["files"] == {"/new": 6}
    assert os.listdir(lazy.backing) == ["new"]  # the rename itself is immediate
    with open(lazy.path("new"), "rb") as f:
        os.fsync(f.fileno())  # through a read-only handle: fsync is per file, not per handle
    lazy.command("lose")
    assert read_file(lazy.path("new")) == b"moving"


def test_unlink_forgets_unsynced_bytes_and_a_new_file_starts_empty(lazy):
    for _ in range(20):  # backing inode numbers get reused: none may inherit unsynced bytes
        write_file(lazy.path("x"), b"stale" * 100)
        os.unlink(lazy.path("x"))
        wait_until(lambda: lazy.stats()["unsynced_bytes"] == 0, "the unlinked file to be forgotten")
        write_file(lazy.path("x"), b"")
        assert read_file(lazy.path("x")) == b""
        os.unlink(lazy.path("x"))


def test_unlinked_open_file_keeps_its_data_until_closed(lazy):
    fd = os.open(lazy.path("tmp"), os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"still here")
    os.unlink(lazy.path("tmp"))
    try:
        assert os.pread(fd, 100, 0) == b"still here"
        os.pwrite(fd, b"!", 10)
        assert os.pread(fd, 100, 0) == b"still here!"
    finally:
        os.close(fd)
    # The kernel sends the release after close() returns: forgetting follows shortly.
    wait_until(lambda: lazy.stats()["unsynced_bytes"] == 0, "the closed unlinked file to be forgotten")
    assert os.listdir(lazy.backing) == []  # no .fuse_hidden leftovers


def test_rename_over_a_file_drops_the_replaced_files_unsynced_bytes(lazy):
    write_file(lazy.path("victim"), b"v" * 10)
    write_file(lazy.path("winner"), b"w" * 3, sync=True)
    os.rename(lazy.path("winner"), lazy.path("victim"))
    assert read_file(lazy.path("victim")) == b"www"
    wait_until(lambda: lazy.stats()["unsynced_bytes"] == 0, "the replaced file to be forgotten")


def test_hard_links_share_unsynced_bytes(lazy):
    write_file(lazy.path("one"), b"shared")
    os.link(lazy.path("one"), lazy.path("two"))
    assert read_file(lazy.path("two")) == b"shared"
    os.unlink(lazy.path("one"))
    with open(lazy.path("two"), "rb") as f:
        os.fsync(f.fileno())
    assert lazy.backing_bytes("two") == b"shared"


def test_directories_symlinks_modes_and_times_pass_through(lazy):
    os.makedirs(lazy.path("a/b"))
    os.symlink("b", lazy.path("a/link"))
    assert os.readlink(lazy.path("a/link")) == "b"
    assert os.readlink(os.path.join(lazy.backing, "a/link")) == "b"
    write_file(lazy.path("a/b/f"), b"x", sync=True)
    os.chmod(lazy.path("a/b/f"), 0o600)
    os.utime(lazy.path("a/b/f"), ns=(1_000_000_000, 2_000_000_000))
    st = os.stat(os.path.join(lazy.backing, "a/b/f"))
    assert (st.st_mode & 0o777, st.st_mtime_ns) == (0o600, 2_000_000_000)
    assert os.stat(lazy.path("a/b/f")).st_mtime_ns == 2_000_000_000
    assert sorted(os.listdir(lazy.path("a"))) == ["b", "link"]
    with pytest.raises(OSError) as e:
        os.rmdir(lazy.path("a"))
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(FileNotFoundError):
        os.stat(lazy.path("missing"))
    with pytest.raises(FileExistsError):
        os.mkdir(lazy.path("a"))
    fd = os.open(lazy.path("a"), os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)  # fsyncdir
    os.close(fd)


# ---- the control file ----


def test_what_another_user_creates_is_that_users_as_on_a_disk(lazy):
    """A daemon that drops root (MariaDB's mysqld runs as `mysql`) must own what it creates on
    the root-run mount, or it cannot reopen its own files for writing."""
    nobody = 65534
    os.chmod(lazy.path(""), 0o777)
    script = ("import os; os.setgid(65534); os.setuid(65534); os.mkdir('d'); "
              "fd = os.open('d/f', os.O_CREAT | os.O_WRONLY, 0o600); os.close(fd); "
              "os.symlink('f', 'd/l'); fd = os.open('d/f', os.O_RDWR); os.write(fd, b'x')")
    # run from inside the mount: the test's temporary dirs above it are root's alone
    subprocess.run([sys.executable, "-c", script], cwd=lazy.path(""), check=True, timeout=DEADLINE)
    for name in ("d", "d/f", "d/l"):
        st = os.lstat(lazy.path(name))
        assert (st.st_uid, st.st_gid) == (nobody, nobody), name
    write_file(lazy.path("mine"), b"root's")
    assert os.stat(lazy.path("mine")).st_uid == 0


def test_control_file_is_hidden_and_refuses_unknown_commands(lazy):
    write_file(lazy.path("f"), b"1")
    assert os.listdir(lazy.mnt) == ["f"]
    assert CONTROL_NAME not in os.listdir(lazy.backing)
    with pytest.raises(OSError) as e, open(lazy.control, "w") as f:
        f.write("explode\n")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(PermissionError):
        os.unlink(lazy.control)
    assert lazy.stats()["unsynced_bytes"] == 1  # the refused command did nothing


# ---- crashes ----

STREAM_CHILD = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
n = 0
while True:
    os.write(fd, b"record %08d\n" % n)
    n += 1
    if n % 10 == 0:
        os.fsync(fd)
        os.write(1, b"%d\n" % n)
"""


def test_sigkill_mid_stream_then_lose_keeps_exactly_a_synced_prefix(lazy):
    f = lazy.path("stream")
    child = subprocess.Popen([sys.executable, "-c", STREAM_CHILD, f], stdout=subprocess.PIPE)
    try:
        acked = 0
        while acked < 200:
            acked = int(child.stdout.readline())
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    size_before = os.path.getsize(f)
    unsynced = lazy.stats()["unsynced_bytes"]
    lazy.command("lose")
    data = read_file(f)
    record = len(b"record 00000000\n")
    stream = b"".join(b"record %08d\n" % i for i in range(size_before // record + 1))
    assert data == stream[: len(data)]
    assert len(data) >= acked * record  # every fsync that returned is kept
    assert len(data) % (10 * record) == 0  # ... and nothing after the last one
    assert len(data) + unsynced == size_before


WAL_CHILD = r"""
import os, sys
from node.entry import Entry, EntryType
from node.wal import Log, LogOptions

directory, fsync_all, first_batch = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
entry = lambda i: Entry(1, i, EntryType.REPLICATE, b"payload-%d" % i)
if first_batch:  # a cleanly closed log: its segment is finished and synced
    log = Log.open(directory, "t", LogOptions())
    for i in range(1, first_batch + 1):
        log.async_append(log.reserve([entry(i)]), lambda err: None)
    log.close()
log = Log.open(directory, "t", LogOptions(log_force_fsync_all=fsync_all))
i = log.last_index or 0
while True:
    i += 1
    log.async_append(log.reserve([entry(i)]), lambda err, i=i: os.write(1, b"%d\n" % i) if err is None else None)
"""


def run_wal_child_until(lazy: Mount, fsync_all: bool, first_batch: int, acks: int) -> int:
    """Run the appender until `acks` entries are acknowledged, SIGKILL it, return the highest."""
    directory = lazy.path("wal")
    child = subprocess.Popen(
        [sys.executable, "-c", WAL_CHILD, directory, "1" if fsync_all else "0", str(first_batch)],
        stdout=subprocess.PIPE, cwd=REPO,
    )
    try:
        highest = 0
        while highest < acks:
            line = child.stdout.readline()
            assert line, "the WAL child died"
            highest = int(line)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    return highest


def test_wal_with_fsync_keeps_every_acknowledged_entry_after_lose(lazy):
    acked = run_wal_child_until(lazy, fsync_all=True, first_batch=0, acks=300)
    lazy.command("lose")
    log = Log.open(lazy.path("wal"), "t")
    try:
        indexes = [e.index for e in log.recovered]
        assert indexes == list(range(1, len(indexes) + 1))
        assert len(indexes) >= acked
        assert all(e.payload == b"payload-%d" % e.index for e in log.recovered)
    finally:
        log.close()


def test_wal_without_fsync_loses_acknowledged_entries_after_lose(lazy):
    acked = run_wal_child_until(lazy, fsync_all=False, first_batch=20, acks=300)
    # A crash of the process alone loses nothing: the unsynced bytes are still "in the cache".
    assert len(read_log(lazy.path("wal"), "t").entries) >= acked
    lazy.command("lose")
    log = Log.open(lazy.path("wal"), "t", LogOptions(log_force_fsync_all=False))
    try:
        # Only the cleanly closed first batch was ever synced.
        assert [e.index for e in log.recovered] == list(range(1, 21))
    finally:
        log.close()


# ---- a failing disk (eio) ----


def test_a_failing_disk_keeps_the_bytes_of_a_failed_sync_readable_but_never_durable(lazy):
    """Linux's page cache after a failed fsync: the unsynced bytes are marked clean, never written.
    They read back, no later sync or flush writes them, a newer write over them replaces them,
    and `lose` takes them."""
    f = lazy.path("f")
    write_file(f, b"A" * 100, sync=True)
    write_file(f, b"B" * 50, offset=80)
    lazy.command("eio")
    fd = os.open(f, os.O_RDWR)
    try:
        with pytest.raises(OSError) as exc:
            os.fsync(fd)
        assert exc.value.errno == errno.EIO
        assert lazy.stats()["dropped_bytes"] == 50 and lazy.stats()["unsynced_bytes"] == 0
        dfd = os.open(lazy.mnt, os.O_RDONLY)
        try:
            with pytest.raises(OSError):
                os.fsync(dfd)  # a directory's sync fails too
        finally:
            os.close(dfd)
        lazy.command("mend")
        os.fsync(fd)  # succeeds, and writes nothing: the failed bytes are clean
        assert lazy.backing_bytes("f") == b"A" * 100
        assert read_file(f) == b"A" * 80 + b"B" * 50 and os.path.getsize(f) == 130
        os.pwrite(fd, b"C" * 10, 90)  # over dropped bytes: the newer write's now
        os.fsync(fd)
    finally:
        os.close(fd)
    lazy.command("flush")
    assert lazy.backing_bytes("f") == b"A" * 90 + b"C" * 10
    assert read_file(f) == b"A" * 80 + b"B" * 10 + b"C" * 10 + b"B" * 30
    lazy.command("lose")
    assert read_file(f) == b"A" * 90 + b"C" * 10
    assert lazy.stats()["dropped_bytes"] == 0 and lazy.stats()["lost_bytes"] == 40


def test_a_file_removed_after_its_sync_failed_leaves_nothing_to_a_new_file(lazy):
    """A failed sync's bytes belong to their inode: once it is unlinked and closed they are
    forgotten, so a new file the backing filesystem gives the same inode number starts empty.
    (A server's atomic save whose fsync failed removes its temp file; the next save's temp file
    read back the failed one's bytes past its own end, as corruption no nemesis made.)"""
    lazy.command("eio")
    try:
        for n in range(20):  # backing inode numbers get reused: none may inherit dropped bytes
            fd = os.open(lazy.path("tmp"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.pwrite(fd, b"stale" * 49, 0)
                with pytest.raises(OSError):
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.unlink(lazy.path("tmp"))
            wait_until(lambda: lazy.stats()["dropped_bytes"] == 0, "the removed file to be forgotten")
            # forgotten, but counted: the failing-disk fault tells by this that a sync failed
            assert lazy.stats()["dropped_total_bytes"] == 245 * (n + 1)
            write_file(lazy.path("new"), b"mine")
            assert read_file(lazy.path("new")) == b"mine" and os.path.getsize(lazy.path("new")) == 4
            os.unlink(lazy.path("new"))
    finally:
        lazy.command("mend")


EIO_CHILD = r"""
import os, sys, threading
from node.entry import Entry, EntryType
from node.wal import Log

log = Log.open(sys.argv[1], "t")
entry = lambda i: Entry(1, i, EntryType.REPLICATE, b"payload-%d" % i)
done = threading.Semaphore(0)
for i in range(1, 21):
    log.async_append(log.reserve([entry(i)]), lambda err: done.release())
for _ in range(20):
    done.acquire()
print("synced", flush=True)
sys.stdin.readline()  # the disk fails now
# one batch, so one write: five appends of their own were written as one batch or as one
# write that failed the log and four refused unwritten, by the writer thread's timing
log.async_append(log.reserve([entry(i) for i in range(21, 26)]),
                 lambda err: (print("failed" if err else "ok", flush=True), done.release()))
done.acquire()
threading.Event().wait()  # until killed
"""


def _wal_left_on_failed_syncs(lazy: Mount) -> list[str]:
    """A WAL process appends 20 entries durably, the disk fails, a batch of 5 more fails its
    sync, the process is killed and the disk mended: the 5 are in the page cache only."""
    child = subprocess.Popen([sys.executable, "-c", EIO_CHILD, lazy.path("wal")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO, text=True)
    try:
        assert child.stdout.readline() == "synced\n"
        lazy.command("eio")
        child.stdin.write("go\n")
        child.stdin.flush()
        answers = [child.stdout.readline().strip()]
    finally:
        child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()
    lazy.command("mend")
    assert lazy.stats()["dropped_bytes"] > 0
    return answers


def _indexes_after_restart_then_power_loss(lazy: Mount) -> tuple[list[int], list[int]]:
    log = Log.open(lazy.path("wal"), "t")  # restarted without a power loss: reads the cache
    read = [e.index for e in log.recovered]
    log.close()
    lazy.command("lose")
    log = Log.open(lazy.path("wal"), "t")
    try:
        return read, [e.index for e in log.recovered]
    finally:
        log.close()


def test_a_wal_restarted_on_pages_its_failed_syncs_left_keeps_what_it_read(lazy):
    """The engine's bootstrap writes the recovered tail again and syncs it: what a process
    restarted after failed syncs read (and a replica would acknowledge) survives a power loss."""
    assert _wal_left_on_failed_syncs(lazy) == ["failed"]
    read, after = _indexes_after_restart_then_power_loss(lazy)
    assert read == list(range(1, 26)) and after == read


def test_a_wal_that_trusted_pages_its_failed_syncs_left_breaks_at_the_power_loss(lazy, monkeypatch):
    """The bootstrap before (a footer after the tail it read, its bytes trusted): the power loss
    takes the 5 entries from under the footer, and the next open finds the segment corrupt."""
    trust_the_cached_tail(monkeypatch)
    _wal_left_on_failed_syncs(lazy)
    with pytest.raises(WalCorruption):
        _indexes_after_restart_then_power_loss(lazy)


# ---- mount and unmount ----


def lazyfs_pids(path: str) -> list[int]:
    """The lazyfs processes serving `path` (a unique temporary directory)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"nemeses.lazyfs" in argv and path.encode() in argv:
            pids.append(int(pid))
    return pids


def test_daemonized_mount_over_its_own_backing_flushes_on_unmount_and_exits(tmp_path):
    data = tmp_path / "data"  # mounted over itself, as a node's data dir would be
    data.mkdir()
    (data / "durable").write_bytes(b"before")
    mnt = str(data)
    try:
        subprocess.run(mount_command(mnt, mnt, python=sys.executable), shell=True, check=True, cwd=REPO)
        assert mounted(mnt)  # the command returned once the mount was up
        assert len(lazyfs_pids(mnt)) == 1
        assert read_file(os.path.join(mnt, "durable")) == b"before"
        write_file(os.path.join(mnt, "unsynced"), b"written back on unmount")
        subprocess.run(["fusermount3", "-u", mnt], check=True)  # no flush command first
        assert not mounted(mnt)
        wait_until(lambda: not lazyfs_pids(mnt), "the detached lazyfs to exit")
    finally:
        for pid in lazyfs_pids(mnt):
            os.kill(pid, 9)
        if mounted(mnt):
            subprocess.run(["fusermount3", "-uz", mnt], check=False)
    assert sorted(os.listdir(data)) == ["durable", "unsynced"]
    assert (data / "unsynced").read_bytes() == b"written back on unmount"


def test_mounting_a_missing_directory_fails_with_a_message(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "nemeses.lazyfs", str(tmp_path / "nope"), str(tmp_path)],
        capture_output=True, text=True, cwd=REPO,
    )
    assert r.returncode == 2 and "not a directory" in r.stderr


def test_sigterm_unmounts_cleanly_after_flushing(tmp_path):
    proc, backing, mnt = start_lazyfs(tmp_path)
    try:
        wait_until(lambda: mounted(str(mnt)), "the mount")
        write_file(str(mnt / "f"), b"shutdown writes back")
        proc.terminate()
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if mounted(str(mnt)):
            subprocess.run(["fusermount3", "-uz", str(mnt)], check=False)
    assert not mounted(str(mnt))
    assert (backing / "f").read_bytes() == b"shutdown writes back"
