"""Hybrid time, as Kudu's HybridTime: (physical microseconds << 12) | logical counter.

Timestamps from one clock strictly increase even when the physical clock stalls or steps back
(the logical counter absorbs it). A new leader first calls `update` with the highest timestamp in
its log (Raft gives it every committed entry), so its timestamps exceed every committed one of
its predecessors whatever the clocks say.

Commit-wait (Kudu's Raft implementation notes; Spanner §4.1.1) adds the real-time order: a
timestamp `ts` issued elsewhere may be ahead of our physical clock by up to the clocks' maximum
disagreement. Once our physical time minus that bound is past `ts`, every clock in the cluster
has passed it, so `wait_until_after(ts)` says how long a new leader waits before its own
physical time, not just its logical counter, is above all its predecessor issued (as lease reads
need). The clock never sleeps: it returns the duration and the asyncio caller awaits it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

LOGICAL_BITS = 12
_LOGICAL_MASK = (1 << LOGICAL_BITS) - 1


def make(physical_us: int, logical: int = 0) -> int:
    return (physical_us << LOGICAL_BITS) | logical


def physical_us(ts: int) -> int:
    return ts >> LOGICAL_BITS


def logical(ts: int) -> int:
    return ts & _LOGICAL_MASK


class HybridClock:
    """`now_ns` is the physical time source (injectable for tests); `max_error_us` bounds how far
    any two clocks of the cluster may disagree (the configured maximum clock drift)."""

    def __init__(self, max_error_us: int, now_ns: Callable[[], int] = time.time_ns):
        if max_error_us < 0:
            raise ValueError("max_error_us must be >= 0")
        self.max_error_us = max_error_us
        self._now_ns = now_ns
        self._last = 0
        self._lock = threading.Lock()

    def _physical_us(self) -> int:
        return self._now_ns() // 1000

    def now(self) -> int:
        """A timestamp greater than every one this clock issued or was updated with."""
        with self._lock:
            candidate = make(self._physical_us())
            # A full logical counter carries into the physical part: still strictly increasing.
            self._last = candidate if candidate > self._last else self._last + 1
            return self._last

    def update(self, observed: int) -> bool:
        """Witness a timestamp from elsewhere: later `now()` values will exceed it. True if
        it was ahead of every timestamp this clock had issued or witnessed."""
        with self._lock:
            ahead = observed > self._last
            if ahead:
                self._last = observed
            return ahead

    def ahead_us(self, ts: int) -> int:
        """How far `ts`'s physical part is ahead of this clock's physical now, in µs."""
        return physical_us(ts) - self._physical_us()

    def wait_until_after(self, ts: int) -> float:
        """Seconds until `ts` is in the past on every clock within max error of ours (0 if it is)."""
        remaining_us = physical_us(ts) + self.max_error_us + 1 - self._physical_us()
        return max(0, remaining_us) / 1e6
