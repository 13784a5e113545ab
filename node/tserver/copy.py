"""Tablet copy (seed 05), the receiving side's files.

A copy installs the leader's state machine at some applied index plus the consensus metadata
merged with ours; the entries after that index arrive by ordinary AppendEntries, because the
leader always retains its log after its applied index. Crash safety comes from the superblock:
it says COPYING from the first change on, and a server that starts with a COPYING superblock
tombstones the replica again (`recover_unfinished_copy`).
"""

from __future__ import annotations

import shutil

import msgspec

from node.protocol import TabletCopyData
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.paths import TabletPaths
from node.tablet.snapshot import SnapshotStore
from node.tablet.superblock import DataState, OpId, Superblock


def install_copy(paths: TabletPaths, data: TabletCopyData) -> None:
    """Blocking: run in a thread. Ends with a READY superblock, or raises part-way and leaves a
    COPYING one for start-up to tombstone."""
    tablet_id = paths.tablet_id
    if paths.superblock.exists():
        sb = Superblock.load(paths.superblock).with_state(DataState.COPYING)
    else:
        sb = Superblock(tablet_id, data.table_name, data.partition, DataState.COPYING)
    sb.save(paths.superblock)
    merge_consensus_metadata(paths, data.term, data.committed_config)
    _remove_data(paths)
    SnapshotStore(paths.snapshot_dir, tablet_id).save(data.snapshot)
    msgspec.structs.replace(sb, table_name=data.table_name, partition=data.partition).with_state(
        DataState.READY
    ).save(paths.superblock)


def merge_consensus_metadata(paths: TabletPaths, remote_term: int, remote_config: bytes) -> None:
    """The seed's merge rules: keep the higher term, keep our vote unless the term moves on,
    adopt the remote committed config. Never overwrite metadata wholesale: that is amnesia."""
    path = paths.consensus_meta
    if path.exists():
        cmeta = ConsensusMetadata.load(path)
    else:
        cmeta = ConsensusMetadata.create(path, paths.tablet_id, remote_config)
    if remote_term > cmeta.current_term:
        cmeta.set_hard_state(remote_term, None)
    cmeta.committed_config = remote_config
    cmeta.save()


def tombstone(paths: TabletPaths, last_logged: OpId) -> None:
    """Blocking: mark the replica deleted, keeping its consensus metadata and last OpId (so it can
    never vote twice in a term), then remove its data and WAL."""
    sb = Superblock.load(paths.superblock)
    sb.with_state(DataState.TOMBSTONED, last_logged).save(paths.superblock)
    _remove_data(paths)


def recover_unfinished_copy(paths: TabletPaths, sb: Superblock) -> None:
    """Start-up found a COPYING superblock: the copy died part-way, so go back to a tombstone.
    A copy onto a brand-new replica had logged nothing: its last OpId is (0, 0)."""
    tombstone(paths, sb.tombstone_last_opid or OpId(0, 0))


def abandon_copy(paths: TabletPaths) -> str | None:
    """Blocking: tombstone a copy that failed part-way (a running server's version of start-up's
    recovery); the table's name if the copy had got as far as its superblock."""
    sb = Superblock.load(paths.superblock) if paths.superblock.exists() else None
    if sb is None or sb.data_state != DataState.COPYING:
        return None
    recover_unfinished_copy(paths, sb)
    return sb.table_name


def _remove_data(paths: TabletPaths) -> None:
    shutil.rmtree(paths.wal_dir, ignore_errors=True)
    shutil.rmtree(paths.snapshot_dir, ignore_errors=True)
