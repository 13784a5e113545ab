"""Where one tablet replica's files live inside a daemon's data directory (tablet-copy seed layout).

The tablet id becomes a file name, so it is validated here once instead of trusted everywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from node.disk import REAL, Disk

_TABLET_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


def check_tablet_id(tablet_id: str) -> str:
    if not _TABLET_ID.fullmatch(tablet_id):
        raise ValueError(
            f"invalid tablet id {tablet_id!r}: want 1-128 of [A-Za-z0-9_.-], no leading dot"
        )
    return tablet_id


@dataclass(frozen=True)
class TabletPaths:
    data_dir: Path
    tablet_id: str
    disk: Disk = field(default=REAL, compare=False, repr=False)  # every file below goes through it

    def __post_init__(self) -> None:
        check_tablet_id(self.tablet_id)
        object.__setattr__(self, "data_dir", Path(self.data_dir))

    @property
    def superblock(self) -> Path:
        return self.data_dir / "tablet-meta" / self.tablet_id

    @property
    def consensus_meta(self) -> Path:
        return self.data_dir / "consensus-meta" / self.tablet_id

    @property
    def wal_dir(self) -> Path:
        return self.data_dir / "wals" / self.tablet_id

    @property
    def snapshot_dir(self) -> Path:
        return self.data_dir / "data" / self.tablet_id
