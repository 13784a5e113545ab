"""One segment file: scanning it (for bootstrap and `tessera wal dump`) and writing it.

Writing follows Kudu's segment life cycle. A new segment is built under a temporary name
(preallocated, header written, fsynced) and only then renamed into place, so a `wal-*` file
always starts with a complete header. A segment is finished by writing the footer and cutting
the file to its written length, so only the newest segment can ever lack a footer.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

import msgspec

from node.disk import REAL, Disk, pwrite_all
from node.entry import Entry
from node.probes import probe
from node.wal import format as fmt
from node.wal.errors import WalCorruption

SEGMENT_PREFIX = "wal-"
TMP_PREFIX = ".tmp-wal-"
_SEGMENT_NAME = re.compile(r"wal-(\d{9})")
# Bytes 4..8 of every valid batch header: kind 1 or 2, then the zero reserved field.
_KIND_FIELD = re.compile(rb"[\x01\x02]\x00\x00\x00")


def segment_name(seq: int) -> str:
    return f"{SEGMENT_PREFIX}{seq:09d}"


def parse_segment_name(name: str) -> int | None:
    m = _SEGMENT_NAME.fullmatch(name)
    return int(m.group(1)) if m else None


class Record(msgspec.Struct, frozen=True):
    offset: int  # of the batch header in the file
    kind: fmt.BatchKind
    entries: list[Entry]  # ENTRIES batches
    after_index: int  # TRUNCATE batches (-1 otherwise)


class Scan(msgspec.Struct):
    """What is in one segment file, read without judging it: bootstrap and dump judge."""

    path: str
    size: int
    header: fmt.SegmentHeader
    footer: fmt.Footer | None
    footer_problem: str | None  # a footer magic was there but its CRC failed
    records: list[Record]
    end: int  # offset just past the last good batch
    problem: str | None  # why scanning stopped before the end of the batch area
    garbage_end: int  # offset just past the last non-zero byte from `end` (== end if all zero)
    valid_batch_after: int | None  # offset of an intact batch at or after the problem, if any


def scan_segment(path: str, limit: int = -1, disk: Disk = REAL) -> Scan:
    """Read a segment (its first `limit` bytes if given: the written part of one still being
    appended to). Raises WalCorruption only when its header is unusable."""
    buf = disk.read(path, 0, limit)
    try:
        header = fmt.parse_segment_header(buf)
    except ValueError as e:
        probe("wal.header.corrupt_refused")
        raise WalCorruption(path, 0, str(e)) from None
    size = len(buf)
    footer, footer_problem, area_end = None, None, size
    if size - header.size >= fmt.FOOTER_SIZE:
        parsed = fmt.parse_footer(buf[size - fmt.FOOTER_SIZE :])
        if isinstance(parsed, fmt.Footer):
            footer, area_end = parsed, size - fmt.FOOTER_SIZE
        elif parsed is not None:
            probe("wal.scan.footer_damaged")
            footer_problem = parsed
    records, end, problem = _scan_batches(buf, header.size, area_end, header.stamped)
    garbage_end, valid_after = end, None
    if problem is not None:
        tail = buf[end:area_end].rstrip(b"\x00")
        garbage_end = end + len(tail)
        valid_after = _find_valid_batch(buf, end, area_end, header.stamped)
    return Scan(path, size, header, footer, footer_problem, records, end, problem, garbage_end, valid_after)


def _scan_batches(buf: bytes, offset: int, end: int,
                  stamped: bool) -> tuple[list[Record], int, str | None]:
    records: list[Record] = []
    while offset < end:
        parsed = fmt.parse_batch_header(buf, offset, end)
        if isinstance(parsed, str):
            if parsed == fmt.HEADER_CRC_MISMATCH and flipped_header(buf, offset, end, stamped):
                probe("wal.scan.flipped_header")
                return records, offset, FLIPPED_HEADER
            return records, offset, parsed
        length, kind, data_crc = parsed
        start = offset + fmt.BATCH_HEADER_SIZE
        stop = stored_end(start, length) if stamped else start + length
        if stop > end:
            return records, offset, "batch data extends past the end of the segment"
        data = unstamped(buf, start, stop) if stamped else buf[start:stop]
        if fmt.crc32c(data) != data_crc:
            if stamps_written(buf, start, stop) if stamped else written_whole(buf, offset, stop):
                probe("wal.scan.crc_mismatch_written_whole")
                return records, offset, WRITTEN_WHOLE
            probe("wal.scan.crc_mismatch_unwritten_sector")
            return records, offset, "batch data CRC mismatch"
        try:
            if kind is fmt.BatchKind.ENTRIES:
                record = Record(offset, kind, fmt.decode_entries(data), -1)
            else:
                record = Record(offset, kind, [], fmt.decode_truncate(data))
        except msgspec.DecodeError as e:
            # Both CRCs matched, so these bytes were written like this: not a torn write.
            probe("wal.scan.undecodable_batch")
            return records, offset, f"undecodable batch ({e})"
        records.append(record)
        offset = stop
    return records, offset, None


SECTOR = 512  # a disk writes a sector entirely or not at all; a torn write loses whole sectors
WRITTEN_WHOLE = ("batch data CRC mismatch in a batch written whole (no sector of it reads as "
                 "unwritten)")
STAMP = b"\xff"


def _stamp_offsets(start: int, end: int) -> range:
    """The sector starts in [start, end): where stamps sit in data stored from `start`."""
    return range(-(-start // SECTOR) * SECTOR, end, SECTOR)


def stored_end(start: int, length: int) -> int:
    """Where `length` bytes of batch data stored from file offset `start` end, stamps included
    (format.py): the least end with one stamp at each sector start before it. A stamp is only
    ever written before a data byte, so data ending right at a sector start has none there."""
    end = start + length
    while (grown := start + length + len(_stamp_offsets(start, end))) != end:
        end = grown
    return end


def stamped(batch: bytes, offset: int) -> list[bytes | memoryview]:
    """An encoded batch (header and data) as written at file offset `offset` of a stamped
    segment: the pieces to write, with a stamp at each sector start inside its data."""
    start = offset + fmt.BATCH_HEADER_SIZE
    view = memoryview(batch)
    pieces: list[bytes | memoryview] = [view[: fmt.BATCH_HEADER_SIZE]]
    at = fmt.BATCH_HEADER_SIZE  # the next data byte of `batch` to place
    pos = start  # the file offset it goes to
    for mark in _stamp_offsets(start, stored_end(start, len(batch) - at)):
        take = mark - pos
        if take:
            pieces.append(view[at : at + take])
        pieces.append(STAMP)
        at, pos = at + take, mark + 1
    if at < len(batch):
        pieces.append(view[at:])
    return pieces


def unstamped(buf: bytes, start: int, end: int) -> bytes:
    """Batch data stored in buf[start:end] of a stamped segment, its stamps taken out."""
    marks = _stamp_offsets(start, end)
    if not marks:
        return buf[start:end]
    pieces, prev = [], start
    for mark in marks:
        pieces.append(buf[prev:mark])
        prev = mark + 1
    pieces.append(buf[prev:end])
    return b"".join(pieces)


def stamps_written(buf: bytes, start: int, end: int) -> bool:
    """Whether every sector of batch data stored in buf[start:end] was written: each stamp
    reads non-zero (a flipped stamp is still written; a lost sector reads 0x00). Sectors
    without a stamp hold the batch's header, whose CRC already vouched for them."""
    return all(buf[mark] for mark in _stamp_offsets(start, end))


