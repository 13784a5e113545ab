"""On-disk format of a WAL segment (little-endian throughout).

    segment  = header batch* [footer]
    header   = magic "TSRWALSG" | version u16 | tablet-id length u16 | sequence u64
               | preallocated length u64 | log's last index before it u64
               | tablet id (utf-8) | crc32c(all of the above) u32
    batch    = data length u32 | kind u16 | reserved u16 (0) | crc32c(data) u32
               | crc32c(the 12 bytes before) u32 | data
    footer   = magic "TSRWALFT" | entry count u64 | min index i64 | max index i64
               | crc32c(all of the above) u32                      (last 36 bytes of the file)

From version 3 on, a batch's data is stored with sector stamps: before each data byte that
would land at a file offset that is a multiple of 512 (a sector's first byte), one stamp byte
0xFF is written, and skipped again on reading. The header's length and data CRC are of the
data without stamps. A torn write loses whole sectors, which read as zeros, so a stamp reading
0x00 marks a sector never written; no bit flip turns 0xFF into 0x00. A batch whose data CRC
fails while every stamp (and its header, which vouches for the sectors it shares) reads as
written was therefore written whole and damaged since: corruption, however many zeros its data
holds (node.wal.segment). Versions 1 and 2 have no stamps and are judged as before.

A batch of kind ENTRIES holds a msgpack list of `Entry`; a batch of kind TRUNCATE holds one
msgpack int, `after_index`: every entry above it, earlier in the log, is replaced by what follows.
The header CRC lets a reader trust a batch's length before it reads the data, so a torn length
can never make it skip over good batches. Zeros never form a valid batch header (the CRC of
zeros is not zero), which is how the preallocated, unwritten end of a segment is recognised.

The preallocated length (0: not preallocated) is what the file's size was made durable at
before the segment got its name. A crash never shrinks a file, and finishing a segment cuts it
short only once its footer is synced, so a segment with no footer that is shorter than that was
cut short by something else: damage, never a torn write (reader.judge_segment). Version 1
headers have no such field; their segments are read as before.

The log's last index before the segment (version 4 on; 0: none, or not recorded) is the last
index written to the segments before it when the segment was made. Log GC deletes a segment
only once every index it holds is in a snapshot, so the oldest segment left says how far the
snapshot must reach: entries between the snapshot and that index were in segments that were
lost, not collected. Without it a replica whose older segment went missing while its newest
held no entries yet (as after a restart) booted as if it had never logged anything.
"""

from __future__ import annotations

import enum
import struct

import msgspec
from crc32c import crc32c as crc32c  # re-exported: segment.py calls fmt.crc32c

from node.entry import Entry

FORMAT_VERSION = 4
# 1: no preallocated length in the header; 3: sector stamps; 4: the last index before it
READABLE_VERSIONS = (1, 2, 3, 4)
STAMPED_VERSION = 3  # the first version whose batch data carries sector stamps
BASE_VERSION = 4  # the first version whose header holds the log's last index before it
SEGMENT_MAGIC = b"TSRWALSG"
FOOTER_MAGIC = b"TSRWALFT"

_SEGMENT_HEADER_FIXED = struct.Struct("<8sHHQ")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")
BATCH_HEADER = struct.Struct("<IHHII")
_BATCH_HEADER_BODY = struct.Struct("<IHHI")
FOOTER = struct.Struct("<8sQqqI")

BATCH_HEADER_SIZE = BATCH_HEADER.size
FOOTER_SIZE = FOOTER.size
MAX_BATCH_DATA = 256 << 20  # a header claiming more is corrupt even if its CRC matches
HEADER_CRC_MISMATCH = "batch header CRC mismatch"


class BatchKind(enum.IntEnum):
    ENTRIES = 1
    TRUNCATE = 2


_encode = msgspec.msgpack.Encoder().encode
_decode_entries = msgspec.msgpack.Decoder(list[Entry]).decode
_decode_int = msgspec.msgpack.Decoder(int).decode
_pack_body = _BATCH_HEADER_BODY.pack
_pack_u32 = _U32.pack


def encode_segment_header(tablet_id: str, seq: int, prealloc: int = 0, base: int = 0) -> bytes:
    tid = tablet_id.encode()
    base_field = _U64.pack(base) if FORMAT_VERSION >= BASE_VERSION else b""  # (tests write older)
    body = (_SEGMENT_HEADER_FIXED.pack(SEGMENT_MAGIC, FORMAT_VERSION, len(tid), seq)
            + _U64.pack(prealloc) + base_field + tid)
    return body + _pack_u32(crc32c(body))


