"""Seeds on worker processes that may die, one process per seed.

Each seed runs in a fresh process, forked from a server that imported the seed function's
module once (multiprocessing's forkserver, started with PYTHONHASHSEED=0 so that string hashing,
hence set iteration, is the same in every run): a fork per seed, not an interpreter start and
every import. A fresh process per seed keeps seeds apart: a worker that ran a seed of wide
values kept its gigabytes of freed heap (glibc keeps what Python frees), so a light seed it
ran next met the memory bound and ended unknown; and state one seed left in a module (a
coroutine its garbage collection closed later) was counted in the next seed's probes.

A seed's process has a bounded address space (stack.WORKER_MEMORY_BYTES). At that bound Python
raises MemoryError, but a C extension may not: msgspec's encoder was seen to segfault there,
and the kernel's OOM killer sends SIGKILL. A process that ends without sending its result is
that seed's loss, `lost(arg, why)`, and only that seed's: the seeds beside it run on (a process
pool, which this replaced, breaks as a whole when one worker dies, and multiprocessing.Pool
never answers for the seed it held at all). An unknown seed, never a passed one.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Iterable
from multiprocessing.connection import Connection, wait
from typing import Any

_END = object()  # what next() gives for a finished `args`
DIED = ("its worker process died (a signal: a crash in C code at the worker's memory bound, or "
        "the kernel's OOM killer)")


def run_in_order(fn: Callable[[Any], Any], args: Iterable, jobs: int,
                 lost: Callable[[Any, str], Any], deadline: float | None = None,
                 on_result: Callable[[Any], None] | None = None,
                 stop: Callable[[Any], bool] | None = None,
                 preload: tuple[str, ...] = ()) -> list:
    """fn(arg) for each of `args`, each in a process of its own, `jobs` at a time; the results
    in the order of `args`. `args` may be a generator: its next arg is taken when a process is
    free, after every result already in order went to `on_result`, so it may depend on them.
    With `deadline` (a time.monotonic() value), stop there once one has finished, killing the
    runs in flight (the results are then those that finished, still in the order of `args`,
    with gaps where a run was killed); with `stop`, after the first result it holds true of.
    Each result is handed to `on_result` as it joins the list. An exception fn raises is raised
    here. `preload`: modules fn imports as it runs, imported once by the fork server instead of
    by every seed."""
    ctx = _forkserver([fn.__module__, *preload])
    finished: dict[int, Any] = {}
    out: list = []
    running: dict[Connection, tuple[int, Any]] = {}
    taken: list = []  # the args handed out so far, by index
    source = iter(args)
    stopped = False
    try:
        while not stopped:
            while len(running) < max(1, jobs) and (arg := next(source, _END)) is not _END:
                receive, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, args=(send, fn, arg), daemon=True)
                proc.start()
                send.close()
                running[receive] = (len(taken), proc)
                taken.append(arg)
            if not running:
                break
            timeout = (None if deadline is None or not (finished or out)
                       else max(0.0, deadline - time.monotonic()))
            ready = wait(list(running), timeout)
            if not ready:
                break  # the deadline
            for conn in ready:
                i, proc = running.pop(conn)  # type: ignore[index]  # wait() returns the Connections given
                finished[i] = _outcome(conn, proc, lambda why, i=i: lost(taken[i], why))
            while len(out) in finished:
                out.append(finished.pop(len(out)))
                if on_result is not None:
                    on_result(out[-1])
                if stop is not None and stop(out[-1]):
                    stopped = True
                    break
    finally:
        for conn, (_, proc) in running.items():  # dropped: they can take minutes
            proc.kill()
            proc.join()
            conn.close()
    # Stopped at the deadline: seeds that finished behind one still running are kept too (in
    # the order of `args`): dropping them would drop a failure a later seed found.
    for i in sorted(finished) if not stopped else ():
        out.append(finished.pop(i))
        if on_result is not None:
            on_result(out[-1])
    return out


def _child(send: Connection, fn: Callable[[Any], Any], arg: Any) -> None:
    try:
        result = (True, fn(arg))
    except Exception as e:
        result = (False, e)
    send.send(result)
    send.close()


def _outcome(conn: Connection, proc, lose: Callable[[str], Any]) -> Any:
    """The result a finished process sent, or its loss if it died first; fn's exception raised."""
    try:
        ok, value = conn.recv()
    except EOFError:
        proc.join()
        return lose(DIED)
    finally:
        conn.close()
    proc.join()
    if not ok:
        raise value
    return value


def _forkserver(modules: list[str]) -> multiprocessing.context.BaseContext:
    """The forkserver context, its server (one per process, started at the first call)
    preloading `modules` and started with PYTHONHASHSEED=0. A server already running keeps
    what it was started with: it was started here too, so with the same hash seed."""
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(modules)
    saved = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"
    try:
        forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = saved
    return ctx
