"""A replica's rows as checksums, for comparing replicas (Kudu's ksck --checksum_scan).

Replicas that applied the same log must hold the same rows, so the checksum at one applied index
must match across them. It must therefore not depend on insertion order or on how a value's maps
happen to be ordered: rows are taken in key order and encoded canonically (msgpack with sorted
map keys), and each row's CRC32C also names the row when two replicas differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec
from crc32c import crc32c

_encoder = msgspec.msgpack.Encoder(order="sorted")


def _rows(data: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    for key in sorted(data):
        yield key, _encoder.encode([key, data[key]])


def table_checksum(data: dict[str, Any]) -> int:
    """CRC32C of every row's canonical encoding, in key order. Computed as one encoding of the
    list of rows, less its array header: msgpack encodes an array as its header and then each
    element as alone, and a CRC over concatenated bytes is the CRC chained row by row, so the
    value is the same as row by row, for a fraction of the calls (the simulator checksums
    every replica five times a virtual second)."""
    rows = [[key, data[key]] for key in sorted(data)]
    return crc32c(memoryview(_encoder.encode(rows))[_array_header_bytes(len(rows)):])


def _array_header_bytes(n: int) -> int:
    """The size of a msgpack array header for n elements: fixarray, array 16, array 32."""
    return 1 if n < 16 else 3 if n < 1 << 16 else 5


def row_hashes(data: dict[str, Any]) -> list[tuple[str, int]]:
    """(key, CRC32C of its row), in key order."""
    return [(key, crc32c(row)) for key, row in _rows(data)]
