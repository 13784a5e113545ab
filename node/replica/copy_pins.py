"""What a tablet copy's source keeps for the copy while it runs (Kudu's source session):
the newest snapshot file pinned, and the WAL from just after it anchored, so that neither GC nor
the core's compaction removes what the receiver still has to fetch. The session service
(node.tserver.copy_source) pins at a session's start and unpins at its end or expiry; the
replica asks for the lowest pinned floor before it compacts its log.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Protocol

from node.consensus import RaftConfig
from node.errors import ReplicaError
from node.probes import probe


@dataclass(frozen=True)
class CopySource:
    """What a tablet copy sends (`CopyPins.pin`): files, and the metadata to merge."""

    snapshot_index: int  # 0: no snapshot yet, the WAL holds everything
    snapshot: str | None  # path of the snapshot file
    wal: list[tuple[str, int]]  # (segment path, bytes to send), oldest first
    committed_config: RaftConfig
    term: int


class Source(Protocol):
    """What pinning needs of the replica (node.replica.replica.Replica)."""

    failed: str | None
    snapshots: Any  # SnapshotStore: pin_latest, unpin, path_for
    wal: Any  # Log: register_anchor, release_anchor, copy_extents
    core: Any  # RaftCore: committed_config, term


class CopyPins:
    def __init__(self, replica: Source):
        self.r = replica
        self.floors: dict[str, int] = {}  # holder -> the first log index its copy still sends

    def floor(self, default: int) -> int:
        """The lowest index the log must keep from: `default`, or lower for a copy under way."""
        return min([default, *self.floors.values()])

    async def pin(self, holder: str) -> CopySource:
        """Pin the newest snapshot file and the WAL from just after it until `unpin(holder)`.
        The receiver's own bootstrap then rebuilds the state from the files, as a restart does
        here. The committed config sent with them is in those files (the WAL reaches its
        entry), so the receiver's log never lacks it."""
        r = self.r
        if r.failed:
            probe("copy.pins.refused_failed")
            raise ReplicaError(f"replica failed: {r.failed}")
        index = r.snapshots.pin_latest()
        r.wal.register_anchor(holder, index + 1)
        self.floors[holder] = index + 1
        try:
            for _ in range(200):  # the committed config's entry is durable here within a sync
                config, term = r.core.committed_config, r.core.term
                try:
                    extents, first, last = r.wal.copy_extents(index + 1)
                except FileNotFoundError as e:  # lost at rest while the replica runs from
                    # memory: nothing of it is sent, and its bootstrap will judge the hole
                    probe("copy.pins.wal_segment_missing")
                    raise ReplicaError(f"a segment of the log is missing: {e.filename}") from None
                if last >= config.opid_index:
                    break
                probe("copy.pins.waited_for_config_entry")
                await asyncio.sleep(0.01)
            else:
                probe("copy.pins.config_entry_not_synced")
                raise ReplicaError(f"the committed config's entry {config.opid_index} is not "
                                   f"in the synced WAL (it ends at {last})")
            if first > index + 1:
                probe("copy.pins.wal_starts_after_snapshot")
                raise ReplicaError(f"the WAL starts at {first}, after snapshot {index}")
        except BaseException:
            self.unpin(holder, index)
            raise
        snapshot = str(r.snapshots.path_for(index)) if index else None
        return CopySource(index, snapshot, extents, config, term)

    def unpin(self, holder: str, snapshot_index: int) -> None:
        self.floors.pop(holder, None)
        with contextlib.suppress(KeyError):
            self.r.wal.release_anchor(holder)
        self.r.snapshots.unpin(snapshot_index)
