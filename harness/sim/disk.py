"""SimDisk: the simulator's file system, behind the engine's `node.disk.Disk` interface.

It holds files in memory and models what a crash does to a page cache, with seeded faults, for
deterministic whole-stack crash testing. Handles are objects. It lives beside the engine, not
in it: a deployed server only ever runs on `node.disk.RealDisk`.
"""

from __future__ import annotations

import errno
import functools
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from node.disk import Buffer, StrPath

# ---- the simulated disk ----


class FsyncMeter:
    """The virtual seconds the SimDisk syncs of one blocking call would have taken."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> FsyncMeter:
        _meters.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _meters.remove(self)


_meters: list[FsyncMeter] = []  # innermost last; the simulator is single-threaded


def fsync_meter() -> FsyncMeter:
    """`with fsync_meter() as m: blocking_call()`: m.seconds is the sum of the sampled
    `fsync_latency()` of every SimDisk fsync, fdatasync and fsync_dir made inside. The
    simulator's executor delivers the call's result that much later in virtual time, so slow
    fsync is slow for cmeta, superblock and snapshot saves too, not only for the WAL (which
    waits out its own syncs' latency, outside any metered call)."""
    return FsyncMeter()


class Fenced(OSError):
    """A call through the handle or disk of a process incarnation that has crashed."""


@dataclass
class SimFaults:
    """Seeded faults; change them at any time (they are shared by all incarnations)."""

    quota_bytes: int | None = None  # writes that would grow the files past this: ENOSPC
    fsync_eio_rate: float = 0.0  # chance an fsync/fdatasync fails with EIO (and, as on Linux,
    # the dirty data is dropped from the write-back: a later fsync succeeds without it)
    # chance a directory fsync fails with EIO: its entries' changes since the last one (a
    # rename) stay in the cache, seen by every reader until a power loss, which takes them
    fsync_dir_eio_rate: float = 0.0
    fsync_latency: tuple[float, float] = (0.0, 0.0)  # virtual seconds, uniform in [lo, hi]
    sector_size: int = 512  # a torn write keeps a prefix ending on a multiple of this (1: any byte)
    # fallocate makes a file that long, its unwritten part reading as zeros (kept as a length,
    # not as bytes); off, it is a no-op, as it was before this was modelled
    preallocate: bool = False
    # a disk filling up as a real one does (the `full` fault): preallocated space counts against
    # quota_bytes, fallocate past it fails with ENOSPC, and a write past it writes what fits
    # and returns that count (write(2) on a full disk), the next one failing with ENOSPC
    fill: bool = False


class _Alloc:
    """A pending fallocate: the file is at least `end` bytes long once it is durable."""

    __slots__ = ("end",)

    def __init__(self, end: int) -> None:
        self.end = end


class _File:
    __slots__ = ("data", "durable", "pending", "serial", "alloc", "durable_alloc", "dropped")

    def __init__(self, serial: int = 0) -> None:
        self.serial = serial  # creation order on its disk: older files have smaller serials
        self.data = bytearray()  # what reads see: the page cache
        # What survives a crash for sure. A bytearray, changed in place by each sync: a copy of
        # the whole file per fsync made the simulator's WAL syncs quadratic in segment size.
        self.durable = bytearray()
        # since the last sync: writes, truncations (and with SimFaults.preallocate, fallocates)
        self.pending: list[tuple[int, bytes] | int | _Alloc] = []
        # the length preallocated (SimFaults.preallocate): the file reads as zeros past its
        # data up to it; as reads see it and as it survives a crash
        self.alloc = 0
        self.durable_alloc = 0
        self.dropped = False  # a failed sync dropped writes the cache still shows

    def size(self) -> int:
        return max(len(self.data), self.alloc)

    def settle(self, data: bytearray, ops: list) -> int:
        """Apply `ops` (a prefix of `pending`) to `data`, from the durable state; the durable
        preallocated length after them."""
        alloc = self.durable_alloc
        for op in ops:
            if isinstance(op, _Alloc):
                alloc = max(alloc, op.end)
                continue
            if isinstance(op, int):
                alloc = min(alloc, op)
            _apply_data(data, op)
        return alloc


class _Dir:
    __slots__ = ("entries", "durable", "pending", "dropped")

    def __init__(self) -> None:
        self.entries: dict[str, _File | _Dir] = {}
        self.durable: dict[str, _File | _Dir] = {}
        # Since the last fsync of this directory; each change is atomic (a rename is one).
        self.pending: list[tuple[tuple[str, _File | _Dir | None], ...]] = []
        self.dropped = False  # a failed sync dropped changes `entries` still shows

    def change(self, *ops: tuple[str, _File | _Dir | None]) -> None:
        _apply_entries(self.entries, ops)
        self.pending.append(ops)


def _apply_entries(entries: dict, ops: tuple[tuple[str, Any], ...]) -> None:
    for name, node in ops:
        if node is None:
            entries.pop(name, None)
        else:
            entries[name] = node


def _apply_data(data: bytearray, op: tuple[int, bytes] | int) -> None:
    if isinstance(op, int):
        del data[op:]
        return
    offset, buf = op
    if offset > len(data):
        data.extend(bytes(offset - len(data)))
    data[offset : offset + len(buf)] = buf


class _Held:
    """A disk's count of changes, and bytes_held as last walked at which count."""

    __slots__ = ("changes", "walked", "total")

    def __init__(self) -> None:
        self.changes, self.walked, self.total = 0, -1, 0


class _Handle:
    __slots__ = ("disk", "file", "closed", "path")

    def __init__(self, disk: SimDisk, file: _File, path: str) -> None:
        self.disk, self.file, self.closed, self.path = disk, file, False, path


class SimDisk:
    """An in-memory file system with a page cache, one object per process incarnation.

    File contents are durable only up to the last fsync/fdatasync of the file (both flush data
    and size); directory entries (create, rename, unlink, mkdir) only up to the last fsync of
    their directory. `crash()` keeps the durable state plus, with an rng, a seeded prefix of
    each file's and each directory's unsynced changes (the last kept write possibly torn at a
    sector boundary), fences this incarnation and returns the next one. Not modelled: write
    reordering within a file (the page cache is assumed to write back in order), hard links,
    permissions, cross-directory renames, and fallocate unless `SimFaults.preallocate` is on (a
    no-op: reads see only written data; on, the file reads as zeros up to the length made).
    """

    inline = True

    def __init__(self, rng: random.Random | None = None, faults: SimFaults | None = None) -> None:
        self.rng = rng or random.Random(0)
        self.faults = faults or SimFaults()
        self._root = _Dir()
        self._fenced = False
        self.closed_twice: list[str] = []  # paths of handles closed a second time
        self._temp_counter = 0
        self._serial = 0  # the last file serial handed out (shared by every incarnation)
        self._held = _Held()  # bytes_held's cache (shared by every incarnation)
        # born of a kill while the cache showed writes a failed sync dropped: what this
        # process reads may be gone after a power loss
        self.reads_dropped = False

    def bytes_held(self) -> int:
        """Bytes this disk keeps in memory for its files: what reads see and what is durable.
        Walked again only after a change (`_changed`): the simulator asks every 0.1 virtual
        s of every disk, most of which are idle."""
        held = self._held
        if held.walked == held.changes:
            return held.total
        held.walked, held.total = held.changes, self._walk_held()
        return held.total

    def _changed(self) -> None:
        """A file's content or a directory's entries changed: bytes_held walks again."""
        self._held.changes += 1

    def _walk_held(self) -> int:
        total, dirs, seen = 0, [self._root], set()
        while dirs:
            d = dirs.pop()
            for node in (*d.entries.values(), *d.durable.values()):
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if isinstance(node, _Dir):
                    dirs.append(node)
                else:
                    total += len(node.data) + len(node.durable)
        return total

    # ---- incarnations and faults ----

    def fence(self) -> None:
        """From now on every call on this disk or its handles raises Fenced."""
        self._fenced = True

    def crash(self, rng: random.Random | None = None) -> SimDisk:
        """Power loss: drop what was not synced (all of it without `rng`; a seeded prefix of
        it with one). Fences this incarnation and returns the disk the restarted process uses."""
        self.fence()
        seen: set[int] = set()

        def recover(d: _Dir) -> None:
            entries = dict(d.durable)
            for ops in d.pending[: rng.randint(0, len(d.pending)) if rng is not None else 0]:
                _apply_entries(entries, ops)
            d.entries = entries
            d.durable, d.pending, d.dropped = dict(d.entries), [], False
            for name in sorted(d.entries):
                node = d.entries[name]
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if isinstance(node, _Dir):
                    recover(node)
                else:
                    self._recover_file(node, rng)

        recover(self._root)
        self._changed()
        return self._next_incarnation()

    def kill(self) -> SimDisk:
        """The process dies, the machine does not: what it wrote stays as the page cache holds
        it, synced or not, and pages a failed fsync marked clean read as written until a
        power loss takes them. Fences this incarnation and returns the next."""
        self.fence()
        nxt = self._next_incarnation()
        nxt.reads_dropped = self.ahead_of_disk()
        return nxt

    def _next_incarnation(self) -> SimDisk:
        nxt = SimDisk(self.rng, self.faults)
        nxt._root, nxt._temp_counter, nxt._serial = self._root, self._temp_counter, self._serial
        nxt._held = self._held
        return nxt

    def _recover_file(self, f: _File, rng: random.Random | None) -> None:
        data = bytearray(f.durable)
        pending = f.pending
        keep = rng.randint(0, len(pending)) if rng is not None else 0
        alloc = f.settle(data, pending[:keep])
        if rng is not None and keep < len(pending) and isinstance(pending[keep], tuple) and rng.random() < 0.5:
            offset, buf = pending[keep]  # type: ignore[misc]  # an (offset, bytes) write: the isinstance above, which mypy does not apply to an indexed item
            sector = max(1, self.faults.sector_size)
            cuts = [c - offset for c in range((offset // sector + 1) * sector, offset + len(buf), sector)]
            if cuts:
                _apply_data(data, (offset, buf[: rng.choice(cuts)]))
        f.data, f.durable, f.pending = data, bytearray(data), []
        f.alloc = f.durable_alloc = alloc
        f.dropped = False

    def flip_bit(self, rng: random.Random | None = None, path: StrPath | None = None,
                 at: tuple[int, int] | None = None) -> tuple[str, int, int]:
        """Media corruption: flip one bit of a file's durable content (a chosen or a seeded file
        among those with content; `at`: a chosen (byte offset, bit), refused with ValueError
        past the file's end rather than wrapped onto another byte), seen by reads too. Returns
        (path, byte offset, bit)."""
        self._check()
        rng = rng or self.rng
        if path is None:
            files = [(p, f) for p, f in self._walk() if f.durable]
            if not files:
                raise ValueError("no durable file content to corrupt")
            path, f = files[rng.randrange(len(files))]
        else:
            f = self._file(path)
        if not f.durable:
            raise ValueError(f"{os.fspath(path)} has no durable content to corrupt")
        offset, bit = at or (rng.randrange(len(f.durable)), rng.randrange(8))
        if not (0 <= offset < len(f.durable) and 0 <= bit < 8):  # a chosen one: never wrapped
            raise ValueError(f"cannot flip bit {bit} at offset {offset} of {os.fspath(path)}: "
                             f"it holds {len(f.durable)} durable bytes, a byte 8 bits")
        f.durable[offset] ^= 1 << bit
        self._changed()
        if offset < len(f.data):
            f.data[offset] ^= 1 << bit
        return os.fspath(path), offset, bit

    # Damage at rest (node.sim.stack_damage): what a disk, a file system check or an operator
    # does to the files of a server that is down. Each acts on what reads see and what a crash
    # keeps alike, so only on a file (and a directory) with nothing unsynced: right after crash().

    def truncate_at_rest(self, path: StrPath, length: int) -> None:
        """The file cut to `length` bytes (a lost extent, an interrupted copy)."""
        f = self._at_rest(path)
        del f.data[length:]
        f.durable = bytearray(f.data)
        f.alloc = f.durable_alloc = min(f.alloc, length)
        self._changed()

    def zero_at_rest(self, path: StrPath, offset: int, length: int) -> None:
        """`length` bytes from `offset` read back as zeros (a lost or remapped sector)."""
        f = self._at_rest(path)
        stop = min(offset + length, len(f.data))  # the preallocated rest reads as zeros already
        if stop > offset:
            f.data[offset:stop] = bytes(stop - offset)
            f.durable = bytearray(f.data)
            self._changed()

    def write_at_rest(self, path: StrPath, offset: int, data: bytes) -> None:
        """`data` reads back from `offset` (a misdirected write, or a block whose checksums were
        computed over corrupted memory: valid checksums, wrong content). Within the file."""
        f = self._at_rest(path)
        stop = min(offset + len(data), len(f.data))
        if stop > offset:
            f.data[offset:stop] = data[: stop - offset]
            f.durable = bytearray(f.data)
            self._changed()

    def lose_at_rest(self, path: StrPath) -> None:
        """The file's name gone (a file system check moved it to lost+found, an rm)."""
        parent, name = self._parent(path)
        if parent.pending or not isinstance(parent.entries.get(name), _File):
            raise ValueError(f"{path}: not a file at rest")
        del parent.entries[name]
        parent.durable = dict(parent.entries)
        self._changed()

    def losable(self, under: StrPath) -> list[str]:
        """Files under `under` whose names the live loss may take (`lose_live`): each as it
        would survive a crash, its directory holding no unsynced change of that name."""
        self._check()
        top = f"{os.fspath(under).rstrip('/')}/"
        return [path for path, f in self._walk() if path.startswith(top)
                and self._name_at_rest(path, f)]

    def lose_live(self, path: StrPath) -> None:
        """The name of a file gone while its server runs (a file system check moving it to
        lost+found, another process's rm, committed by the journal at once): reads and a
        crash alike no longer find it. Only a file `losable` lists: a name the directory has
        unsynced changes to would come back, or go, with them."""
        self._check()
        if not self._name_at_rest(path, self._file(path)):
            raise ValueError(f"{path}: not a file whose name is at rest")
        parent, name = self._parent(path)
        del parent.entries[name]
        del parent.durable[name]
        self._changed()

    def _name_at_rest(self, path: StrPath, f: _File) -> bool:
        parent, name = self._parent(path)
        return parent.durable.get(name) is f and not any(
            n == name for ops in parent.pending for n, _ in ops)

    def misplace_at_rest(self, path: StrPath, source_disk: SimDisk, source: StrPath) -> None:
        """The file now holds what `source` on `source_disk` (this one, or another server's)
        holds durably (a misdirected write of a whole file, an operator copying the wrong file
        into its place)."""
        f, src = self._at_rest(path), source_disk._file(source)
        f.data, f.durable = bytearray(src.durable), bytearray(src.durable)
        f.alloc = f.durable_alloc = src.durable_alloc
        self._changed()

    def durable_bytes(self, path: StrPath) -> bytes:
        """What a crash now would keep of the file's data (its preallocated zeros left out)."""
        return bytes(self._file(path).durable)

    def _at_rest(self, path: StrPath) -> _File:
        self._check()
        f = self._file(path)
        if f.pending or f.alloc != f.durable_alloc or f.data != f.durable:
            raise ValueError(f"{path}: not at rest (unsynced changes)")
        return f

    def fsync_latency(self) -> float:
        lo, hi = self.faults.fsync_latency
        return self.rng.uniform(lo, hi) if hi > 0 else 0.0

    def _meter_sync(self) -> None:
        """A sync inside `fsync_meter()` owes its sampled latency to the metered call."""
        if _meters:
            _meters[-1].seconds += self.fsync_latency()

    def serial_mark(self) -> int:
        """The newest file's serial: every file created from now on has a larger one."""
        return self._serial

    def file_serials(self, path: StrPath) -> list[tuple[str, int]]:
        """(path, creation serial) of every file under the directory `path` ([] if absent)."""
        node = self._lookup(path)
        if not isinstance(node, _Dir):
            return []
        return [(p, f.serial) for p, f in self._walk(node, os.fspath(path))]

    # ---- the Disk interface: files ----

    def open(self, path: StrPath, *, create: bool = False) -> _Handle:
        self._check()
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if create:
            if node is not None:
                raise FileExistsError(errno.EEXIST, "File exists", os.fspath(path))
            self._serial += 1
            node = _File(self._serial)
            parent.change((name, node))
            self._changed()
        elif node is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(path))
        elif isinstance(node, _Dir):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", os.fspath(path))
        return _Handle(self, node, os.fspath(path))

    def mkstemp(self, directory: StrPath, prefix: str, suffix: str) -> tuple[_Handle, str]:
        """A fresh name from a counter, not a random one: runs must replay bit for bit."""
        while True:
            self._temp_counter += 1
            path = os.path.join(os.fspath(directory), f"{prefix}{self._temp_counter:06d}{suffix}")
            if not self.exists(path):
                return self.open(path, create=True), path

    def close(self, fd: _Handle) -> None:
        if fd.closed and not fd.disk._fenced:
            # Harmless here, where a handle is an object; a real process hands the number to
            # the next file it opens, and a second close closes that file (another tablet's
            # WAL segment, a metadata file). The simulator reports it (`closed_twice`).
            self.closed_twice.append(fd.path)
        self._handle(fd).closed = True

    def pwritev(self, fd: _Handle, bufs: Sequence[Buffer], offset: int) -> int:
        f = self._handle(fd).file
        buf = b"".join(bufs)
        quota = self.faults.quota_bytes
        if quota is not None:
            have = f.size() if self.faults.fill else len(f.data)
            growth = max(0, offset + len(buf) - have)
            if growth and (room := quota - self._usage()) < growth:
                fits = max(0, have + room - offset) if self.faults.fill else 0
                if not fits:
                    raise OSError(errno.ENOSPC, "No space left on device")
                buf = buf[:fits]  # short: what fits
        op = (offset, buf)
        _apply_data(f.data, op)
        f.pending.append(op)
        self._changed()
        return len(buf)

    def fsync(self, fd: _Handle) -> None:
        f = self._handle(fd).file
        self._meter_sync()
        if self.faults.fsync_eio_rate and self.rng.random() < self.faults.fsync_eio_rate:
            f.pending = []  # Linux marks the failed pages clean: that data never reaches the disk
            f.dropped = True
            raise OSError(errno.EIO, "Input/output error")
        # in place, from f.durable, not f.data: it may hold pages a failed sync dropped
        f.durable_alloc = f.settle(f.durable, f.pending)
        f.pending = []
        self._changed()

    fdatasync = fsync

    def ftruncate(self, fd: _Handle, length: int) -> None:
        f = self._handle(fd).file
        self._changed()
        if length > f.size():
            _apply_data(f.data, (length, b""))
            f.pending.append((length, b""))
        else:
            del f.data[length:]
            f.alloc = min(f.alloc, length)
            f.pending.append(length)

    def fallocate(self, fd: _Handle, offset: int, length: int) -> None:
        f = self._handle(fd).file
        if self.faults.preallocate and offset + length > f.size():
            quota = self.faults.quota_bytes
            if (self.faults.fill and quota is not None
                    and self._usage() + offset + length - f.size() > quota):
                raise OSError(errno.ENOSPC, "No space left on device")
            f.alloc = offset + length
            f.pending.append(_Alloc(offset + length))

    def read(self, path: StrPath, offset: int = 0, length: int = -1) -> bytes:
        f = self._file(path)
        data = f.data
        out = bytes(data[offset:] if length < 0 else data[offset : offset + length])
        if f.alloc > len(data):  # preallocated past the data: zeros
            start, stop = max(offset, len(data)), f.alloc if length < 0 else min(f.alloc, offset + length)
            if stop > start:
                out += bytes(stop - start)
        return out

    def size(self, path: StrPath) -> int:
        return self._file(path).size()

    def durable_file(self, path: str) -> _File | None:
        """The file a power loss that keeps no unsynced change (`crash()` without an rng) would
        leave at `path` (absolute and normalised), reached through the directory entries their
        last syncs left; None if none. Its `durable` bytes are what a read would then return.
        The same object for as long as that stays so, which lets a check of a file written only
        by atomic renames (consensus metadata) decode it once per version. Never fenced and
        never metered: the simulator's checks read it beside the running process."""
        node: _File | _Dir | None = self._root
        for part in _split(path):
            node = node.durable.get(part) if isinstance(node, _Dir) else None
            if node is None:
                return None
        return node if isinstance(node, _File) else None

    # ---- the Disk interface: names ----

    def replace(self, src: StrPath, dst: StrPath) -> None:
        sparent, sname = self._parent(src)
        dparent, dname = self._parent(dst)
        if sparent is not dparent:
            raise OSError(errno.EXDEV, "SimDisk renames within one directory only", os.fspath(src))
        node = sparent.entries.get(sname)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(src))
        if isinstance(dparent.entries.get(dname), _Dir):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", os.fspath(dst))
        if sname != dname:
            sparent.change((sname, None), (dname, node))
            self._changed()

    def unlink(self, path: StrPath) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(path))
        if isinstance(node, _Dir):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", os.fspath(path))
        parent.change((name, None))
        self._changed()

    def listdir(self, path: StrPath) -> list[str]:
        return sorted(self._dir(path).entries)

    def mkdir(self, path: StrPath) -> None:
        parent, name = self._parent(path)
        if name in parent.entries:
            raise FileExistsError(errno.EEXIST, "File exists", os.fspath(path))
        parent.change((name, _Dir()))
        self._changed()

    def isdir(self, path: StrPath) -> bool:
        return isinstance(self._lookup(path), _Dir)

    def exists(self, path: StrPath) -> bool:
        return self._lookup(path) is not None

    def fsync_dir(self, path: StrPath) -> None:
        d = self._dir(path)
        self._meter_sync()
        if self.faults.fsync_dir_eio_rate and self.rng.random() < self.faults.fsync_dir_eio_rate:
            d.pending = []  # marked clean, never written: a power loss keeps `durable`
            d.dropped = True
            raise OSError(errno.EIO, "Input/output error")
        d.durable, d.pending = dict(d.entries), []
        self._changed()

    def rmtree(self, path: StrPath) -> None:
        node = self._lookup(path)
        if not isinstance(node, _Dir):
            return
        for name in sorted(node.entries):
            child = os.path.join(os.fspath(path), name)
            if isinstance(node.entries[name], _Dir):
                self.rmtree(child)
            else:
                node.change((name, None))
        parent, name = self._parent(path)
        parent.change((name, None))
        self._changed()

    # ---- internals ----

    def _check(self) -> None:
        if self._fenced:
            raise Fenced(errno.EIO, "this process incarnation crashed")

    def _handle(self, fd: _Handle) -> _Handle:
        if fd.disk._fenced:
            raise Fenced(errno.EIO, "this process incarnation crashed")
        if fd.closed:
            raise OSError(errno.EBADF, "Bad file descriptor")
        return fd

    def _lookup(self, path: StrPath) -> _File | _Dir | None:
        self._check()
        node: _File | _Dir | None = self._root
        for part in _parts(path):
            if not isinstance(node, _Dir):
                return None
            node = node.entries.get(part)
        return node

    def _parent(self, path: StrPath) -> tuple[_Dir, str]:
        parts = _parts(path)
        if not parts:
            raise PermissionError(errno.EPERM, "the root cannot be changed", "/")
        return self._dir("/" + "/".join(parts[:-1])), parts[-1]

    def _dir(self, path: StrPath) -> _Dir:
        node = self._lookup(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(path))
        if not isinstance(node, _Dir):
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory", os.fspath(path))
        return node

    def _file(self, path: StrPath) -> _File:
        node = self._lookup(path)
        if node is None:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.fspath(path))
        if isinstance(node, _Dir):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", os.fspath(path))
        return node

    def _walk(self, top: _Dir | None = None, prefix: str = "") -> list[tuple[str, _File]]:
        """Every file reachable from `top` (the root), in path order."""
        out: list[tuple[str, _File]] = []

        def walk(d: _Dir, prefix: str) -> None:
            for name in sorted(d.entries):
                node = d.entries[name]
                if isinstance(node, _Dir):
                    walk(node, f"{prefix}/{name}")
                else:
                    out.append((f"{prefix}/{name}", node))

        walk(self._root if top is None else top, prefix)
        return out

    def ahead_of_disk(self) -> bool:
        """Whether the page cache shows writes (or directory changes: a rename) a failed sync
        dropped and no write has put back (SimDisk.kill keeps them): a power loss now takes
        what a process may have read back and trusted, the one moment a reader can tell."""
        for _, f in self._walk():
            if f.dropped:
                after = bytearray(f.durable)
                f.settle(after, f.pending)
                if after != f.data:
                    return True
        dirs = [self._root]
        while dirs:
            d = dirs.pop()
            if d.dropped:
                entries = dict(d.durable)
                for ops in d.pending:
                    _apply_entries(entries, ops)
                if entries != d.entries:
                    return True
            dirs.extend(n for n in d.entries.values() if isinstance(n, _Dir))
        return False

    def unsynced(self) -> list[str]:
        """Paths of the files holding a write no sync has made durable yet that spans a sector
        boundary: what a power loss now may keep a torn prefix of (`_recover_file`)."""
        sector = max(1, self.faults.sector_size)
        return [path for path, f in self._walk()
                if any(isinstance(op, tuple) and op[0] // sector != (op[0] + len(op[1]) - 1) // sector
                       for op in f.pending)]

    def _usage(self) -> int:
        if self.faults.fill:  # preallocated space is held too
            return sum(f.size() for _, f in self._walk())
        return sum(len(f.data) for _, f in self._walk())

    def usage(self) -> int:
        """Bytes held by the files (what `SimFaults.quota_bytes` is compared with)."""
        return self._usage()


@functools.lru_cache(maxsize=4096)
def _split(path: str) -> tuple[str, ...]:
    """The components of an absolute, normalised path, kept: the checks look the same few
    paths up on every message."""
    return tuple(p for p in path.split("/") if p)


def _parts(path: StrPath) -> list[str]:
    """Components of an absolute, normalised path (relative paths resolve against the cwd)."""
    return [p for p in os.path.abspath(os.fspath(path)).split("/") if p]

