"""Tablet copy, the sending side: Kudu's source sessions.

BeginCopySession pins the replica's newest snapshot file and its WAL from there on
(`node.replica.copy_pins.CopyPins.pin`: a WAL anchor, a compaction floor, a snapshot pin); FetchCopyChunk
serves any byte range of those files with its CRC, so a receiver whose connection dropped asks
again from the offset it has; EndCopySession, or no fetch for `idle_timeout_s`, releases the
pins. Memory is one chunk per fetch in flight, whatever the tablet's size.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from dataclasses import dataclass, field

import crc32c

from node import durable
from node.consensus import encode_config
from node.disk import Disk
from node.errors import CorruptionError, ReplicaError
from node.probes import probe
from node.protocol import (
    BeginCopySession,
    CopyChunk,
    CopyFile,
    CopySession,
    CopySessionId,
    Empty,
    FetchCopyChunk,
)
from node.replica.copy_pins import CopySource
from node.replica.replica import Replica
from node.rpc import ErrorCode, RpcError
from node.tablet.superblock import Superblock
from node.tserver.tablet_manager import TabletManager, TabletState

MAX_CHUNK_BYTES = 32 << 20  # the most one fetch may ask for: half the RPC frame limit


@dataclass
class _Session:
    id: str
    tablet_id: str
    requestor: str
    replica: Replica
    source: CopySource
    paths: list[str]  # of `files`, in order
    files: list[CopyFile]
    # the loop's time of the session's last use: its clock, virtual under the simulator
    last_used: float = field(default_factory=lambda: asyncio.get_running_loop().time())
    sent: int = 0

    @property
    def holder(self) -> str:
        return _holder(self.id)


def _holder(sid: str) -> str:
    """The name a session's pins go by on the replica (its WAL anchor, its compaction floor)."""
    return f"copy:{sid}"


class CopySourceSessions:
    def __init__(self, tablets: TabletManager, idle_timeout_s: float):
        self.tablets, self.idle_timeout_s = tablets, idle_timeout_s
        self.sessions: dict[str, _Session] = {}
        self._ids = itertools.count(1)

    async def begin(self, req: BeginCopySession) -> CopySession:
        """A new session; one the same receiver still holds on the tablet ends first (it gave
        up on it: a receiver resumes by fetching again, not by beginning again)."""
        r = self.tablets.serving(req.tablet_id)
        for s in [s for s in self.sessions.values()
                  if (s.tablet_id, s.requestor) == (req.tablet_id, req.requestor)]:
            probe("copy.source.session_superseded")
            self.end(s.id, "superseded by a new session of the same receiver")
        sid = f"{req.requestor}-{req.tablet_id}-{next(self._ids)}"
        try:
            src = await r.copy_pins.pin(_holder(sid))
        except ReplicaError as e:
            probe("copy.source.pin_refused")
            raise RpcError(ErrorCode.ILLEGAL_STATE, f"tablet {req.tablet_id}: {e}") from None
        try:
            paths, files = await asyncio.to_thread(_manifest, src, r.paths.disk)
            sb = await _superblock(r)
        except BaseException:
            r.copy_pins.unpin(_holder(sid), src.snapshot_index)
            raise
        probe("copy.source.session_begun")
        self.sessions[sid] = _Session(sid, req.tablet_id, req.requestor, r, src, paths, files)
        self.tablets.log(req.tablet_id).info(
            "tablet copy session %s for %s: snapshot at index %d, %d WAL segments, %d bytes",
            sid, req.requestor, src.snapshot_index, len(src.wal), sum(f.size for f in files))
        return CopySession(sid, sb.table_name, sb.partition, src.term,
                           encode_config(src.committed_config), files, self.idle_timeout_s)

    async def fetch(self, req: FetchCopyChunk) -> CopyChunk:
        s = self._session(req.session_id)
        if not 0 <= req.file < len(s.files):
            raise RpcError(ErrorCode.INVALID_ARGUMENT, f"no file {req.file} in the session "
                           f"({len(s.files)} files)")
        size = s.files[req.file].size
        if not 0 <= req.offset <= size or not 0 < req.max_length <= MAX_CHUNK_BYTES:
            raise RpcError(ErrorCode.INVALID_ARGUMENT, f"offset {req.offset} of a {size}-byte "
                           f"file, max_length {req.max_length} (at most {MAX_CHUNK_BYTES})")
        length = min(req.max_length, size - req.offset)
        self._current(s)
        try:
            data = await asyncio.to_thread(_read, s.replica.paths.disk, s.paths[req.file],
                                           req.offset, length)
        except FileNotFoundError:
            self._current(s)  # deleted meanwhile: that answer; else damage
            probe("copy.source.pinned_file_missing")
            raise RpcError(ErrorCode.ILLEGAL_STATE, f"{s.paths[req.file]}: a pinned file of a "
                           "running replica is missing") from None
        s.last_used, s.sent = asyncio.get_running_loop().time(), s.sent + len(data)
        return CopyChunk(req.offset, data, crc32c.crc32c(data))

    async def on_end(self, req: CopySessionId) -> Empty:
        self._session(req.session_id)
        self.end(req.session_id, "the receiver ended it")
        return Empty()

    def end(self, sid: str, why: str) -> None:
        s = self.sessions.pop(sid, None)
        if s is None:
            return
        s.replica.copy_pins.unpin(s.holder, s.source.snapshot_index)
        self.tablets.log(s.tablet_id).info("tablet copy session %s ended (%s): %d bytes sent",
                                           sid, why, s.sent)

    def end_all(self) -> None:
        for sid in list(self.sessions):
            self.end(sid, "the server is stopping")

    async def expire(self) -> None:
        """End sessions idle past the timeout (Kudu polls likewise), so a receiver that died
        does not pin the source's WAL for ever."""
        while True:
            await asyncio.sleep(min(10.0, self.idle_timeout_s / 4))
            now = asyncio.get_running_loop().time()
            for s in list(self.sessions.values()):
                if now - s.last_used > self.idle_timeout_s:
                    probe("copy.source.session_expired")
                    self.end(s.id, f"idle for {self.idle_timeout_s:g}s")

    def _current(self, s: _Session) -> None:
        """The session's replica must still be the tablet's, running: a tablet deleted
        (its table dropped, the replica tombstoned or removed) or copied over since the session
        began has no files left to serve, and reading them by path would fail as if the disk
        had lost them. The session ends and the receiver gets a refusal it stops on."""
        e = self.tablets.get(s.tablet_id)
        if e is not None and e.replica is s.replica and e.state == TabletState.RUNNING:
            return
        probe("copy.source.replica_gone")
        self.end(s.id, "its replica was deleted or replaced")
        raise RpcError(ErrorCode.TABLET_NOT_RUNNING, f"tablet {s.tablet_id}: the replica this "
                       "copy session read from was deleted or replaced since it began")

    def _session(self, sid: str) -> _Session:
        s = self.sessions.get(sid)
        if s is None:
            probe("copy.source.no_session")
            raise RpcError(ErrorCode.NOT_FOUND, f"no tablet copy session {sid!r} (it ended, "
                           "expired, or this server restarted)")
        return s


