"""WAL errors. `WalCorruption` always names the file and byte offset, because an operator
must be able to find (and keep, for a post-mortem) the exact bytes that failed."""

from __future__ import annotations


class WalError(Exception):
    """Base of every error the write-ahead log raises."""


class WalCorruption(WalError):
    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class WalClosed(WalError):
    """The log was closed, or a write/sync failed earlier (a failed fsync cannot be retried)."""
