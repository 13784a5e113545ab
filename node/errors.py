"""The engine's error hierarchy: callers catch by kind (corruption is never retried or skipped)."""

from __future__ import annotations


class TesseraError(Exception):
    """Base of every error the engine raises on purpose."""


class CorruptionError(TesseraError):
    """Bytes on disk are not what was written: the owner must refuse to serve, never guess."""

    def __init__(self, path: str, offset: int | None, reason: str):
        self.path, self.offset, self.reason = str(path), offset, reason
        where = self.path if offset is None else f"{self.path} at offset {offset}"
        super().__init__(f"corruption in {where}: {reason}")


class OpFailed(TesseraError):
    """The operation definitely did not take effect (a history records it as `fail`)."""


class TooLarge(OpFailed):
    """Refused unsent (over the frame) or unproposed (over what one entry may hold): nothing
    applied, and no replica would take it; fewer ops at a time may fit."""


class OpUnknown(TesseraError):
    """The operation may or may not have taken effect (a history records it as `info`)."""


class ReplicaError(TesseraError):
    """A request this replica cannot serve now; `retryable` says if trying elsewhere may work,
    `leader` is the current leader's UUID when known."""

    def __init__(self, message: str, *, leader: str | None = None, maybe_applied: bool = False):
        super().__init__(message)
        self.leader = leader
        self.maybe_applied = maybe_applied
