"""Per-call deadlines in buckets: one loop timer per GRANULARITY of time, not one per call.

A loop timer per call (asyncio.timeout) was a quarter of a loaded leader's CPU: each one is a
heap push, a reschedule and a cancel. Here a call costs a dict insert and a dict pop; its
deadline fires up to one GRANULARITY late, which no caller can tell from scheduling delay.

The caller passes the loop it runs on: asyncio.get_running_loop() makes a system call each time
(getpid, its check against a fork), and a connection knows its loop already.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Hashable

GRANULARITY = 0.01  # seconds


class DeadlineWheel:
    def __init__(self, on_expire: Callable[[Hashable], None]):
        self._on_expire = on_expire
        self._buckets: dict[int, dict[Hashable, None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, item: Hashable, timeout: float, loop: asyncio.AbstractEventLoop) -> int:
        """Expire `item` after `timeout` seconds on `loop` (the running one) unless removed
        first; returns the key that `remove` needs."""
        if loop is not self._loop:  # the timers of buckets made in another loop never fire here
            self._loop, self._buckets = loop, {}
        key = math.ceil((loop.time() + timeout) / GRANULARITY)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = {}
            loop.call_at(key * GRANULARITY, self._fire, key)
        bucket[item] = None
        return key

    def remove(self, item: Hashable, key: int) -> None:
        bucket = self._buckets.get(key)
        if bucket is not None:
            bucket.pop(item, None)

    def _fire(self, key: int) -> None:
        for item in self._buckets.pop(key, ()):
            self._on_expire(item)
