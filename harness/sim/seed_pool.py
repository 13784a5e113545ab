"""Seeds on worker processes that may die.

A seed runs in a spawned worker whose address space is bounded (stack.WORKER_MEMORY_BYTES). At
that bound Python raises MemoryError, but a C extension may not: msgspec's encoder was seen to
segfault there, and the kernel's OOM killer sends SIGKILL. multiprocessing.Pool replaces such a
worker silently and never answers for the seed it held, so a run of many seeds waited for ever.
Here a dead worker breaks the pool (concurrent.futures' BrokenProcessPool): each seed then in
flight (at most `jobs`, as no more are ever submitted) is given `lost(arg, why)` as its result,
and a new pool runs the rest. A seed lost beside the one that died is reported as lost too, not
rerun: an unknown seed, never a passed one.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

TASKS_PER_WORKER = 20  # a fresh worker after this many seeds: what one seed leaks goes with it
DIED = ("its worker process died (a signal: a crash in C code at the worker's memory bound, or "
        "the kernel's OOM killer), with this seed or another in flight")


def run_in_order(fn: Callable[[Any], Any], args: list, jobs: int,
                 lost: Callable[[Any, str], Any], deadline: float | None = None,
                 on_result: Callable[[Any], None] | None = None,
                 stop: Callable[[Any], bool] | None = None) -> list:
    """fn(arg) for each of `args` on `jobs` spawned workers; the results in the order of
    `args`. With `deadline` (a time.monotonic() value), stop there once one has finished,
    killing the runs in flight (the results are then those that finished, still in the order
    of `args`, with gaps where a run was killed); with `stop`, after the first result it holds
    true of. Each result is handed to `on_result` as it joins the list."""
    ctx = multiprocessing.get_context("spawn")
    finished: dict[int, Any] = {}
    out: list = []
    submitted = 0
    stopped = False
    while len(out) < len(args):
        ex = ProcessPoolExecutor(max(1, jobs), mp_context=ctx, max_tasks_per_child=TASKS_PER_WORKER)
        inflight: dict[Future, int] = {}
        broken = ended = False
        try:
            while not (broken or ended):
                while len(inflight) < max(1, jobs) and submitted < len(args):
                    inflight[ex.submit(fn, args[submitted])] = submitted
                    submitted += 1
                if not inflight:
                    break
                timeout = (None if deadline is None or not (finished or out)
                           else max(0.0, deadline - time.monotonic()))
                done, _ = wait(inflight, timeout, FIRST_COMPLETED)
                if not done:
                    ended = True  # the deadline
                for f in done:
                    i = inflight.pop(f)
                    try:
                        finished[i] = f.result()
                    except BrokenProcessPool:
                        finished[i] = lost(args[i], DIED)
                        broken = True
                while len(out) in finished:
                    out.append(finished.pop(len(out)))
                    if on_result is not None:
                        on_result(out[-1])
                    if stop is not None and stop(out[-1]):
                        ended = stopped = True
                        break
        finally:
            _kill(ex)
        if ended or not broken:
            break
    # Stopped at the deadline: seeds that finished behind one still running are kept too (in
    # the order of `args`): dropping them would drop a failure a later seed found.
    for i in sorted(finished) if not stopped else ():
        out.append(finished.pop(i))
        if on_result is not None:
            on_result(out[-1])
    return out


def _kill(ex: ProcessPoolExecutor) -> None:
    """End the pool now: seeds still running are dropped (they can take minutes)."""
    for p in list((getattr(ex, "_processes", None) or {}).values()):
        if p.is_alive():
            p.terminate()
    ex.shutdown(wait=True, cancel_futures=True)
