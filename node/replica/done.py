"""The callback contract between the replica's driver and its callers: a `Done` is called once
with (result, None) or (None, error). Callbacks let the driver answer from its own turn of the
event loop without a task per request; `settle` adapts one to a future for coroutine callers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("node.replica.replica")

Done = Callable[[Any, BaseException | None], None]  # (result, None) or (None, error), once


def finish(callback: Callable[..., None], *args: Any) -> None:
    """Call a caller's callback (a Done) from the driver: a bug in one must not fail the
    replica, as the driver stops serving on any exception it sees (a failed fsync)."""
    try:
        callback(*args)
    except Exception:
        log.exception("a result callback raised")


def settle(fut: asyncio.Future, result: Any, error: BaseException | None) -> None:
    """A Done that resolves `fut`: how coroutine callers wait for a callback-style result."""
    if fut.done():
        return
    if error is None:
        fut.set_result(result)
    else:
        fut.set_exception(error)
