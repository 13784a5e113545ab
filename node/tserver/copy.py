"""Tablet copy (Kudu's tablet-copy design), the receiving side's files.

A copy installs the source's newest snapshot file and its WAL from there on, fetched in chunks
(node.tserver.copy_client), plus the consensus metadata merged with ours; the replica's own
bootstrap then rebuilds the state from those files, exactly as after a restart. Crash safety
comes from the superblock: it says COPYING from the first change on, and a server that starts
with a COPYING superblock tombstones the replica again (`recover_unfinished_copy`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from node import durable
from node.consensus import VoteRequest, VoteResponse
from node.consensus.types import decode_config
from node.disk import pwrite_all
from node.errors import CorruptionError
from node.faults import NO_FAULTS, Faults
from node.probes import probe
from node.protocol import CopyFile, CopySession
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.paths import TabletPaths
from node.tablet.snapshot import SnapshotStore
from node.tablet.superblock import DataState, OpId, Superblock
from node.wal.errors import WalError
from node.wal.reader import read_log
from node.wal.segment import parse_segment_name

T = TypeVar("T")

_SNAPSHOT_NAME = re.compile(r"snapshot-\d{1,20}")


async def uninterrupted(step: Awaitable[T]) -> T:
    """Await `step` (a to_thread call, say) to its end even if the caller is cancelled meanwhile,
    then let the cancellation through. A thread cannot be interrupted: cancelling the await of
    a to_thread leaves its function running beside whatever the caller does next, and a copy's
    cleanup then raced the install it was cleaning up (once, memory said TOMBSTONED while the
    superblock said READY). With this, a DeleteTablet that cancels a copy waits for
    the copy's current file step to finish, so the two are serialized."""
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation, not the step's error, goes on
        raise


class LastOpUnknown(Exception):
    """A copy over files that may hold acknowledged entries, while nothing says which, onto a
    voter: refused before anything is written (`prepare_install`)."""


def prepare_install(paths: TabletPaths, session: CopySession, faults: Faults = NO_FAULTS,
                    known: OpId | None = None, uuid: str = "") -> None:
    """Blocking: make room for a copy's files. From the first write on the superblock says
    COPYING, so a failure or crash from here tombstones the replica. `known`: the last op a
    deleted FAILED replica logged, as it knew while it ran (TabletManager._forget_failed);
    the copy starts from it where its files prove less. With no last OpId known (a deleted
    replica's damaged files, a lost superblock over a log that does not read) a copy could
    install behind what this replica acknowledged and let it vote for logs without it; while
    `uuid` (this server) is a voter in the copied committed config, that is refused
    (LastOpUnknown) and nothing is written: the masters replace the replica, and a copy
    onto it as a new, non-voting member may install."""
    tablet_id, disk = paths.tablet_id, paths.disk
    sb = readable_superblock(paths)
    if sb is not None:
        # A tombstone keeps its last OpId, and so does a copy that did not open
        # (complete_install); a deleted FAILED replica's own files (READY, a log that did not
        # open) prove none, so the copy starts with it unknown: no votes (tombstone_vote)
        probe("copy.prepare.over_existing_files")
        sb = sb.with_state(DataState.COPYING)
    elif disk.exists(paths.superblock):
        # a deleted FAILED replica whose superblock is damaged: it proves no last OpId either
        probe("copy.prepare.over_unreadable_superblock")
        sb = Superblock(tablet_id, session.table_name, session.partition, DataState.COPYING,
                        tombstone_last_opid=None)
    elif nothing_here(paths):
        # no file of the tablet's at all: nothing was ever logged here
        probe("copy.prepare.new_replica")
        sb = Superblock(tablet_id, session.table_name, session.partition, DataState.COPYING,
                        tombstone_last_opid=OpId(0, 0))
    else:
        # the superblock is gone (lost at rest) while its metadata or log remain: the replica
        # may have logged, and acknowledged, entries. Its own log says which, read before the
        # copy removes it: the copy must not install behind it (TabletManager._install), or
        # the replica votes for logs without them. A log that does not read proves nothing:
        # the last OpId is unknown (no votes until the copy installs).
        probe("copy.prepare.superblock_lost")
        sb = Superblock(tablet_id, session.table_name, session.partition, DataState.COPYING,
                        tombstone_last_opid=logged_at_rest(paths))
    last = sb.tombstone_last_opid
    if known is not None and (last is None or (known.term, known.index) > (last.term, last.index)):
        # a replica that failed while it ran knew its last op in memory, at least what it
        # acknowledged; its files, which may be damaged, are not trusted to say as much
        probe("copy.prepare.forgotten_replicas_last_op")
        sb = msgspec.structs.replace(sb, tombstone_last_opid=known)
    if sb.tombstone_last_opid is None and decode_config(session.committed_config).is_voter(uuid):
        probe("copy.refused.last_op_unknown_voter")
        raise LastOpUnknown(
            f"tablet {tablet_id}: nothing here says what this replica logged (its superblock is "
            "lost or damaged, or it failed on files that do not read), and it is a voter in "
            "the copied config: a copy could end behind entries it acknowledged")
    sb.save(paths.superblock, disk)
    merge_consensus_metadata(paths, session.term, session.committed_config, faults)
    _remove_data(paths)
    for directory in (paths.wal_dir, paths.snapshot_dir):
        durable.ensure_dir(directory, disk)


