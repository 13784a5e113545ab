"""The engine's error hierarchy: callers catch by kind (corruption is never retried or skipped)."""

from __future__ import annotations

import errno


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


class WrongReply(OpUnknown):
    """A reply that answers some other request than the op's own (reports.checkers.replies): a
    transaction's micro-ops that differ from the invocation, or a write's reply tied to
    another op or seq. The op's effect is unknown, and its history must say so, with `reply`."""

    def __init__(self, reply: object):
        super().__init__(f"the reply does not answer the invocation: {reply!r}")
        self.reply = reply


class ReplicaError(TesseraError):
    """A request this replica cannot serve now; `retryable` says if trying elsewhere may work,
    `leader` is the current leader's UUID when known."""

    def __init__(self, message: str, *, leader: str | None = None, maybe_applied: bool = False):
        super().__init__(message)
        self.leader = leader
        self.maybe_applied = maybe_applied


def is_disk_failure(e: BaseException) -> bool:
    """A failing or full disk's error (EIO, ENOSPC, EDQUOT, a read-only file system): the
    machine's, which a replica meets by failing or retrying, not a bug of the engine's."""
    return isinstance(e, OSError) and e.errno in (errno.EIO, errno.ENOSPC, errno.EDQUOT,
                                                   errno.EROFS)
