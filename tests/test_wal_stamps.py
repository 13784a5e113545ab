"""Sector stamps (node/wal/format.py, version 3): a bit flipped in a synced newest batch is
corruption whatever its bytes look like, and a torn write is still cut.

Before stamps the reader took any all-zero sector of the newest batch, or an all-zero last
fragment, for unwritten space: a batch carrying a zero-filled value, or one ending a byte past a
sector start on a timestamp's zero low byte, was cut as torn after a single flip, acknowledged
entries and all. The same flips on a version 2 segment show that reader's
mistake still, so the test can fail.
"""

from __future__ import annotations

import os

import pytest

from node.entry import Entry, EntryType
from node.wal import format as fmt
from node.wal.errors import WalCorruption
from node.wal.reader import read_log
from node.wal.segment import SECTOR, is_stamp, segment_name, stamped

TABLET = "t" * 32
ZEROS = bytes(1500)  # a zero-filled value: whole sectors of zeros inside the batch
ORDINARY = bytes(range(256)) * 3
UNWRITTEN = bytes(4 * SECTOR)  # the preallocated space after the newest batch


def segment(filler: int, value: bytes, version: int = fmt.FORMAT_VERSION) -> tuple[bytes, int]:
    """An unfinished segment: a filler batch of `filler` payload bytes, then the newest batch
    (two entries, the last carrying `value`), then unwritten zeros. (bytes, newest offset)."""
    header = fmt.encode_segment_header(TABLET, 1)
    if version != fmt.FORMAT_VERSION:  # an older writer: its header, no stamps
        body = fmt._SEGMENT_HEADER_FIXED.pack(fmt.SEGMENT_MAGIC, version, len(TABLET), 1)
        body += fmt._U64.pack(0) + TABLET.encode()
        header = body + fmt._pack_u32(fmt.crc32c(body))
    out = bytearray(header)
    batches = [[Entry(1, 1, EntryType.REPLICATE, b"f" * filler)],
               [Entry(1, 2, EntryType.REPLICATE, b"x"), Entry(1, 3, EntryType.REPLICATE, value)]]
    newest = 0
    for entries in batches:
        newest = len(out)
        batch = fmt.encode_entries(entries)
        out += b"".join(stamped(batch, newest)) if version >= fmt.STAMPED_VERSION else batch
    return bytes(out) + UNWRITTEN, newest


def newest_end(data: bytes) -> int:
    return len(data) - len(UNWRITTEN)


def fillers_for_every_end(value: bytes) -> dict[int, int]:
    """A filler size for each residue mod 512 the newest batch can end at."""
    found: dict[int, int] = {}
    for filler in range(2 * SECTOR):
        found.setdefault(newest_end(segment(filler, value)[0]) % SECTOR, filler)
        if len(found) == SECTOR:
            break
    return found


def judge(tmp_path, data: bytes) -> int | None:
    """Entries recovered from `data` as the newest segment, or None if refused as corrupt."""
    path = os.path.join(tmp_path, segment_name(1))
    with open(path, "wb") as f:
        f.write(data)
    try:
        return len(read_log(str(tmp_path), TABLET).entries)
    except WalCorruption:
        return None


def entries(tmp_path, data: bytes) -> list[Entry]:
    path = os.path.join(tmp_path, segment_name(1))
    with open(path, "wb") as f:
        f.write(data)
    return read_log(str(tmp_path), TABLET).entries


def zeros(data: bytes, start: int, lo: int, hi: int) -> bool:
    """Whether data[lo:hi] held only zeros apart from stamps: losing it changes no entry."""
    header = _header(data)
    return not any(data[o] for o in range(lo, hi) if not is_stamp(header, start, o))


def flipped(data: bytes, offset: int, bit: int) -> bytes:
    b = bytearray(data)
    b[offset] ^= 1 << bit
    return bytes(b)


@pytest.mark.parametrize("value", [ZEROS, ORDINARY], ids=["zero-filled", "ordinary"])
def test_a_flip_at_every_offset_of_a_synced_newest_batch_is_never_cut_as_torn(tmp_path, value):
    for filler in (0, 1, 7, 300, 511):
        data, start = segment(filler, value)
        assert judge(tmp_path, data) == 3
        for offset in range(start, newest_end(data)):
            got = judge(tmp_path, flipped(data, offset, offset % 8))
            # refused, or (a stamp flipped: no data changed) everything kept
            assert got is None or (got == 3 and is_stamp(_header(data), start, offset)), \
                (filler, offset, got)


@pytest.mark.parametrize("value", [ZEROS, ORDINARY], ids=["zero-filled", "ordinary"])
def test_batches_ending_at_every_offset_mod_512_refuse_a_flip_in_their_last_bytes(tmp_path, value):
    """The last fragment of a sector is where a lone zero byte (a timestamp's low byte) sat:
    the last three bytes, the first and the middle data byte, at every alignment."""
    for residue, filler in sorted(fillers_for_every_end(value).items()):
        data, start = segment(filler, value)
        end = newest_end(data)
        for offset in {end - 1, end - 2, end - 3, start + fmt.BATCH_HEADER_SIZE, (start + end) // 2}:
            if is_stamp(_header(data), start, offset):
                continue
            assert judge(tmp_path, flipped(data, offset, 0)) is None, (residue, offset)


@pytest.mark.parametrize("value", [ZEROS, ORDINARY], ids=["zero-filled", "ordinary"])
def test_a_torn_write_losing_its_tail_at_every_sector_boundary_is_still_cut(tmp_path, value):
    for filler in (0, 1, 300, 511):
        data, start = segment(filler, value)
        end = newest_end(data)
        first = -(-(start + 1) // SECTOR) * SECTOR  # the header's first sector is written
        whole = entries(tmp_path, data)
        for lost in range(first, end, SECTOR):
            torn = data[:lost] + bytes(len(data) - lost)
            # the filler batch alone; or all, where the lost sectors held only zeros and a stamp
            got = entries(tmp_path, torn)
            assert got == whole[:1] or (got == whole and zeros(data, start, lost, end)), (filler, lost)
        for lost in range(first, end - SECTOR, SECTOR):  # one sector inside, out of order
            hole = data[:lost] + bytes(SECTOR) + data[lost + SECTOR:]
            got = entries(tmp_path, hole)
            assert got == whole[:1] or (got == whole and zeros(data, start, lost, lost + SECTOR)), \
                (filler, lost)


def test_a_version_2_segment_still_reads_and_shows_the_zero_sector_mistake(tmp_path):
    """Old segments stay readable, judged as before: a flip next to a zero sector is cut as
    torn there, which is what the stamps end."""
    data, start = segment(0, ZEROS, version=2)
    assert judge(tmp_path, data) == 3
    assert judge(tmp_path, flipped(data, start + fmt.BATCH_HEADER_SIZE + 3, 0)) == 1
    stamped_data, stamped_start = segment(0, ZEROS)
    assert judge(tmp_path, flipped(stamped_data, stamped_start + fmt.BATCH_HEADER_SIZE + 3, 0)) is None


def _header(data: bytes) -> fmt.SegmentHeader:
    return fmt.parse_segment_header(data)
