"""RPC error codes and the one exception type callers catch."""

from __future__ import annotations

import enum
import functools

from node.errors import TesseraError


class ErrorCode(enum.IntEnum):
    OK = 0
    MALFORMED = 1  # frame or envelope could not be decoded
    UNSUPPORTED_VERSION = 2
    TOO_LARGE = 3
    NO_SUCH_METHOD = 4
    INVALID_REQUEST = 5  # body did not match the method's schema
    WRONG_SERVER_UUID = 6
    DEADLINE_EXCEEDED = 7
    SERVER_BUSY = 8
    REMOTE_ERROR = 9  # the handler failed unexpectedly
    NETWORK = 10  # connection refused, reset or closed
    SHUTTING_DOWN = 11
    NOT_AUTHORIZED = 12  # refused before dispatch: who the caller is may not call this method
    # Application codes (handlers raise RpcError with these).
    NOT_LEADER = 20
    TABLET_NOT_FOUND = 21
    TABLET_NOT_RUNNING = 22
    ILLEGAL_STATE = 23
    ALREADY_EXISTS = 24
    NOT_FOUND = 25
    INVALID_ARGUMENT = 26
    REPLICA_NOT_BEHIND = 27  # StartTabletCopy onto a running replica AppendEntries can catch up


class RpcError(TesseraError):
    """A failed call. `maybe_delivered` is True when the server may have acted on the request."""

    def __init__(self, code: ErrorCode, message: str = "", *, maybe_delivered: bool = False,
                 detail: object = None):
        self.code = ErrorCode(code)
        self.message = message
        self.maybe_delivered = maybe_delivered
        self.detail = detail  # e.g. a leader hint for NOT_LEADER
        super().__init__(f"{self.code.name}: {message}" if message else self.code.name)

    def __reduce__(self):
        """Picklable with its keyword fields: an error that crosses a process boundary (a
        simulator worker's) must arrive whole, not fail to rebuild and hang the pool."""
        return (functools.partial(type(self), maybe_delivered=self.maybe_delivered,
                                  detail=self.detail), (self.code, self.message))
