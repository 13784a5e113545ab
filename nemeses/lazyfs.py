"""lazyfs: a FUSE passthrough that loses the writes not yet fsynced, on command (Jepsen's lazyfs).

    python -m nemeses.lazyfs BACKING MOUNTPOINT [--foreground]
    echo lose  > MOUNTPOINT/.lazyfs-control    # drop every unsynced write: a power loss
    echo flush > MOUNTPOINT/.lazyfs-control    # make every write durable
    echo eio   > MOUNTPOINT/.lazyfs-control    # the disk fails: every fsync fails with EIO
    echo mend  > MOUNTPOINT/.lazyfs-control    # the disk works again
    cat MOUNTPOINT/.lazyfs-control             # JSON: unsynced bytes in total and per file
    fusermount3 -u MOUNTPOINT                  # lazyfs flushes, then exits 0

Without --foreground the command returns once the mount is up and the filesystem runs detached.
MOUNTPOINT may be BACKING itself (BACKING is opened before the mount hides it). The harness
builds these lines with mount_command, control_command and unmount_command below; the last
flushes before fusermount, because lazyfs's own flush at unmount runs after fusermount returns.

Semantics:
- Data: write() keeps the bytes in memory, per file (per backing inode, so renames and hard
  links share them). Reads show backing + unsynced bytes, as a page cache would; a file is as
  long as its last unsynced byte. fsync/fdatasync of a file writes its unsynced bytes to BACKING
  and syncs them there; so does `flush`, and so does a clean unmount (fusermount -u, or SIGTERM /
  SIGINT to lazyfs): like an orderly shutdown, which writes back the page cache. close() is
  not durable. O_SYNC/O_DSYNC files are durable per write (the kernel fsyncs after each one).
- `eio` makes every fsync, fdatasync and directory sync fail with EIO until `mend`, as a failing
  disk does, with Linux's page-cache semantics: the file's unsynced bytes are marked clean but
  never written. They stay readable (a process restarted without a power loss reads them as
  if they were on disk), no later fsync or `flush` writes them, a newer write over them replaces
  them, and `lose` (or an unmount) takes them, as does unlinking the file once no handle holds
  it (its inode is free then, and a new file may get its number). The stats count them as
  `dropped_bytes` while they are held, and every byte ever dropped as `dropped_total_bytes`.
- `lose` forgets the unsynced bytes of every file. It is meant to follow a SIGKILL of the
  processes using the mount: wait until they are gone (a killed process's write that is already
  in flight still lands), then `lose`, then restart them. Files still open elsewhere may keep
  showing lost bytes from the kernel's page cache until they are reopened.
- Metadata goes to BACKING at once, durable or not as BACKING makes it: create, mkdir, rename,
  unlink, rmdir, link, symlink, chmod, chown, utimens, and size changes by truncate/ftruncate
  (which also cut the unsynced bytes past the new size). A simplification: a real filesystem
  may also lose directory entries and size changes that were not fsynced.
- fallocate: fusepy cannot serve it, so the kernel answers EOPNOTSUPP and glibc's
  posix_fallocate falls back to writing a zero byte per block: preallocated space is unsynced
  data like any other until the file is fsynced.
- Control: MOUNTPOINT/.lazyfs-control is answered by lazyfs, is not in BACKING (a BACKING file
  of that name would be shadowed) and so not in directory listings. A write of an unknown
  command fails with EINVAL. Each open of it reads a fresh snapshot of the stats: JSON with
  unsynced_bytes, files (path at last write -> unsynced bytes), loses and lost_bytes.
- Unlinked files stay readable and writable through open descriptors, but fstat() on them
  fails with ENOENT (libfuse's path-based API with hard_remove, chosen so that no .fuse_hidden
  files ever appear in BACKING). Extended attributes are not supported; POSIX and flock locks
  are local to this host's kernel.
- Killing lazyfs itself (SIGKILL) leaves a dead mount ("Transport endpoint is not connected")
  that `fusermount3 -u` removes; its unsynced bytes are lost.
- Unsynced bytes live in this process's memory: a writer that never fsyncs grows it unbounded.
"""