def destination(paths: TabletPaths, f: CopyFile) -> Path:
    """Where a copied file goes; a name that is not one of ours (a path, say) is refused."""
    if f.kind == "snapshot" and _SNAPSHOT_NAME.fullmatch(f.name):
        return paths.snapshot_dir / f.name
    if f.kind == "wal" and parse_segment_name(f.name) is not None:
        return paths.wal_dir / f.name
    raise ValueError(f"the copy source sent a {f.kind!r} file named {f.name!r}")


class FileWriter:
    """One copied file, written at the offsets the chunks give, synced on close."""

    def __init__(self, paths: TabletPaths, path: Path):
        self.disk = paths.disk
        self.fd: Any = self.disk.open(path, create=True)

    def write(self, offset: int, data: bytes | memoryview) -> None:
        pwrite_all(self.disk, self.fd, [data], offset)

    def close(self, sync: bool) -> None:
        try:
            if sync:
                self.disk.fsync(self.fd)
        finally:
            self.disk.close(self.fd)


def complete_install(paths: TabletPaths, session: CopySession, source: str,
                     opened: bool = True) -> None:
    """Blocking: every file is written and synced; make their names durable, then say READY,
    naming the `source` server. Files that did not open (`opened` False: the replica is FAILED
    on them, kept for an operator) keep the last OpId the copy started from: they replaced
    the log that OpId speaks of, and the next copy over them must still compare with it
    (TabletManager._install)."""
    disk = paths.disk
    for directory in (paths.wal_dir, paths.snapshot_dir):
        disk.fsync_dir(directory)
    sb = Superblock.load(paths.superblock, disk)
    probe("copy.install.completed")
    last = None
    if not opened:
        probe("copy.install.failed_open_keeps_last_op")
        last = sb.tombstone_last_opid
    msgspec.structs.replace(sb.with_state(DataState.READY), table_name=session.table_name,
                            partition=session.partition, copied_from=source,
                            tombstone_last_opid=last).save(paths.superblock, disk)


def nothing_here(paths: TabletPaths) -> bool:
    """Blocking: no consensus metadata, WAL or snapshot of the tablet's here: a brand-new
    replica, which never logged. A missing superblock alone proves nothing: it is written
    before any WAL, but it can be lost at rest (a file system check, a stray rm) while the
    rest of the replica stays."""
    disk = paths.disk
    return not disk.exists(paths.consensus_meta) and not any(
        disk.isdir(d) and disk.listdir(d) for d in (paths.wal_dir, paths.snapshot_dir))


