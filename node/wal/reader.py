"""Bootstrap: read every segment of a log directory in order, judge what was found, and
replay it into the list of entries the log holds.

The judgement is deliberately narrow. The only damage accepted is a torn tail: at the end of
the newest segment, and only if that segment has no footer (it was still being written), no
intact batch follows the damage (a crash can only cut a write short; it cannot leave a good
batch behind a bad one), and the damaged batch was not written whole (a torn write leaves
unwritten, zero sectors; a bad CRC in a batch without any is a bit flip, which must not cut
fsynced, acknowledged entries; nor is a header that fails its CRC but is one or two bits away
from a valid header whose data matches: `flipped_header`). Everything else names the file and offset
and stops.

Kudu makes the same call. Its one false alarm: a power cut that persisted the pages of the
last, never-acknowledged group out of order can leave an intact batch behind a hole; that
is refused as corruption, which errs on the side of stopping rather than losing data.
"""

from __future__ import annotations

import os

import msgspec

from node.disk import REAL, Disk
from node.entry import Entry
from node.probes import probe
from node.wal import format as fmt
from node.wal.errors import WalCorruption, WalError
from node.wal.segment import (
    FLIPPED_HEADER,
    TMP_PREFIX,
    WRITTEN_WHOLE,
    Scan,
    entry_stats,
    parse_segment_name,
    scan_segment,
)


class UnclosedTail(msgspec.Struct, frozen=True):
    path: str
    offset: int  # where the good data ends and the segment will be cut
    garbage_bytes: int  # non-zero bytes after it (0: just unwritten preallocated space)
    reason: str


class LogContents(msgspec.Struct):
    segments: list[Scan]  # in sequence order
    entries: list[Entry]  # the replayed log: contiguous indexes, truncations applied
    next_index: int | None  # the index the next entry must have (None: anything may start)
    unclosed: UnclosedTail | None  # the newest segment was never finished (a crash)
    leftovers: list[str]  # temporary files of a segment that was being created


def judge_segment(scan: Scan, is_last: bool) -> UnclosedTail | None:
    """Raise WalCorruption unless `scan` is intact, or is the newest segment with a torn tail."""
    path = scan.path
    if scan.footer is not None:
        if scan.problem is not None:
            probe("wal.recover.footer_segment_damaged_refused")
            raise WalCorruption(path, scan.end, scan.problem)
        expected = entry_stats(scan.records)
        if expected != scan.footer:
            probe("wal.recover.footer_mismatch_refused")
            raise WalCorruption(
                path, scan.size - fmt.FOOTER_SIZE, f"footer says {scan.footer}, batches hold {expected}"
            )
        return None
    if scan.header.prealloc and scan.size < scan.header.prealloc:
        probe("wal.recover.cut_short_refused")
        raise WalCorruption(path, scan.size, f"segment of {scan.size} bytes with no footer, "
                            f"made {scan.header.prealloc} bytes long before its first batch: "
                            "cut short, not a torn write")
    if not is_last:
        probe("wal.recover.unfinished_not_newest_refused")
        if scan.footer_problem:
            raise WalCorruption(path, scan.size - fmt.FOOTER_SIZE, scan.footer_problem)
        raise WalCorruption(path, scan.size, "segment has no footer but is not the newest segment")
    if scan.problem is None:
        probe("wal.recover.unfinished_undamaged")
        return UnclosedTail(path, scan.end, 0, "no footer")
    if scan.valid_batch_after == scan.end:
        probe("wal.recover.crcs_match_refused")
        raise WalCorruption(path, scan.end, f"{scan.problem}, though its CRCs match: written so, not torn")
    if scan.valid_batch_after is not None:
        probe("wal.recover.intact_batch_after_damage_refused")
        raise WalCorruption(
            path,
            scan.end,
            f"{scan.problem}, yet an intact batch follows at offset {scan.valid_batch_after}: "
            "corruption, not a torn write",
        )
    if scan.problem in (WRITTEN_WHOLE, FLIPPED_HEADER):
        probe("wal.recover.written_whole_refused")
        raise WalCorruption(path, scan.end, f"{scan.problem}: corruption, not a torn write")
    return UnclosedTail(path, scan.end, scan.garbage_end - scan.end, scan.problem)


def read_log(directory: str, tablet_id: str | None = None, disk: Disk = REAL) -> LogContents:
    """Read and replay a log directory without modifying it."""
    seqs: list[tuple[int, str]] = []
    leftovers: list[str] = []
    for name in disk.listdir(directory):
        seq = parse_segment_name(name)
        if seq is not None:
            seqs.append((seq, os.path.join(directory, name)))
        elif name.startswith(TMP_PREFIX):
            probe("wal.recover.tmp_segment_found")
            leftovers.append(os.path.join(directory, name))
        else:
            raise WalError(f"{os.path.join(directory, name)}: unexpected file in a WAL directory")
    seqs.sort()
    segments: list[Scan] = []
    unclosed: UnclosedTail | None = None
    for i, (seq, path) in enumerate(seqs):
        if i and seq != seqs[i - 1][0] + 1:
            probe("wal.recover.sequence_gap_refused")
            raise WalCorruption(path, 0, f"segment sequence gap: {seqs[i - 1][0]} then {seq}")
        scan = scan_segment(path, disk=disk)
        if scan.header.seq != seq:
            raise WalCorruption(path, 0, f"header sequence {scan.header.seq} does not match the file name")
        if tablet_id is not None and scan.header.tablet_id != tablet_id:
            probe("wal.recover.wrong_tablet_refused")
            raise WalCorruption(path, 0, f"segment of tablet {scan.header.tablet_id!r}, expected {tablet_id!r}")
        unclosed = judge_segment(scan, is_last=i == len(seqs) - 1)
        segments.append(scan)
    entries, next_index = replay(segments)
    return LogContents(segments, entries, next_index, unclosed, leftovers)


def replay(segments: list[Scan]) -> tuple[list[Entry], int | None]:
    """Apply the records in order, checking that indexes never skip."""
    entries: list[Entry] = []
    expected: int | None = None
    for scan in segments:
        for rec in scan.records:
            if rec.kind is fmt.BatchKind.TRUNCATE:
                probe("wal.replay.truncation_applied")
                n = rec.after_index
                if expected is not None and n >= expected:
                    probe("wal.replay.bad_truncation_refused")
                    raise WalCorruption(scan.path, rec.offset, f"truncation after {n}, past the last index {expected - 1}")
                if entries:
                    del entries[max(0, n - entries[0].index + 1) :]
                expected = n + 1
                continue
            for e in rec.entries:
                if expected is not None and e.index != expected:
                    probe("wal.replay.index_gap_refused")
                    raise WalCorruption(scan.path, rec.offset, f"index gap: expected {expected}, found {e.index}")
                expected = e.index + 1
            entries.extend(rec.entries)
    return entries, expected