from __future__ import annotations

import argparse
import errno
import itertools
import json
import os
import shlex
import stat
import sys
import threading
from dataclasses import dataclass

from nemeses.lazyfs_extents import Extents

CONTROL_NAME = ".lazyfs-control"
COMMANDS = ("lose", "flush", "eio", "mend")
_CONTROL = "/" + CONTROL_NAME
# Flags the backing fd must not get: writes go through pwrite at the kernel's offsets, and
# O_DIRECT would reject unaligned flushes. (O_TRUNC never comes with open: without the
# atomic_o_trunc option the kernel truncates with a separate setattr, i.e. truncate().)
_STRIPPED = os.O_APPEND | getattr(os, "O_DIRECT", 0)
_STAT_FIELDS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks",
                "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_rdev", "st_blksize")
_STATVFS_FIELDS = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                   "f_ffree", "f_favail", "f_namemax")


def mount_command(backing: str, mountpoint: str, python: str = "python3") -> str:
    return f"{python} -m nemeses.lazyfs {shlex.quote(backing)} {shlex.quote(mountpoint)}"


def control_command(mountpoint: str, command: str) -> str:
    """The shell line that sends `lose`, `flush`, `eio` or `mend`; it fails if the mount is not
    a lazyfs."""
    if command not in COMMANDS:
        raise ValueError(f"unknown lazyfs command {command!r}")
    return f"echo {command} > {shlex.quote(os.path.join(mountpoint, CONTROL_NAME))}"


def stats_command(mountpoint: str) -> str:
    """The shell line that prints the mount's stats (JSON: unsynced and dropped bytes)."""
    return f"cat {shlex.quote(os.path.join(mountpoint, CONTROL_NAME))}"


def unmount_command(mountpoint: str) -> str:
    """Flush, then unmount: the data is in BACKING when the line returns. (lazyfs flushes by
    itself on unmount too, but only after fusermount has returned, before the process exits.)"""
    control = shlex.quote(os.path.join(mountpoint, CONTROL_NAME))
    return f"(echo flush > {control}) 2>/dev/null; fusermount3 -u {shlex.quote(mountpoint)}"


def _error(code: int) -> OSError:
    return OSError(code, os.strerror(code))


@dataclass
class _Unsynced:
    """A file's unsynced bytes (or, in `_dropped`, those a failed sync left), with its own fd
    on the backing inode: flushes work after every handle is closed or the file renamed, and
    the inode cannot be reused while it is held."""

    fd: int
    path: str  # the file's name when last written, for the stats
    extents: Extents


@dataclass
class _Handle:
    fd: int  # -1 for the control file
    key: tuple[int, int]  # backing (st_dev, st_ino)
    path: str
    snapshot: bytes = b""  # control file: the stats at open


