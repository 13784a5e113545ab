"""Sub-millisecond timers for a real event loop, on a Linux timerfd.

Neither loop the daemons run on can sleep less than a millisecond: asyncio's epoll selector
rounds every timeout up to the next millisecond (a 0.3 ms timer fires after 1.15 ms here), and
uvloop's libuv rounds to the nearest one (a 0.3 ms timer fires at once, a 0.6 ms one after
1.1 ms). Commit-wait waits a fraction of a millisecond on every COMMIT_WAIT write
(node.replica.answers, `WriteAnswers.commit_waited`). Fired early, the replica went round the
loop until the time was past, burning the core the leader needs; rounded up, the write waited up to a millisecond more than
commit-wait asks. Which of the two a write met depended on how fast the host got the entry
committed, so a faster host could answer slower (docs/benchmarks.md).

A timerfd has the kernel's high-resolution timers behind it: the loop's selector wakes when the
fd becomes readable, whatever timeout the loop chose. One timerfd per loop serves all its
precise timers. It fires SPIN_S before the earliest deadline, and the loop then turns over
(call_soon, which still polls for I/O) until the deadline: waking a sleeping process costs about
that much on this VM, and a loop already awake answers on time. The spin is bounded by SPIN_S
per deadline, where the early-firing loop spun for the whole wait.

The timer is relative (armed with a duration, not a clock reading), so a stepped or faked wall
clock (the clock nemesis' libfaketime) cannot make it fire far off; a caller that needs a clock
to be past a point re-checks when it fires, as commit-wait does.

A loop whose timers are already exact (the simulator's virtual-time loop says so with
`exact_timers`) is its own precise timer: `precise_timers(loop)` returns it.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import os
import time
import weakref
from collections.abc import Callable
from typing import Any, Protocol

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
SPIN_S = 0.000_15  # how early the timerfd fires; the loop turns over until the deadline


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.timerfd_create.argtypes = (ctypes.c_int, ctypes.c_int)
_libc.timerfd_settime.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec),
                                  ctypes.c_void_p)


class Timers(Protocol):
    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> Any: ...


class TimerFd:
    """Precise one-shot timers on `loop`. Callbacks run in the loop's thread, in deadline order
    (equal deadlines in the order they were set)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        fd = _libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd
        self._loop = weakref.proxy(loop)  # the loop holds us, through its reader; not back
        weakref.finalize(self, os.close, fd)  # when the loop that holds this timer goes
        self._heap: list[tuple[float, int, Callable[..., Any], tuple]] = []
        self._seq = itertools.count()
        self._armed_for: float | None = None  # the deadline the timerfd is armed for
        self._spinning = False  # a _run_due is queued with call_soon
        loop.add_reader(fd, self._fired)

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> None:
        deadline = time.monotonic() + max(0.0, delay)
        heapq.heappush(self._heap, (deadline, next(self._seq), callback, args))
        if not self._spinning and (self._armed_for is None or deadline < self._armed_for):
            self._schedule()

    def _schedule(self) -> None:
        """Arm for the earliest deadline less the wake-up margin, or spin if it is that near."""
        if not self._heap:
            return
        early = self._heap[0][0] - SPIN_S
        if early <= time.monotonic():
            self._spinning = True
            self._loop.call_soon(self._run_due)
            return
        # A zero it_value disarms a timerfd: never arm for less than 1 ns.
        ns = max(1, int((early - time.monotonic()) * 1e9))
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(ns // 1_000_000_000, ns % 1_000_000_000))
        if _libc.timerfd_settime(self._fd, 0, ctypes.byref(spec), None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._armed_for = self._heap[0][0]

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # disarmed or re-armed since it became readable
            pass
        self._armed_for = None
        if not self._spinning:
            self._run_due()

    def _run_due(self) -> None:
        self._spinning = False
        now = time.monotonic()
        due = []
        while self._heap and self._heap[0][0] <= now:
            due.append(heapq.heappop(self._heap))
        if self._armed_for is None or (self._heap and self._heap[0][0] < self._armed_for):
            self._schedule()
        for _, _, callback, args in due:
            try:
                callback(*args)
            except Exception as e:  # as the loop treats a failing timer: report it, run the rest
                self._loop.call_exception_handler(
                    {"message": "precise timer callback failed", "exception": e})


_per_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def precise_timers(loop: asyncio.AbstractEventLoop) -> Timers:
    """The precise timers of `loop`: the loop itself if its timers are exact, else its one
    TimerFd, made on first use. Only the loop holds the TimerFd (through its reader), so both go
    together, and the fd with them."""
    if getattr(loop, "exact_timers", False):
        return loop
    timers = _per_loop.get(loop)
    if timers is None:
        timers = _per_loop[loop] = TimerFd(loop)
    return timers
