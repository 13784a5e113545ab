"""WAL errors, in the engine's hierarchy (node.errors). `WalCorruption` always names the file
and byte offset, because an operator must be able to find the exact bytes that failed."""

from __future__ import annotations

from node.errors import CorruptionError, TesseraError


class WalError(TesseraError):
    """Base of every error the write-ahead log raises."""


class WalCorruption(WalError, CorruptionError):
    """The log's bytes are not what was written (and not a torn tail): never skipped."""

    offset: int


class WalClosed(WalError):
    """The log was closed, or a write/sync failed earlier (a failed fsync cannot be retried)."""
