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
    """CRC32C of every row's canonical encoding, in key order."""
    crc = 0
    for _, row in _rows(data):
        crc = crc32c(row, crc)
    return crc


def row_hashes(data: dict[str, Any]) -> list[tuple[str, int]]:
    """(key, CRC32C of its row), in key order."""
    return [(key, crc32c(row)) for key, row in _rows(data)]
