"""Snapshots of the state machine on disk (`data/<tablet>/snapshot-<index>`).

Only the newest snapshot is kept (plus one a tablet copy is still sending, until it ends): log GC
removes the WAL below it, so an older one could not be caught up anyway. For the same reason a damaged newest snapshot is a hard error naming the file,
never a silent fall-back to an older snapshot or an empty state.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections import Counter
from pathlib import Path

from node import durable
from node.disk import REAL, Disk
from node.errors import CorruptionError
from node.probes import probe
from node.tablet.state import Snapshot

_NAME = re.compile(r"snapshot-(\d+)")


class SnapshotStore:
    def __init__(self, directory: str | os.PathLike, tablet_id: str, disk: Disk = REAL):
        self.directory = Path(directory)
        self.tablet_id = tablet_id
        self.disk = disk
        # index -> holders: a tablet copy sending that file (save() keeps a pinned snapshot)
        self._pins: Counter[int] = Counter()
        self._lock = threading.Lock()  # save() runs in a thread, pin() on the event loop

    def pin_latest(self) -> int:
        """Keep the newest snapshot file until unpin(); its index (0: there is none)."""
        with self._lock:
            indexes = self.indexes()
            index = indexes[-1] if indexes else 0
            self._pins[index] += 1
            return index

    def unpin(self, index: int) -> None:
        with self._lock:
            self._pins[index] -= 1
            if self._pins[index] <= 0:
                del self._pins[index]

    def path_for(self, index: int) -> Path:
        return self.directory / f"snapshot-{index}"

    def indexes(self) -> list[int]:
        """Indexes of the snapshot files present, oldest first."""
        if not self.disk.isdir(self.directory):
            return []
        found = (_NAME.fullmatch(name) for name in self.disk.listdir(self.directory))
        return sorted(int(m.group(1)) for m in found if m)

    def save(self, snap: Snapshot) -> Path:
        """Write `snap` durably, then delete older snapshots (unless pinned) and leftovers of
        crashed writes."""
        if snap.tablet_id != self.tablet_id:
            raise ValueError(f"snapshot of tablet {snap.tablet_id!r} saved into {self.tablet_id!r}")
        durable.ensure_dir(self.directory, self.disk)
        path = self.path_for(snap.last_applied_index)
        durable.save_struct(path, snap, self.disk)
        probe("tablet.snapshot.saved")
        with self._lock:
            for index in self.indexes():
                if index < snap.last_applied_index and index not in self._pins:
                    probe("tablet.snapshot.older_deleted")
                    self.disk.unlink(self.path_for(index))
        for name in self.disk.listdir(self.directory):
            if durable.is_temp_file(name):
                with contextlib.suppress(FileNotFoundError):
                    self.disk.unlink(self.directory / name)
        self.disk.fsync_dir(self.directory)
        return path

    def load_latest(self) -> Snapshot | None:
        """The newest snapshot, or None if there is none; CorruptionError if it is damaged."""
        indexes = self.indexes()
        if not indexes:
            return None
        probe("tablet.snapshot.loaded")
        path = self.path_for(indexes[-1])
        snap = durable.load_struct(path, Snapshot, self.disk)
        if snap.tablet_id != self.tablet_id or snap.last_applied_index != indexes[-1]:
            probe("tablet.snapshot.wrong_contents_refused")
            raise CorruptionError(
                path, None, f"holds tablet {snap.tablet_id!r} at index {snap.last_applied_index}"
            )
        return snap