def logged_at_rest(paths: TabletPaths) -> OpId | None:
    """Blocking: the last OpId a replica's own files say it logged, read without changing
    them: its replayed WAL's last entry, or its newest snapshot's if later (a log collected up
    to it); (0, 0) if neither holds one. None if they do not read (a torn tail is not
    damage: the torn batch was never acknowledged)."""
    disk = paths.disk
    try:
        snap = SnapshotStore(paths.snapshot_dir, paths.tablet_id, disk).load_latest()
        entries = (read_log(str(paths.wal_dir), paths.tablet_id, disk).entries
                   if disk.isdir(paths.wal_dir) else [])
    except (CorruptionError, WalError, OSError):
        probe("copy.prepare.lost_superblocks_log_unreadable")
        return None
    last = (0, 0)
    if snap is not None:
        last = (snap.last_applied_term, snap.last_applied_index)
    if entries:
        last = max(last, (entries[-1].term, entries[-1].index))
    probe("copy.prepare.lost_superblocks_log_read")
    return OpId(*last)


def readable_superblock(paths: TabletPaths) -> Superblock | None:
    """The superblock on disk; None if there is none or it does not read (damaged: the files a
    deleted FAILED replica left, which a copy replaces)."""
    if not paths.disk.exists(paths.superblock):
        return None
    try:
        return Superblock.load(paths.superblock, paths.disk)
    except CorruptionError:
        return None


def merge_consensus_metadata(paths: TabletPaths, remote_term: int, remote_config: bytes,
                             faults: Faults = NO_FAULTS) -> None:
    """The seed's merge rules: keep the higher term, keep our vote unless the term moves on,
    adopt the remote committed config. Never overwrite metadata wholesale: that is amnesia."""
    path = paths.consensus_meta
    if paths.disk.exists(path):
        cmeta = ConsensusMetadata.load(path, paths.disk)
    else:
        probe("copy.merge.cmeta_created")
        cmeta = ConsensusMetadata.create(path, paths.tablet_id, remote_config, paths.disk)
    hard_state = (remote_term, None) if remote_term > cmeta.current_term else None
    if faults.fault_copy_overwrite_cmeta:  # the remote's metadata wholesale, past the guards
        cmeta.current_term, cmeta.voted_for, hard_state = remote_term, None, None
    cmeta.update(hard_state, remote_config)


def tombstone(paths: TabletPaths, last_logged: OpId | None) -> None:
    """Blocking: mark the replica deleted, keeping its consensus metadata and last OpId (so it can
    never vote twice in a term), then remove its data and WAL. None: a COPYING replica whose
    last OpId is unknown stays so."""
    sb = Superblock.load(paths.superblock, paths.disk)
    sb.with_state(DataState.TOMBSTONED, last_logged).save(paths.superblock, paths.disk)
    _remove_data(paths)


def recover_unfinished_copy(paths: TabletPaths, sb: Superblock) -> None:
    """Start-up found a COPYING superblock: the copy died part-way, so go back to a tombstone,
    with the last OpId the copy started from: (0, 0) for a brand-new replica, unknown (it never
    votes) for a deleted FAILED replica's files or a replica whose superblock was lost."""
    tombstone(paths, sb.tombstone_last_opid)


def abandon_copy(paths: TabletPaths) -> str | None:
    """Blocking: tombstone a copy that failed part-way (a running server's version of start-up's
    recovery); the table's name if the copy had got as far as its superblock (one that does
    not read was never written by it: prepare_install writes a readable one first)."""
    sb = readable_superblock(paths)
    if sb is None or sb.data_state != DataState.COPYING:
        return None
    recover_unfinished_copy(paths, sb)
    return sb.table_name


UNREADABLE_CMETA = "its consensus metadata does not read"  # tombstone_vote's reason: logged loudly