class LazyFS:
    """The fusepy operations (called as operations(name, *args)); every error is an OSError
    whose errno fusepy returns to the kernel. One lock guards all state; syncs run outside it."""

    use_ns = True
    flag_nullpath_ok = True  # fh-based operations need no path: unlinked open files keep working
    flag_nopath = True

    def __init__(self, backing: str) -> None:
        self.root = os.open(backing, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._handles: dict[int, _Handle] = {}
        self._ids = itertools.count(1)
        self._open: dict[tuple[int, int], int] = {}  # key -> open handles
        self._unsynced: dict[tuple[int, int], _Unsynced] = {}
        # bytes a failed sync marked clean without writing them: readable until `lose`, or
        # until the file is unlinked and closed. Each holds its fd on the inode, as _Unsynced
        # does, so the backing filesystem cannot give the number to a new file meanwhile.
        self._dropped: dict[tuple[int, int], _Unsynced] = {}
        self._failing = False  # `eio`: every sync fails
        # every byte a failed sync ever dropped: `dropped_bytes` is what is held now, and it
        # falls when a dropped file is unlinked and closed (a temp file the daemon removed
        # after its sync failed), so only this one tells that a sync failed at all
        self._dropped_total = 0
        self._lost_bytes = 0
        self._loses = 0

    def __call__(self, op: str, *args):
        return getattr(self, op)(*args)

    # ---- helpers ----

    @staticmethod
    def _rel(path: str) -> str:
        return path.lstrip("/") or "."

    def _handle(self, fi) -> _Handle:
        handle = self._handles.get(fi.fh)
        if handle is None:
            raise _error(errno.EBADF)
        return handle

    @staticmethod
    def _guard(path: str) -> None:
        """The control file has no metadata to change."""
        if path == _CONTROL:
            raise _error(errno.EPERM)

    def _forget_if_unreachable(self, key: tuple[int, int]) -> None:
        """Drop the unsynced and the dropped bytes of a file that is unlinked and no longer
        open: nobody can read them again, and the inode's number is free for a new file. Call
        with the lock held."""
        held = self._unsynced.get(key) or self._dropped.get(key)
        if held is None or self._open.get(key) or os.fstat(held.fd).st_nlink != 0:
            return
        for table in (self._unsynced, self._dropped):
            record = table.pop(key, None)
            if record is not None:
                os.close(record.fd)

    def _existing_key(self, path: str) -> tuple[int, int] | None:
        try:
            st = os.stat(self._rel(path), dir_fd=self.root, follow_symlinks=False)
        except FileNotFoundError:
            return None
        return (st.st_dev, st.st_ino)

    def _flush_one(self, key: tuple[int, int]) -> _Unsynced | None:
        """Write a file's unsynced bytes to the backing file; the caller syncs and closes.
        Call with the lock held: readers must never see the bytes in neither place."""
        u = self._unsynced.pop(key, None)
        if u is None:
            return None
        try:
            for offset, chunk in u.extents.items():
                view = memoryview(chunk)
                while view:
                    n = os.pwrite(u.fd, view, offset)
                    view, offset = view[n:], offset + n
        except BaseException:  # like a kernel after a failed writeback: the bytes are gone
            os.close(u.fd)
            raise
        return u

    @staticmethod
    def _sync_and_close(flushed: list[_Unsynced]) -> None:
        """fsync every flushed file, close them all, then raise the first error."""
        error: OSError | None = None
        for u in flushed:
            try:
                os.fsync(u.fd)
            except OSError as e:
                error = error or e
            finally:
                os.close(u.fd)
        if error is not None:
            raise error

    def _stats(self) -> bytes:
        with self._lock:
            files: dict[str, int] = {}
            for u in self._unsynced.values():
                files[u.path] = files.get(u.path, 0) + u.extents.nbytes
            stats = {"unsynced_bytes": sum(files.values()), "files": files,
                     "loses": self._loses, "lost_bytes": self._lost_bytes,
                     "dropped_bytes": sum(d.extents.nbytes for d in self._dropped.values()),
                     "dropped_total_bytes": self._dropped_total,
                     "failing": self._failing}
        return (json.dumps(stats, sort_keys=True) + "\n").encode()

    def _command(self, data: bytes) -> None:
        commands = data.decode(errors="replace").split()
        if not commands or any(c not in COMMANDS for c in commands):
            raise _error(errno.EINVAL)
        for c in commands:
            if c == "lose":
                self.lose()
            elif c == "flush":
                self.flush_all()
            else:
                with self._lock:
                    self._failing = c == "eio"

    def lose(self) -> None:
        with self._lock:
            gone, self._unsynced = self._unsynced, {}
            dropped, self._dropped = self._dropped, {}
            self._loses += 1
            self._lost_bytes += sum(u.extents.nbytes for u in gone.values())
            self._lost_bytes += sum(d.extents.nbytes for d in dropped.values())
            for u in (*gone.values(), *dropped.values()):
                os.close(u.fd)

    def _fail_sync(self, key: tuple[int, int]) -> OSError:
        """A sync on a failing disk: the file's unsynced bytes are marked clean, never written
        (kept readable in `_dropped`). Call with the lock held; returns the error to raise."""
        u = self._unsynced.pop(key, None)
        if u is not None:
            self._dropped_total += u.extents.nbytes
            dropped = self._dropped.get(key)
            if dropped is None:
                self._dropped[key] = u  # its fd now holds the inode for the dropped bytes
            else:
                for offset, chunk in u.extents.items():
                    dropped.extents.write(offset, chunk)
                os.close(u.fd)
        return _error(errno.EIO)

    def flush_all(self) -> None:
        flushed: list[_Unsynced] = []
        try:
            with self._lock:
                for key in list(self._unsynced):
                    flushed.append(self._flush_one(key))  # type: ignore[arg-type]  # not None: the key was listed under the same lock
        finally:
            self._sync_and_close(flushed)

    # ---- lifecycle ----

    def destroy(self, path: str) -> None:
        """Clean unmount: write everything back, like an orderly shutdown."""
        self.flush_all()
        os.close(self.root)

    # ---- attributes and directories ----

    def getattr(self, path: str | None, fi=None) -> dict:
        handle = self._handle(fi) if fi else None  # fusepy passes a falsy NULL pointer for none
        if path == _CONTROL or (handle is not None and handle.fd < 0):
            return {"st_mode": stat.S_IFREG | 0o600, "st_nlink": 1, "st_size": 0}
        if handle is not None:
            st = os.fstat(handle.fd)
        else:
            st = os.stat(self._rel(path), dir_fd=self.root, follow_symlinks=False)
        attrs = {f: getattr(st, f) for f in _STAT_FIELDS}
        for f in ("st_atime", "st_mtime", "st_ctime"):
            attrs[f] = attrs.pop(f + "_ns")
        if stat.S_ISREG(st.st_mode):
            with self._lock:
                key = (st.st_dev, st.st_ino)
                u, d = self._unsynced.get(key), self._dropped.get(key)
                if u is not None or d is not None:
                    attrs["st_size"] = max(st.st_size, u.extents.end if u else 0,
                                           d.extents.end if d else 0)
        return attrs

    def opendir(self, path: str) -> int:
        return os.open(self._rel(path), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.root)

    def readdir(self, path: str | None, fh: int) -> list[str]:
        return [".", "..", *os.listdir(fh)]

    def releasedir(self, path: str | None, fh: int) -> None:
        os.close(fh)

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> None:
        if self._failing:
            raise _error(errno.EIO)
        os.fsync(fh)

    def statfs(self, path: str) -> dict:
        st = os.statvfs(self.root)
        return {f: getattr(st, f) for f in _STATVFS_FIELDS}

    def readlink(self, path: str) -> str:
        return os.readlink(self._rel(path), dir_fd=self.root)

    # ---- metadata: straight to BACKING ----

    def _own(self, path: str) -> None:
        """Give a new file or directory to the caller, as a disk would: the mount runs as root,
        and a daemon that drops to its own user (MariaDB's mysqld) could not reopen a file it
        made, nor set its times."""
        import fuse

        uid, gid, _ = fuse.fuse_get_context()
        if uid or gid:
            os.chown(self._rel(path), uid, gid, dir_fd=self.root, follow_symlinks=False)

    def mknod(self, path: str, mode: int, dev: int) -> None:
        self._guard(path)
        os.mknod(self._rel(path), mode, dev, dir_fd=self.root)
        self._own(path)

    def mkdir(self, path: str, mode: int) -> None:
        self._guard(path)
        os.mkdir(self._rel(path), mode, dir_fd=self.root)
        self._own(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._rel(path), dir_fd=self.root)

    def symlink(self, link: str, target: str) -> None:
        self._guard(link)
        os.symlink(target, self._rel(link), dir_fd=self.root)
        self._own(link)

    def link(self, new: str, existing: str) -> None:
        self._guard(new)
        self._guard(existing)
        os.link(self._rel(existing), self._rel(new), src_dir_fd=self.root, dst_dir_fd=self.root)

    def unlink(self, path: str) -> None:
        self._guard(path)
        with self._lock:
            key = self._existing_key(path)
            os.unlink(self._rel(path), dir_fd=self.root)
            if key is not None:
                self._forget_if_unreachable(key)

    def rename(self, old: str, new: str) -> None:
        self._guard(old)
        self._guard(new)
        with self._lock:
            replaced = self._existing_key(new)
            os.rename(self._rel(old), self._rel(new), src_dir_fd=self.root, dst_dir_fd=self.root)
            if replaced is not None:
                self._forget_if_unreachable(replaced)
            prefix = old + "/"
            for u in self._unsynced.values():
                if u.path == old or u.path.startswith(prefix):
                    u.path = new + u.path[len(old):]

    def chmod(self, path: str, mode: int) -> None:
        self._guard(path)
        os.chmod(self._rel(path), mode, dir_fd=self.root)

    def chown(self, path: str, uid: int, gid: int) -> None:
        self._guard(path)
        os.chown(self._rel(path), uid, gid, dir_fd=self.root, follow_symlinks=False)

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
        self._guard(path)
        kwargs = {"ns": times} if times is not None else {}
        os.utime(self._rel(path), dir_fd=self.root, follow_symlinks=False, **kwargs)

    def truncate(self, path: str | None, length: int, fi=None) -> None:
        if path == _CONTROL or (fi and self._handle(fi).fd < 0):
            return  # `echo lose > control` truncates it first
        # A fresh writable fd: the handle's own may be read-only (open(O_RDONLY | O_TRUNC)).
        if fi:
            fd = os.open(f"/proc/self/fd/{self._handle(fi).fd}", os.O_WRONLY | os.O_CLOEXEC)
        else:
            fd = os.open(self._rel(path), os.O_WRONLY | os.O_CLOEXEC, dir_fd=self.root)
        try:
            with self._lock:
                os.ftruncate(fd, length)
                st = os.fstat(fd)
                u = self._unsynced.get((st.st_dev, st.st_ino))
                if u is not None:
                    u.extents.truncate(length)
                d = self._dropped.get((st.st_dev, st.st_ino))
                if d is not None:
                    d.extents.truncate(length)
        finally:
            os.close(fd)

    # ---- file data ----

    def _register(self, fd: int, path: str) -> int:
        """Record an open backing fd as a handle. Call with the lock held."""
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        fh = next(self._ids)
        self._handles[fh] = _Handle(fd, key, path)
        self._open[key] = self._open.get(key, 0) + 1
        return fh

    def open(self, path: str, fi) -> None:
        if path == _CONTROL:
            fi.direct_io = 1  # its size is 0: without this the kernel would never read it
            fi.fh = next(self._ids)
            self._handles[fi.fh] = _Handle(-1, (0, 0), path, self._stats())
            return
        fd = os.open(self._rel(path), (fi.flags & ~_STRIPPED) | os.O_CLOEXEC, dir_fd=self.root)
        with self._lock:
            fi.fh = self._register(fd, path)

    def create(self, path: str, mode: int, fi) -> None:
        self._guard(path)
        fd = os.open(self._rel(path), (fi.flags & ~_STRIPPED) | os.O_CREAT | os.O_CLOEXEC, mode, dir_fd=self.root)
        self._own(path)
        with self._lock:
            fi.fh = self._register(fd, path)

    def read(self, path: str | None, size: int, offset: int, fi) -> bytes:
        handle = self._handle(fi)
        if handle.fd < 0:
            return handle.snapshot[offset : offset + size]
        with self._lock:
            u, d = self._unsynced.get(handle.key), self._dropped.get(handle.key)
            if u is None and d is None:
                return os.pread(handle.fd, size, offset)
            length = max(os.fstat(handle.fd).st_size, u.extents.end if u else 0,
                         d.extents.end if d else 0)
            size = max(0, min(size, length - offset))
            buf = bytearray(os.pread(handle.fd, size, offset))
            buf.extend(bytes(size - len(buf)))  # a hole up to unsynced bytes past the backing end
            for layer in (d and d.extents, u and u.extents):  # dropped bytes are older
                if layer:
                    layer.overlay(offset, buf)
        return bytes(buf)

    def write(self, path: str | None, data: bytes, offset: int, fi) -> int:
        handle = self._handle(fi)
        if handle.fd < 0:
            self._command(data)
            return len(data)
        with self._lock:
            u = self._unsynced.get(handle.key)
            if u is None:
                u = self._unsynced[handle.key] = _Unsynced(os.dup(handle.fd), handle.path, Extents())
            u.extents.write(offset, data)
            d = self._dropped.get(handle.key)
            if d is not None:  # written again: these bytes are the newer write's now
                d.extents.erase(offset, offset + len(data))
        return len(data)

    def fsync(self, path: str | None, datasync: int, fi) -> None:
        handle = self._handle(fi)
        if handle.fd < 0:
            return
        with self._lock:
            if self._failing:
                raise self._fail_sync(handle.key)
            u = self._flush_one(handle.key)
        try:
            (os.fdatasync if datasync else os.fsync)(handle.fd)
        finally:
            if u is not None:
                os.close(u.fd)

    def release(self, path: str | None, fi) -> None:
        with self._lock:
            handle = self._handles.pop(fi.fh, None)
            if handle is None or handle.fd < 0:
                return
            os.close(handle.fd)
            self._open[handle.key] -= 1
            if not self._open[handle.key]:
                del self._open[handle.key]
                self._forget_if_unreachable(handle.key)


def mount(backing: str, mountpoint: str, foreground: bool) -> None:
    """Mount and serve until unmounted. Without `foreground`, libfuse forks once the mount is up
    and this returns in the parent only."""
    import fuse  # here: importing this module must not need libfuse (the harness builds commands)

    options = {
        "fsname": "lazyfs", "subtype": "lazyfs",
        "default_permissions": True,  # the kernel checks modes; this process runs as root
        "allow_other": os.geteuid() == 0,
        "nonempty": True,  # MOUNTPOINT may be BACKING itself
        "hard_remove": True,  # unlink for real, no .fuse_hidden files left in BACKING
        "use_ino": True,
        "big_writes": True, "max_write": 1 << 17,
        # Sizes change under the kernel on `lose`: never answer from a stale attribute cache.
        "attr_timeout": 0, "entry_timeout": 0, "negative_timeout": 0,
    }
    fuse.FUSE(LazyFS(backing), mountpoint, raw_fi=True, foreground=foreground, nothreads=False, **options)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m nemeses.lazyfs",
        description="Mount BACKING at MOUNTPOINT through a filesystem that keeps writes in memory "
        f"until fsync; write 'lose', 'flush', 'eio' or 'mend' to MOUNTPOINT/{CONTROL_NAME}, read "
        "it for stats.",
    )
    parser.add_argument("backing", help="directory holding the durable data")
    parser.add_argument("mountpoint", help="directory to mount on (may be BACKING itself)")
    parser.add_argument("--foreground", action="store_true", help="serve in this process until unmounted")
    args = parser.parse_args(argv)
    for d in (args.backing, args.mountpoint):
        if not os.path.isdir(d):
            parser.error(f"{d}: not a directory")
    try:
        mount(args.backing, args.mountpoint, args.foreground)
    except RuntimeError as e:  # fusepy's way of reporting that fuse_main failed
        print(f"lazyfs: mounting {args.mountpoint} failed ({e})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
