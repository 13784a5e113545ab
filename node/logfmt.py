"""Operator log lines. Everything about one replica carries Kudu's `T <tablet> P <uuid>: ` prefix,
so one grep follows a tablet across servers. A replica that can no longer be trusted is logged
at ERROR behind one of three marker words, which log checkers grep for: keep them exact."""

from __future__ import annotations

import logging

from node.consensus import SafetyError
from node.errors import CorruptionError

SAFETY = "SAFETY:"  # a Raft or state-machine invariant was violated
CORRUPTION = "CORRUPTION:"  # bytes on disk are not what was written
FAILED = "FAILED:"  # a replica stopped serving for good; its cause follows


class TabletLog(logging.LoggerAdapter):
    """A logger whose every line starts with `T <tablet> P <uuid>: `."""

    def __init__(self, logger: logging.Logger, tablet_id: str, uuid: str):
        super().__init__(logger, {})
        self.prefix = f"T {tablet_id} P {uuid}: "

    def process(self, msg, kwargs):
        return self.prefix + str(msg), kwargs


def corruption(e: CorruptionError) -> str:
    """`CORRUPTION: <file> at offset <n>: <reason>` (no offset when the whole file is bad)."""
    where = e.path if e.offset is None else f"{e.path} at offset {e.offset}"
    return f"{CORRUPTION} {where}: {e.reason}"


def log_failure(log: logging.Logger | logging.LoggerAdapter, what: str, e: BaseException) -> str:
    """Log a replica entering FAILED because of `e`, with the marker of its kind; returns the
    cause as shown in status. Only an unexpected error carries a traceback: a safety
    violation's too, as its stack is what explains it."""
    cause = f"{type(e).__name__}: {e}"
    if isinstance(e, SafetyError):
        log.error("%s %s", SAFETY, e, exc_info=e)
    elif isinstance(e, CorruptionError):
        log.error("%s", corruption(e))
    else:
        log.error("%s %s: %s", FAILED, what, cause, exc_info=e)
        return cause
    log.error("%s %s: %s", FAILED, what, cause)
    return cause