def tombstone_vote(paths: TabletPaths, uuid: str, requests: list[VoteRequest]
                   ) -> list[tuple[VoteResponse | None, str]]:
    """Blocking: answer vote requests for a TOMBSTONED or COPYING replica (as in Kudu, it keeps
    voting, or a voter being copied plus a leader crash can leave the tablet leaderless).

    The term and vote come from the consensus metadata, the log to compare with from the
    tombstone's last OpId in the superblock ((0, 0) if it never logged anything). The rules are
    the core's (`RaftCore._on_vote_request`), without a vote lease: a replica that refuses
    AppendEntries never hears from a leader. A new term or a granted vote is saved before the
    answers are returned, so they go out only once durable. Returns (response or None,
    reason) per request, None where Raft sends nothing (a real vote from an older term).

    A replica whose last OpId is unknown (a deleted FAILED replica's files, being copied over,
    its superblock readable, damaged or lost) refuses every vote, as Kudu refuses a tombstoned
    vote without a recorded last OpId: it may have logged, and acknowledged, entries a
    candidate lacks.

    A replica whose consensus metadata does not read (a flipped bit on its disk) knows neither
    its term nor whether it voted in it: it sends nothing at all (an answer would have to
    name a term), says why in its log, and keeps refusing until an operator repairs it or a
    copy replaces it (the copy's merge refuses such metadata too)."""
    try:
        cmeta = ConsensusMetadata.load(paths.consensus_meta, paths.disk)
    except CorruptionError as err:
        probe("tombstone.vote.refused_corrupt_metadata")
        why = f"{UNREADABLE_CMETA} ({err}): it may have voted in the term"
        return [(None, why) for _ in requests]
    sb = readable_superblock(paths)  # None: a damaged one a copy is about to replace
    term, voted_for = cmeta.current_term, cmeta.voted_for
    if sb is None or sb.tombstone_last_opid is None:
        probe("tombstone.vote.refused_unknown_last_op")
        why = "its last logged op is unknown (a failed replica's files): no vote until a copy installs"
        return [(VoteResponse(term, uuid, m.from_uuid, False, m.pre_vote)
                 if m.term >= term or m.pre_vote else None, why) for m in requests]
    last = sb.tombstone_last_opid
    out: list[tuple[VoteResponse | None, str]] = []
    regranted = False  # a vote granted again to the candidate the record names
    for m in requests:
        up_to_date = (m.last_term, m.last_index) >= (last.term, last.index)
        behind = f"log behind the tombstone's last op ({last.term}, {last.index})"
        if m.term < term:
            probe("tombstone.vote.refused_stale_term")
            resp = VoteResponse(term, uuid, m.from_uuid, False, True) if m.pre_vote else None
            out.append((resp, f"term behind ours ({term})"))
            continue
        if m.pre_vote:
            can_vote = m.term > term or voted_for in (None, m.from_uuid)
        else:
            if m.term > term:
                term, voted_for = m.term, None
            can_vote = voted_for in (None, m.from_uuid)
        granted = can_vote and up_to_date
        if granted and not m.pre_vote:
            probe("tombstone.vote.granted")
            regranted = voted_for == m.from_uuid
            voted_for = m.from_uuid
        out.append((VoteResponse(m.term if granted else term, uuid, m.from_uuid, granted,
                                 m.pre_vote),
                    "log up to date" if granted else behind if can_vote
                    else f"already voted for {voted_for}"))
    if (term, voted_for) != (cmeta.current_term, cmeta.voted_for) or regranted:
        # saved again on a vote granted again: the record read may be one whose directory
        # sync failed, in the page cache only (ConsensusMetadata.open says why that matters)
        cmeta.update((term, voted_for))
    return out


def _remove_data(paths: TabletPaths) -> None:
    """Remove the WAL and snapshots durably: a removal that a power cut undoes would bring an
    old log back under a later copy's snapshot (the superblock says READY, the WAL is stale)."""
    for directory in (paths.wal_dir, paths.snapshot_dir):
        paths.disk.rmtree(directory)
        if paths.disk.isdir(directory.parent):
            paths.disk.fsync_dir(directory.parent)