class SegmentHeader(msgspec.Struct, frozen=True):
    tablet_id: str
    seq: int
    size: int  # bytes, where the first batch starts
    prealloc: int = 0  # the file's durable length before its first batch (0: not preallocated)
    version: int = FORMAT_VERSION
    base: int = 0  # the log's last index when the segment was made (0: none, or before version 4)

    @property
    def stamped(self) -> bool:
        """Whether batch data in this segment carries sector stamps."""
        return self.version >= STAMPED_VERSION


def parse_segment_header(buf: bytes) -> SegmentHeader:
    """Raises ValueError with the reason; the caller adds file and offset."""
    fixed = _SEGMENT_HEADER_FIXED.size
    if len(buf) < fixed:
        raise ValueError("segment header truncated")
    magic, version, tid_len, seq = _SEGMENT_HEADER_FIXED.unpack_from(buf)
    if magic != SEGMENT_MAGIC:
        raise ValueError(f"bad segment magic {magic!r}")
    if version not in READABLE_VERSIONS:
        raise ValueError(f"unknown format version {version} (this build reads "
                         f"{', '.join(map(str, READABLE_VERSIONS))})")
    fields = [0, 0]  # prealloc (version 2 on), base (version 4 on)
    for i, since in enumerate((2, BASE_VERSION)):
        if version >= since:
            if len(buf) < fixed + _U64.size:
                raise ValueError("segment header truncated")
            (fields[i],) = _U64.unpack_from(buf, fixed)
            fixed += _U64.size
    end = fixed + tid_len
    if len(buf) < end + 4:
        raise ValueError("segment header truncated")
    if _U32.unpack_from(buf, end)[0] != crc32c(buf[:end]):
        raise ValueError("segment header CRC mismatch")
    return SegmentHeader(buf[fixed:end].decode(), seq, end + 4, fields[0], version, fields[1])


def encode_batch(kind: BatchKind, data: bytes) -> bytes:
    """Header and data of one batch, ready to write."""
    body = _pack_body(len(data), kind, 0, crc32c(data))
    return body + _pack_u32(crc32c(body)) + data


def encode_entries(entries: list[Entry]) -> bytes:
    return encode_batch(BatchKind.ENTRIES, _encode(entries))


def encode_truncate(after_index: int) -> bytes:
    return encode_batch(BatchKind.TRUNCATE, _encode(after_index))


def parse_batch_header(buf: bytes, offset: int, end: int) -> tuple[int, BatchKind, int] | str:
    """(data length, kind, data crc), or the reason this is not a valid batch header."""
    if end - offset < BATCH_HEADER_SIZE:
        return "incomplete batch header"
    length, kind, reserved, data_crc, header_crc = BATCH_HEADER.unpack_from(buf, offset)
    if header_crc != crc32c(buf[offset : offset + BATCH_HEADER_SIZE - 4]):
        return HEADER_CRC_MISMATCH
    if reserved != 0 or kind not in (BatchKind.ENTRIES, BatchKind.TRUNCATE):
        return f"unknown batch kind {kind}/{reserved}"
    if length > MAX_BATCH_DATA:
        return f"batch length {length} too large"
    return length, BatchKind(kind), data_crc


def decode_entries(data: bytes) -> list[Entry]:
    return _decode_entries(data)


def decode_truncate(data: bytes) -> int:
    return _decode_int(data)


class Footer(msgspec.Struct, frozen=True):
    num_entries: int
    min_index: int  # -1 when the segment holds no entries
    max_index: int


def encode_footer(f: Footer) -> bytes:
    body = FOOTER.pack(FOOTER_MAGIC, f.num_entries, f.min_index, f.max_index, 0)[:-4]
    return body + _pack_u32(crc32c(body))


def parse_footer(buf: bytes) -> Footer | str | None:
    """None when the bytes are not a footer at all; a reason string when they are a footer
    (magic present) that fails its CRC."""
    if len(buf) != FOOTER_SIZE or not buf.startswith(FOOTER_MAGIC):
        return None
    _, count, lo, hi, crc = FOOTER.unpack(buf)
    if crc != crc32c(buf[:-4]):
        return "footer CRC mismatch"
    return Footer(count, lo, hi)
