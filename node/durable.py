"""Atomic, durable, self-verifying small files (consensus metadata, superblocks, snapshots).

A crash leaves either the old file or the new one, never a mix (temp file in the same directory,
fsync, rename, fsync the directory). Every file is wrapped in a checksummed envelope so that a
reader detects any flipped byte, truncation or appended garbage and refuses with a
`CorruptionError` naming the file, instead of serving state that was never written.

Envelope (little-endian), 24-byte header then the payload:
    magic b"TSDF" | version u16 | reserved u16 | payload length u64 | payload CRC32C u32 |
    header CRC32C u32 (over the 20 bytes before it)
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path
from typing import TypeVar

import crc32c
import msgspec

from node.disk import REAL, Disk, pwrite_all
from node.errors import CorruptionError
from node.probes import probe

MAGIC = b"TSDF"
VERSION = 1
_PREFIX = struct.Struct("<4sHHQI")  # covered by the header CRC
HEADER_SIZE = _PREFIX.size + 4
TEMP_SUFFIX = ".tmp"

T = TypeVar("T")
_encoder = msgspec.msgpack.Encoder()


def encode_envelope(payload: bytes) -> bytes:
    prefix = _PREFIX.pack(MAGIC, VERSION, 0, len(payload), crc32c.crc32c(payload))
    return prefix + struct.pack("<I", crc32c.crc32c(prefix)) + payload


def envelope_end(data: bytes, path: str | os.PathLike) -> tuple[int, int]:
    """From a file's first HEADER_SIZE bytes (or more): the length the whole file must have and
    its payload's CRC. A damaged header raises CorruptionError naming `path`."""
    if len(data) < HEADER_SIZE:
        probe("durable.corrupt.truncated_header")
        raise CorruptionError(
            path, len(data), f"truncated: {len(data)} bytes, header needs {HEADER_SIZE}"
        )
    magic, version, _reserved, length, payload_crc = _PREFIX.unpack_from(data)
    if magic != MAGIC:
        probe("durable.corrupt.bad_magic")
        raise CorruptionError(path, 0, f"bad magic {magic!r}, expected {MAGIC!r}")
    (header_crc,) = struct.unpack_from("<I", data, _PREFIX.size)
    if crc32c.crc32c(data[: _PREFIX.size]) != header_crc:
        probe("durable.corrupt.header_checksum")
        raise CorruptionError(path, 0, "header checksum mismatch")
    if version != VERSION:
        raise CorruptionError(path, 4, f"unsupported envelope version {version}")
    return HEADER_SIZE + length, payload_crc


def decode_envelope(data: bytes, path: str | os.PathLike) -> memoryview:
    """The payload of a whole file's bytes, as a view (a snapshot's payload is the size of the
    tablet: no copy); any damage raises CorruptionError naming `path`."""
    end, payload_crc = envelope_end(data, path)
    if len(data) < end:
        probe("durable.corrupt.truncated_payload")
        raise CorruptionError(path, len(data), f"truncated: {len(data)} bytes, envelope says {end}")
    if len(data) > end:
        raise CorruptionError(path, end, f"{len(data) - end} unexpected trailing bytes")
    payload = memoryview(data)[HEADER_SIZE:]
    if crc32c.crc32c(payload) != payload_crc:
        probe("durable.corrupt.payload_checksum")
        raise CorruptionError(path, HEADER_SIZE, "payload checksum mismatch")
    return payload


def ensure_dir(directory: str | os.PathLike, disk: Disk = REAL) -> Path:
    """mkdir -p whose entries survive a crash: each created level's parent is fsynced, and so is
    the parent of a directory found already there. That one may be in the page cache only: its
    mkdir's directory sync failed with EIO (Linux keeps the entry, and a later sync of a
    directory left clean does not write it), and a process restarted without a power loss sees
    it. Trusted, a WAL or a snapshot written and synced inside it was lost whole with it at the
    next power loss, while the replica had acknowledged entries from it."""
    directory = Path(directory)
    if disk.isdir(directory):
        if directory.parent != directory:
            disk.fsync_dir(directory.parent)
        return directory
    ensure_dir(directory.parent, disk)
    try:
        disk.mkdir(directory)
    except FileExistsError:
        pass  # another thread of this process made it between our check and mkdir
    disk.fsync_dir(directory.parent)
    return directory


def write_atomic(path: str | os.PathLike, payload: bytes, disk: Disk = REAL) -> None:
    """Replace `path` with an enveloped `payload`; readers see the old or the new file, whole."""
    path = Path(path)
    fd, tmp = disk.mkstemp(path.parent, f".{path.name}.", TEMP_SUFFIX)
    try:
        try:
            pwrite_all(disk, fd, [encode_envelope(payload)], 0)
            disk.fsync(fd)
        finally:
            disk.close(fd)
        disk.replace(tmp, path)
    except BaseException:
        probe("durable.write.failed_temp_removed")
        with contextlib.suppress(FileNotFoundError):
            disk.unlink(tmp)
        raise
    disk.fsync_dir(path.parent)


def read_verified(path: str | os.PathLike, disk: Disk = REAL) -> memoryview:
    """The payload written by write_atomic; FileNotFoundError if absent, CorruptionError if damaged."""
    return decode_envelope(disk.read(path), path)


def save_struct(path: str | os.PathLike, value: object, disk: Disk = REAL) -> None:
    write_atomic(path, _encoder.encode(value), disk)


def load_struct(path: str | os.PathLike, type_: type[T], disk: Disk = REAL) -> T:
    """Decode a verified payload; a payload of the wrong shape is corruption too (misplaced file)."""
    payload = read_verified(path, disk)
    try:
        return msgspec.msgpack.decode(payload, type=type_)
    except msgspec.DecodeError as e:  # ValidationError is a DecodeError
        probe("durable.corrupt.wrong_shape")
        raise CorruptionError(
            path, HEADER_SIZE, f"payload is not a valid {type_.__name__}: {e}"
        ) from e


def is_temp_file(name: str) -> bool:
    """Leftover of a write_atomic interrupted by a crash: never a valid file, safe to delete."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)
