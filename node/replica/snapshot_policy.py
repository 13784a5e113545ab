"""When a replica snapshots its state machine, and how much log it keeps behind a snapshot.

Entries and bytes bound both. The log, in memory and in the WAL, holds everything since the last
snapshot: by entry count alone (20,000) a replica of wide rows held gigabytes, each entry up to
a frame. Kudu flushes a tablet's in-memory store at flush_threshold_mb (1024); the byte bounds
are that. Pure: the replica asks with its own counts and log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from node.probes import probe

if TYPE_CHECKING:
    from node.consensus.log import RaftLog

MIB = 1 << 20


class Bounds(Protocol):
    """The bounds, as ReplicaOptions holds them."""

    snapshot_interval_entries: int
    snapshot_interval_mb: float
    log_retain_entries: int
    log_retain_mb: float


def snapshot_due(entries_since: int, bytes_since: int, opts: Bounds) -> bool:
    """Whether entries applied since the last snapshot (this many, of these payload bytes)
    call for the next."""
    if entries_since >= opts.snapshot_interval_entries:
        return True
    if bytes_since >= opts.snapshot_interval_mb * MIB:
        probe("replica.snapshot.due_to_bytes")
        return True
    return False


def retain_from(log: RaftLog, applied: int, opts: Bounds) -> int:
    """The first entry a snapshot at `applied` keeps for lagging followers: at most
    log_retain_entries of them, and at most log_retain_mb of their payloads."""
    by_count = max(1, applied - opts.log_retain_entries)
    by_bytes = log.first_within(applied, int(opts.log_retain_mb * MIB))
    if by_bytes > by_count:
        probe("replica.log.retention_bounded_by_bytes")
    return max(by_count, by_bytes)
