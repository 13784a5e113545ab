"""The file system as the storage engine uses it, passed in so a simulator can own it.

`RealDisk` maps every call 1:1 onto `os` (production; its methods look `os` up at call time so
tests that monkeypatch `os` keep working). The simulator's `harness.sim.disk.SimDisk` implements
the same interface in memory. Handles are opaque: file descriptors for RealDisk, objects for
SimDisk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any, Protocol

StrPath = str | os.PathLike[str]
Buffer = bytes | bytearray | memoryview  # what a write takes: the WAL hands out memoryviews


class Disk(Protocol):
    """What the storage code does to files. `open` is read-write; `create` means O_EXCL.
    `inline`: no threads or real file descriptors may be used with it (the simulator)."""

    inline: bool

    def open(self, path: StrPath, *, create: bool = False) -> Any: ...
    def mkstemp(self, directory: StrPath, prefix: str, suffix: str) -> tuple[Any, str]: ...
    def close(self, fd: Any) -> None: ...
    def pwritev(self, fd: Any, bufs: Sequence[Buffer], offset: int) -> int: ...
    def fsync(self, fd: Any) -> None: ...
    def fdatasync(self, fd: Any) -> None: ...
    def ftruncate(self, fd: Any, length: int) -> None: ...
    def fallocate(self, fd: Any, offset: int, length: int) -> None: ...
    def read(self, path: StrPath, offset: int = 0, length: int = -1) -> bytes: ...
    def size(self, path: StrPath) -> int: ...
    def replace(self, src: StrPath, dst: StrPath) -> None: ...
    def unlink(self, path: StrPath) -> None: ...
    def listdir(self, path: StrPath) -> list[str]: ...
    def mkdir(self, path: StrPath) -> None: ...
    def isdir(self, path: StrPath) -> bool: ...
    def exists(self, path: StrPath) -> bool: ...
    def fsync_dir(self, path: StrPath) -> None: ...
    def rmtree(self, path: StrPath) -> None: ...
    def fsync_latency(self) -> float: ...


def pwrite_all(disk: Disk, fd: Any, bufs: Sequence[Buffer], offset: int) -> int:
    """pwritev that finishes a short write (a signal, a nearly full disk); returns the bytes."""
    total = sum(len(b) for b in bufs)
    written = disk.pwritev(fd, bufs, offset)
    if written != total:
        rest = b"".join(bufs)
        while written < total:
            n = disk.pwritev(fd, [rest[written:]], offset + written)
            if n == 0:
                raise OSError("pwritev wrote nothing")
            written += n
    return total


class RealDisk:
    """The host's file system."""

    inline = False

    def open(self, path: StrPath, *, create: bool = False) -> int:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        return os.open(path, flags, 0o644)

    def mkstemp(self, directory: StrPath, prefix: str, suffix: str) -> tuple[int, str]:
        return tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwritev(self, fd: int, bufs: Sequence[Buffer], offset: int) -> int:
        return os.pwritev(fd, bufs, offset)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        os.posix_fallocate(fd, offset, length)

    def read(self, path: StrPath, offset: int = 0, length: int = -1) -> bytes:
        with open(path, "rb") as f:
            if offset:
                f.seek(offset)
            return f.read(length)

    def size(self, path: StrPath) -> int:
        return os.stat(path).st_size

    def replace(self, src: StrPath, dst: StrPath) -> None:
        os.replace(src, dst)

    def unlink(self, path: StrPath) -> None:
        os.unlink(path)

    def listdir(self, path: StrPath) -> list[str]:
        return sorted(os.listdir(path))

    def mkdir(self, path: StrPath) -> None:
        os.mkdir(path)

    def isdir(self, path: StrPath) -> bool:
        return os.path.isdir(path)

    def exists(self, path: StrPath) -> bool:
        return os.path.exists(path)

    def fsync_dir(self, path: StrPath) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rmtree(self, path: StrPath) -> None:
        """Remove `path` and everything under it if present; errors are ignored (best effort)."""
        shutil.rmtree(path, ignore_errors=True)

    def fsync_latency(self) -> float:
        return 0.0  # real syncs take their own time


REAL = RealDisk()
