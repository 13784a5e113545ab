"""The one log-entry type shared by the Raft core (which produces entries) and the WAL (which
stores them), so neither has to translate the other's representation."""

from __future__ import annotations

import enum

import msgspec


class EntryType(enum.IntEnum):
    REPLICATE = 1  # a client operation for the tablet's state machine
    COMMIT = 2  # marker: entries up to `index` are known committed (Kudu's COMMIT message)
    CONFIG_CHANGE = 3  # a new Raft configuration, effective when appended
    NO_OP = 4  # appended by a new leader to commit entries of earlier terms


# The most an Entry's encoding takes beside its payload's bytes: an array header, term and
# index (9 bytes each at most), the type and the payload's bin header (5). Byte budgets of
# AppendEntries count each entry as its payload plus this.
ENTRY_OVERHEAD = 32


class Entry(msgspec.Struct, frozen=True, array_like=True):
    term: int
    index: int
    type: EntryType
    payload: bytes = b""