def _manifest(src: CopySource, disk: Disk) -> tuple[list[str], list[CopyFile]]:
    paths, files = [], []
    if src.snapshot is not None:
        paths.append(src.snapshot)
        files.append(CopyFile("snapshot", os.path.basename(src.snapshot),
                              _whole_snapshot(disk, src.snapshot)))
    for path, length in src.wal:
        paths.append(path)
        files.append(CopyFile("wal", os.path.basename(path), length))
    return paths, files


async def _superblock(r: Replica) -> Superblock:
    """The source's superblock, whose table name and partition the session sends. One lost or
    damaged while the replica ran from memory (a file system check, a stray rm) refuses the
    session and fails the replica: nothing rewrites a running replica's superblock, so its
    next start would refuse it anyway, and a leader that kept running would refuse every copy
    its followers need; FAILED, the masters replace it (Kudu fails a tablet whose metadata
    does not read)."""
    try:
        return await asyncio.to_thread(Superblock.load, r.paths.superblock, r.paths.disk)
    except (FileNotFoundError, CorruptionError) as e:
        probe("copy.source.superblock_unreadable")
        r.fail(e)
        raise RpcError(ErrorCode.ILLEGAL_STATE, f"the source's superblock does not read: "
                       f"{type(e).__name__}: {e}; the replica fails") from None


def _whole_snapshot(disk: Disk, path: str) -> int:
    """The snapshot's size, if it is the one its envelope gives. A snapshot is saved whole
    (written, synced, renamed in), so any other size is damage at rest since: a lost extent,
    an operator's truncate. Sent, the cut file would fail the receiver's open and leave it
    FAILED, for an operator, on the source's damage; refused, the copy fails here, the
    receiver keeps what it had, and a later copy sends the snapshot that supersedes this one. A bit flipped inside is the receiver's open to find (the payload's
    CRC): a source that reads chunk by chunk never holds the whole file."""
    size = disk.size(path)
    try:
        end, _ = durable.envelope_end(disk.read(path, 0, durable.HEADER_SIZE), path)
        if end != size:
            raise CorruptionError(path, size, f"{size} bytes, its envelope says {end}")
    except CorruptionError as e:
        probe("copy.source.snapshot_damaged")
        raise RpcError(ErrorCode.ILLEGAL_STATE, f"the source's snapshot is damaged: {e}") from None
    return size


def _read(disk: Disk, path: str, offset: int, length: int) -> bytes:
    data = disk.read(path, offset, length)
    if len(data) != length:  # a pinned file never shrinks: this is damage, not a race
        probe("copy.source.short_read")
        raise RpcError(ErrorCode.ILLEGAL_STATE, f"{path}: read {len(data)} of {length} bytes "
                       f"at offset {offset}")
    return data