def is_stamp(header: fmt.SegmentHeader, batch_offset: int, offset: int) -> bool:
    """Whether file offset `offset`, inside the batch at `batch_offset`, holds a stamp."""
    return (header.stamped and offset % SECTOR == 0
            and offset >= batch_offset + fmt.BATCH_HEADER_SIZE)


FLIPPED_HEADER = ("batch header CRC mismatch, one or two bits away from a header whose batch "
                  "data matches its CRC: a batch written whole with bits flipped since")
MAX_HEADER_FLIPS = 2


def flipped_header(buf: bytes, offset: int, end: int, stamped: bool = True) -> bool:
    """Whether the batch header at `offset`, which fails its CRC, is one or two flipped bits
    away from a valid header whose data, right behind it, matches the data CRC: a batch written
    whole and damaged later, which must not pass as a torn write (a torn header's length cannot
    be trusted, so `written_whole` cannot judge it). A torn write loses whole sectors and leaves
    zeros, which no one or two bits turn into a header and data agreeing on two CRCs (a chance
    of about 8,256 in 2**64). Two, because a header already flipped once can be flipped again
    before anyone repairs it: the chaos harness's disk fault did that to a FAILED replica's
    file, and the second flip read as torn and the replica ran again. Both
    searches together are 8,256 header parses, run only on this error path."""
    header = bytearray(buf[offset : offset + fmt.BATCH_HEADER_SIZE])
    if len(header) < fmt.BATCH_HEADER_SIZE:
        return False
    bits = range(fmt.BATCH_HEADER_SIZE * 8)
    for flips in itertools.chain.from_iterable(
            itertools.combinations(bits, k) for k in range(1, MAX_HEADER_FLIPS + 1)):
        for bit in flips:
            header[bit // 8] ^= 1 << (bit % 8)
        parsed = fmt.parse_batch_header(bytes(header), 0, fmt.BATCH_HEADER_SIZE)
        for bit in flips:
            header[bit // 8] ^= 1 << (bit % 8)
        if not isinstance(parsed, str) and _data_matches(buf, offset, end, parsed, stamped):
            return True
    return False


def _data_matches(buf: bytes, offset: int, end: int, parsed: tuple[int, fmt.BatchKind, int],
                  stamped: bool) -> bool:
    """Whether the data after the batch header at `offset` (`parsed`: its length, kind and data
    CRC) lies within `end` and matches its CRC."""
    length, _, data_crc = parsed
    start = offset + fmt.BATCH_HEADER_SIZE
    stop = stored_end(start, length) if stamped else start + length
    data = unstamped(buf, start, stop) if stamped else buf[start:stop]
    return stop <= end and fmt.crc32c(data) == data_crc


def written_whole(buf: bytes, start: int, end: int) -> bool:
    """Version 1 and 2 segments, which have no stamps: whether every sector of buf[start:end]
    looks written, which zeros in the data can fool. A crash tears an append into
    zero-filled or preallocated space at sector granularity (the unit disks write atomically,
    as TigerBeetle's and our SimDisk's model assumes): it loses the batch's last sectors, or,
    pages persisted out of order, a sector inside it, and an unwritten sector reads as zeros.
    A batch in which no sector-aligned piece is all zeros was written entirely, so a CRC
    mismatch in it is corruption (a bit flip), not a torn write, even as the newest batch."""
    if end <= start or end > len(buf):
        return False
    zero = bytes(SECTOR)
    last = max(start, (end - 1) // SECTOR * SECTOR)
    if not any(buf[last:end]):
        return False
    first = -(-start // SECTOR) * SECTOR
    return all(buf[o : o + SECTOR] != zero for o in range(first, end - SECTOR + 1, SECTOR))


def _find_valid_batch(buf: bytes, start: int, end: int, stamped: bool) -> int | None:
    """Offset of the first intact batch (both CRCs good) at or after `start`, if any: the
    difference between a torn tail, after which nothing intact can follow, and corruption."""
    for m in _KIND_FIELD.finditer(buf, start + 4, end):
        offset = m.start() - 4
        parsed = fmt.parse_batch_header(buf, offset, end)
        if not isinstance(parsed, str) and _data_matches(buf, offset, end, parsed, stamped):
            return offset
    return None


def entry_stats(records: list[Record]) -> fmt.Footer:
    """The footer a segment holding `records` must have."""
    indexes = [e.index for r in records for e in r.entries]
    if not indexes:
        return fmt.Footer(0, -1, -1)
    return fmt.Footer(len(indexes), min(indexes), max(indexes))


def finish_file(path: str, end: int, footer: fmt.Footer, disk: Disk = REAL) -> None:
    """Close a segment that is not open for writing (a recovered tail): its bytes up to `end`
    written again and synced, then the footer at `end`, synced, then the rest cut off
    (_write_footer).

    Written again because what bootstrap read may be only in the page cache: after an fsync
    fails with EIO, Linux marks the pages it could not write clean and keeps them, so a process
    restarted without a power loss reads batches that were never durable, and a later fsync
    succeeds without writing them. Trusted, the replica acknowledged (and counted toward
    commits) entries a power loss then took; written again, they are dirty and the sync either
    makes them durable or fails loudly."""
    fd = disk.open(path)
    try:
        if end:
            pwrite_all(disk, fd, [disk.read(path, 0, end)], 0)
            disk.fdatasync(fd)
        _write_footer(disk, fd, end, footer)
    finally:
        disk.close(fd)


def _write_footer(disk: Disk, fd: Any, end: int, footer: fmt.Footer) -> None:
    """The footer synced first, and only then the preallocated rest cut off: a file shorter
    than its preallocation and without a footer is then never a crash's doing (format.py). A
    crash between the two leaves the footer followed by zeros, read as a torn tail of it."""
    pwrite_all(disk, fd, [fmt.encode_footer(footer)], end)
    disk.fdatasync(fd)
    disk.ftruncate(fd, end + fmt.FOOTER_SIZE)
    disk.fsync(fd)


def restore_preallocation(path: str, disk: Disk = REAL) -> None:
    """Give a segment received by tablet copy without its footer (the source's newest, sent up
    to its synced end) the length its header says it was made, so that it reads as the
    unfinished segment it is and not as one cut short (format.py). A finished segment, one not
    preallocated, and one whose header is unreadable (bootstrap refuses that) are left alone."""
    size = disk.size(path)
    try:
        # a header is at most 32 + 65,535 (the tablet id) + 4 bytes
        header = fmt.parse_segment_header(disk.read(path, 0, min(size, 1 << 17)))
    except ValueError:
        return
    if not header.prealloc or size >= header.prealloc:
        return
    if size - header.size >= fmt.FOOTER_SIZE and isinstance(
            fmt.parse_footer(disk.read(path, size - fmt.FOOTER_SIZE, fmt.FOOTER_SIZE)), fmt.Footer):
        return
    fd = disk.open(path)
    try:
        probe("wal.copy.preallocation_restored")
        disk.ftruncate(fd, header.prealloc)
        disk.fsync(fd)
    finally:
        disk.close(fd)


IOV_MAX = os.sysconf("SC_IOV_MAX")


class WritableSegment:
    """The segment the appender writes. Not thread-safe: one owner at a time (the
    preallocation thread builds it, then the appender thread takes it over)."""

    def __init__(self, directory: str, tablet_id: str, seq: int, prealloc_bytes: int,
                 disk: Disk = REAL, base: int = 0) -> None:
        """Create the file under its temporary name: preallocated, header written, synced.
        `base`: the last index written to the segments before it (format.py)."""
        self.disk = disk
        self.directory = directory
        self.seq = seq
        self.path = os.path.join(directory, TMP_PREFIX + segment_name(seq)[len(SEGMENT_PREFIX) :])
        self.prealloc_bytes = prealloc_bytes
        self.fd = disk.open(self.path, create=True)
        self.open = True  # until `close`: the number is someone else's after it
        try:
            if prealloc_bytes:
                disk.fallocate(self.fd, 0, prealloc_bytes)
            # The header says how long the file is made before its first batch, only if it
            # really is (a disk model may not preallocate): a reader takes a shorter file
            # without a footer for damage (format.py).
            made = prealloc_bytes and disk.size(self.path) >= prealloc_bytes
            durable_len = prealloc_bytes if made else 0
            self.offset = pwrite_all(disk, self.fd,
                                     [fmt.encode_segment_header(tablet_id, seq, durable_len,
                                                                base)], 0)
            # (end, last index) of what is written and (with fsync on) synced: readers stop
            # there. One attribute, so a reader in another thread sees the two agree.
            self.readable: tuple[int, int] = (self.offset, -1)
            disk.fsync(self.fd)
        except BaseException:
            disk.close(self.fd)
            disk.unlink(self.path)
            raise
        self.num_entries, self.min_index, self.max_index = 0, -1, -1
        self.base = base

    def activate(self) -> None:
        """Give the file its real name: from now on bootstrap reads it."""
        final = os.path.join(self.directory, segment_name(self.seq))
        self.disk.replace(self.path, final)
        self.disk.fsync_dir(self.directory)
        self.path = final

    def write(self, batches: list[bytes]) -> None:
        """Write encoded `batches` at the end of the segment, stamped (format.py)."""
        bufs: list[bytes | memoryview] = []
        at = self.offset
        for batch in batches:
            pieces = stamped(batch, at)
            at += sum(len(p) for p in pieces)
            bufs += pieces
        nbytes = at - self.offset
        if len(bufs) > IOV_MAX:
            step = len(bufs) // IOV_MAX + 1
            bufs = [b"".join(bufs[i : i + step]) for i in range(0, len(bufs), step)]
        # Short: a signal or full disk.
        if self.disk.pwritev(self.fd, bufs, self.offset) != nbytes:
            probe("wal.write.short_write_completed")
            pwrite_all(self.disk, self.fd, [b"".join(bufs)], self.offset)
        self.offset = at

    def count(self, num_entries: int, lo: int, hi: int) -> None:
        if num_entries:
            self.min_index = lo if self.num_entries == 0 else min(self.min_index, lo)
            self.max_index = max(self.max_index, hi)
            self.num_entries += num_entries

    def sync(self) -> None:
        """fdatasync inside the preallocated region (no metadata to flush), fsync beyond it."""
        if self.offset <= self.prealloc_bytes:
            self.disk.fdatasync(self.fd)
        else:
            self.disk.fsync(self.fd)

    def footer(self) -> fmt.Footer:
        return fmt.Footer(self.num_entries, self.min_index, self.max_index)

    def finish(self) -> None:
        """Clean close: the footer after the written length, synced, then the rest cut off."""
        try:
            _write_footer(self.disk, self.fd, self.offset, self.footer())
        finally:
            self.close()

    def close(self) -> None:
        """Close the file once. The number is the process's to give out again as soon as it is
        closed, to another tablet's segment or a metadata file: a second close would close
        that file, and a write through the old number would land in it."""
        if self.open:
            self.open = False
            self.disk.close(self.fd)

    def discard(self) -> None:
        """Drop a segment that was never activated."""
        self.close()
        self.disk.unlink(self.path)
