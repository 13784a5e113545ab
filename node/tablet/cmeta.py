"""Consensus metadata (`consensus-meta/<tablet>`): Raft's durable term, vote and committed config.

Raft is only safe if these survive crashes and never go backwards, so every save is atomic and
fsynced, regressions are refused here rather than trusted to callers, and `create` refuses to
overwrite an existing file (overwriting would be the "amnesia" the tablet-copy seed warns about).
The committed config is opaque bytes: its type belongs to the Raft core, which encodes it.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from node import durable
from node.consensus import SafetyError
from node.disk import REAL, Disk
from node.errors import CorruptionError
from node.probes import probe
from node.tablet.paths import check_tablet_id


class _Record(msgspec.Struct):
    tablet_id: str
    current_term: int
    voted_for: str | None
    committed_config: bytes


class ConsensusMetadata:
    def __init__(self, path: str | os.PathLike, record: _Record, disk: Disk = REAL):
        self.path = Path(path)
        self.disk = disk
        self.tablet_id = record.tablet_id
        self.current_term = record.current_term
        self.voted_for = record.voted_for
        self.committed_config = record.committed_config

    @classmethod
    def create(
        cls, path: str | os.PathLike, tablet_id: str, committed_config: bytes, disk: Disk = REAL
    ) -> ConsensusMetadata:
        """Write the first metadata of a new replica (term 0, no vote)."""
        path = Path(path)
        if disk.exists(path):
            probe("cmeta.create.refused_exists")
            raise FileExistsError(
                f"{path}: consensus metadata exists; overwriting it would lose votes"
            )
        durable.ensure_dir(path.parent, disk)
        cmeta = cls(path, _Record(check_tablet_id(tablet_id), 0, None, committed_config), disk)
        cmeta.update()
        return cmeta

    @classmethod
    def open(cls, path: str | os.PathLike, disk: Disk = REAL) -> ConsensusMetadata:
        """`load` for a replica that will act on the record (vote, campaign, or vote as a
        tombstone): the record is saved again first. A save whose directory sync failed left
        its rename in the page cache only; a process restarted without a power loss reads that
        record, and a later power loss takes it back, so a vote granted on it could be granted
        again in the same term to another candidate. Saved again, what is read is durable
        before anyone acts on it; a save that fails again raises (the replica stays down)."""
        cmeta = cls.load(path, disk)
        cmeta.update()
        return cmeta

    @classmethod
    def load(cls, path: str | os.PathLike, disk: Disk = REAL) -> ConsensusMetadata:
        record = durable.load_struct(path, _Record, disk)
        if record.tablet_id != Path(path).name:
            probe("cmeta.load.wrong_tablet")
            raise CorruptionError(path, None, f"holds metadata of tablet {record.tablet_id!r}")
        return cls(path, record, disk)

    def update(self, hard_state: tuple[int, str | None] | None = None,
               committed_config: bytes | None = None) -> None:
        """Durably save a new (term, vote) and/or committed config, then adopt them. Memory
        changes only once the save is on disk: after a failed save (ENOSPC, EIO) this object
        still says what the disk says, so nobody reports a vote that was never made durable.
        A lower term or a second vote in a term is a bug and is refused before any write, as a
        SafetyError: the replica that asked goes FAILED with a SAFETY line, which the log
        checker and the simulator judge a safety finding rather than an environmental failure."""
        term, voted_for = hard_state if hard_state is not None else (self.current_term,
                                                                     self.voted_for)
        if term < self.current_term:
            probe("cmeta.refused.term_regression")
            raise SafetyError(f"term would go back from {self.current_term} to {term}")
        if term == self.current_term and self.voted_for is not None and voted_for != self.voted_for:
            probe("cmeta.refused.second_vote")
            raise SafetyError(
                f"term {term}: already voted for {self.voted_for!r}, not {voted_for!r}"
            )
        config = self.committed_config if committed_config is None else committed_config
        durable.save_struct(self.path, _Record(self.tablet_id, term, voted_for, config), self.disk)
        self.current_term, self.voted_for, self.committed_config = term, voted_for, config
