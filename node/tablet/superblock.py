"""The tablet superblock (`tablet-meta/<tablet>`): the file whose presence means the tablet exists.

It records which table and partition the replica serves and the state of its data, following
the tablet-copy seed: READY (normal), COPYING (tablet copy in progress; deleted again if we
crash), TOMBSTONED (removed: the data is gone but the consensus metadata is kept forever and the
last logged OpId is remembered so the replica can still vote without its WAL).
"""

from __future__ import annotations

import enum
import os
from pathlib import Path

import crc32c
import msgspec

from node import durable
from node.disk import REAL, Disk
from node.errors import CorruptionError
from node.probes import probe
from node.tablet.paths import check_tablet_id


class DataState(enum.IntEnum):
    READY = 1
    COPYING = 2
    TOMBSTONED = 3


class OpId(msgspec.Struct, frozen=True, array_like=True):
    term: int
    index: int


class KeyRange(msgspec.Struct, frozen=True, tag="range"):
    """Keys in [start, end); end None means unbounded."""

    start: str = ""
    end: str | None = None

    def contains(self, key: str) -> bool:
        return self.start <= key and (self.end is None or key < self.end)


class HashBucket(msgspec.Struct, frozen=True, tag="hash"):
    """Keys whose CRC32C (stable across processes, unlike hash()) falls in this bucket."""

    bucket: int
    num_buckets: int

    def contains(self, key: str) -> bool:
        if self.num_buckets == 1:  # the table's only bucket: no key needs hashing
            return True
        return crc32c.crc32c(key.encode()) % self.num_buckets == self.bucket


Partition = KeyRange | HashBucket

# (from, to) pairs the seed's deletion, tablet-copy and startup procedures use.
_TRANSITIONS = {
    (DataState.READY, DataState.TOMBSTONED),  # delete tablet
    (DataState.READY, DataState.COPYING),  # tablet copy over a running replica
    (DataState.TOMBSTONED, DataState.COPYING),  # tablet copy onto a tombstone
    (DataState.COPYING, DataState.READY),  # copy finished
    (DataState.COPYING, DataState.TOMBSTONED),  # startup found an unfinished copy
}


class Superblock(msgspec.Struct, frozen=True):
    tablet_id: str
    table_name: str
    partition: Partition
    data_state: DataState
    tombstone_last_opid: OpId | None = None  # last OpId logged before the WAL was deleted
    # the server a tablet copy installed this data from (None: created here); evidence, kept
    # with the data, that a replica back from a tombstone came back by a copy
    copied_from: str | None = None

    def __post_init__(self) -> None:
        check_tablet_id(self.tablet_id)

    def with_state(self, state: DataState, last_logged: OpId | None = None) -> Superblock:
        """The next superblock; only the seed's transitions are allowed.

        Tombstoning needs the last logged OpId (the vote depends on it). Going to COPYING keeps a
        tombstone's OpId, in case we crash mid-copy and tombstone ourselves again at startup.
        Leaving READY forgets `copied_from`: the data it spoke of is going.
        """
        if (self.data_state, state) not in _TRANSITIONS:
            probe("superblock.transition.refused")
            raise ValueError(
                f"tablet {self.tablet_id}: no transition {self.data_state.name} -> {state.name}"
            )
        if state is DataState.TOMBSTONED:
            last = last_logged or self.tombstone_last_opid
            if last is None and self.data_state is not DataState.COPYING:
                # a copy over files whose last OpId is unknown stays unknown: it never votes
                probe("superblock.tombstone.refused_no_last_op")
                raise ValueError("tombstoning needs the last logged OpId")
        else:
            last = self.tombstone_last_opid if state is DataState.COPYING else None
        copied = self.copied_from if state is DataState.READY else None
        return msgspec.structs.replace(self, data_state=state, tombstone_last_opid=last,
                                       copied_from=copied)

    def save(self, path: str | os.PathLike, disk: Disk = REAL) -> None:
        durable.ensure_dir(Path(path).parent, disk)
        durable.save_struct(path, self, disk)

    @classmethod
    def open(cls, path: str | os.PathLike, disk: Disk = REAL) -> Superblock:
        """`load` for start-up, which acts on the record (starts the replica, tombstones an
        unfinished copy, keeps a tombstone that will vote): saved again first, as
        ConsensusMetadata.open does. A save whose directory sync failed left its rename in the
        page cache only, and a restart without a power loss reads it: a READY that a power loss then turned back into
        COPYING tombstoned the replica as brand new (last OpId (0, 0)), and it voted for a
        candidate missing entries it had acknowledged. A save that fails again raises."""
        sb = cls.load(path, disk)
        sb.save(path, disk)
        return sb

    @classmethod
    def load(cls, path: str | os.PathLike, disk: Disk = REAL) -> Superblock:
        sb = durable.load_struct(path, cls, disk)
        if sb.tablet_id != Path(path).name:
            probe("superblock.load.wrong_tablet")
            raise CorruptionError(path, None, f"holds the superblock of tablet {sb.tablet_id!r}")
        return sb
