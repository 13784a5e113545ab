"""A deterministic asyncio event loop on virtual time, for running the real engine in simulation.

The production coroutines (node.rpc, node.replica.replica, the servers, the client) run unchanged: they
only ever see `asyncio`, and this loop decides what "now" is, what runs next and what a crash
kills. Use it as

    net = SimNetwork(seed)
    loop = SimLoop(net)
    loop.spawn("10.77.0.101", server_main())        # a "process" on host 10.77.0.101
    loop.run_until_complete(scenario())
    loop.crash_host("10.77.0.101")                  # from inside the scenario, at any point

Virtual time: `time()` starts at 0.0. When nothing is ready the loop jumps to the next timer
instead of sleeping, so `asyncio.sleep(3600)` costs no wall time. When nothing is ready and no
timer is pending, every task waits for something that cannot happen: `SimDeadlock` is raised.

Determinism rests on:
- one thread and no real I/O: `run_in_executor` (hence `asyncio.to_thread`) runs the function
  inline (its result delivered after the simulated disk's fsync latency, if any), and sockets exist only in SimNetwork, whose randomness is one seeded random.Random;
- the ready queue being FIFO (asyncio's own) and timers ordered by (when, creation sequence), so
  equal deadlines fire in the order they were set (the heap holds (when, sequence, handle)
  tuples: their order is compared in C, where a TimerHandle subclass with Python comparisons
  cost the heap over two million Python calls a swarm seed);
- tasks and futures hashing by creation sequence instead of id(): sets of tasks (RpcServer keeps
  some, asyncio.wait builds them, all_tasks() iterates a WeakSet) then iterate in the same
  order on every run;
- the program itself: run with a fixed PYTHONHASHSEED if it iterates sets of strings, and keep
  wall-clock reads (time.time, time.monotonic) out of decisions.

Crashes: a process is a host's incarnation, carried by the SIM_HOST context variable, which
every task and callback inherits from the context it was created in. `crash_host` cancels
every handle (task step, timer, callback) whose context belongs to the host's live incarnation
and refuses new ones, so its code never runs again, not even `finally` blocks. The dead tasks are
kept in a graveyard: if they were garbage collected, closing their coroutines would run those
`finally` blocks. Spawning on the host again starts a new incarnation.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import heapq
import itertools
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from harness.sim.disk import fsync_meter

_CLEANUP_SECONDS = 60.0  # virtual time close() grants the living to finish
# asyncio's own (base_events): a heap with this many timers, more than this fraction of them
# cancelled, is rebuilt without them; a wait is at most a day
_MIN_SCHEDULED = 100
_MIN_CANCELLED_FRACTION = 0.5
_MAX_WAIT = 24 * 3600.0

heappop, heappush = heapq.heappop, heapq.heappush
_new = object.__new__


class SimDeadlock(RuntimeError):
    """Nothing is ready and no timer is pending: the awaited result can never arrive."""


class SimProcess:
    """One incarnation of a host: the tasks it owns die with it."""

    def __init__(self, host: str, incarnation: int):
        self.host = host
        self.incarnation = incarnation
        self.alive = True
        self.tasks: dict[asyncio.Task, None] = {}  # insertion-ordered, unlike a set

    def adopt(self, task: asyncio.Task) -> None:
        self.tasks[task] = None
        task.add_done_callback(self._release, context=SYSTEM)

    def _release(self, task: asyncio.Task) -> None:
        self.tasks.pop(task, None)

    def __repr__(self) -> str:
        state = "alive" if self.alive else "dead"
        return f"<SimProcess {self.host}#{self.incarnation} {state}>"


SIM_HOST: contextvars.ContextVar[SimProcess | None] = contextvars.ContextVar("SIM_HOST", default=None)

# The context of the simulator's own callbacks (network deliveries, bookkeeping): no process
# owns them, so no crash cancels them.
SYSTEM = contextvars.Context()


def owner(context: contextvars.Context | None) -> SimProcess | None:
    """The process a callback scheduled with `context` (None: the current one) belongs to."""
    return SIM_HOST.get() if context is None else context.get(SIM_HOST)


class _SimFuture(asyncio.Future):
    """Numbered by SimLoop.create_future, right after asyncio's own (C) initialisation: no
    Python __init__ of its own, a frame less for every future."""

    def __hash__(self) -> int:
        return self._sim_seq


class _Handle(asyncio.Handle):
    """asyncio's Handle, made without asking the loop whether it is in debug mode (a method
    call per callback, a few per cent of a seed): the simulator keeps no source tracebacks."""

    __slots__ = ()

    def __init__(self, callback, args, loop, context):
        self._context = contextvars.copy_context() if context is None else context
        self._loop = loop
        self._callback = callback
        self._args = args
        self._cancelled = False
        self._repr = None
        self._source_traceback = None


class _TimerHandle(asyncio.TimerHandle):
    """asyncio's TimerHandle, made by SimLoop.call_at as `_Handle` is by call_soon. The heap
    orders (when, sequence) tuples, never the handles, so their comparisons are never called."""

    __slots__ = ()


class _SimTask(asyncio.Task):
    def __init__(self, coro, *, loop, name=None, context=None):
        self._sim_seq = next(loop._seq)  # before __init__, which adds the task to a WeakSet
        super().__init__(coro, loop=loop, name=name, context=context)

    def __hash__(self) -> int:
        return self._sim_seq


class Network(Protocol):
    """What the loop needs of its network (harness.sim.network.SimNetwork, which runs on the loop
    and so imports this module): to be attached, to hear of a crash, and its sockets."""

    def attach(self, loop: SimLoop) -> None: ...

    def host_crashed(self, host: str) -> None: ...

    async def connect(self, protocol_factory, host: str, port: int,
                      local_addr: tuple[str, int] | None) -> tuple[Any, asyncio.BaseProtocol]: ...

    def listen(self, protocol_factory, host: str | None, port: int) -> Any: ...


class SimLoop(asyncio.BaseEventLoop):
    exact_timers = True  # virtual time lands on each deadline (node.precise_timer)

    def __init__(self, network: Network):
        super().__init__()
        self._selector = None  # no I/O to wait for: `_run_once` advances virtual time itself
        self._clock_resolution = 1e-9  # the platform's would differ between machines
        self._now = 0.0
        # `time()` without a Python frame: the engine reads the clock several times a callback
        self.time = functools.partial(getattr, self, "_now")
        self._seq = itertools.count()  # creation order of timers, tasks and futures
        self._procs: dict[str, SimProcess] = {}
        self.graveyard: list[SimProcess] = []
        self.abandoned_futures = 0
        # tasks that ended with an error no one read, while the run went on: each a failure
        # that went unseen (StackSim fails the seed on one)
        self.unread_task_errors: list[str] = []
        self.network = network
        network.attach(self)

    # -- virtual time ----------------------------------------------------------------------
    def time(self) -> float:
        return self._now  # shadowed in __init__ by the same read, made in C

    def set_debug(self, enabled: bool) -> None:
        """Also `get_debug`, a C callable: asyncio's C Future and Task ask the loop at each
        creation, and a Python method's frame there cost more than a per cent of a seed."""
        super().set_debug(enabled)
        self.get_debug = itertools.repeat(bool(enabled)).__next__

    def _run_once(self) -> None:
        """The iterations of asyncio's loop (BaseEventLoop._run_once) until one leaves it
        stopping, on virtual time (run_forever, which calls this, would stop there). Each
        drops the cancelled timers at the head of the heap; when nothing is ready, jumps to
        the earliest deadline (SimDeadlock if there is none); moves the timers now due behind
        what is ready; runs what was ready at its start, not what that schedules. The same
        steps in the same order as asyncio's, so a seed runs the same schedule, without the
        selector, the Python-level timer comparisons and a method call per iteration, which
        together cost about as much as the engine's own code on an idle cluster."""
        ready = self._ready
        popleft = ready.popleft
        resolution = self._clock_resolution
        while True:
            heap = self._scheduled
            if (len(heap) > _MIN_SCHEDULED and
                    self._timer_cancelled_count / len(heap) > _MIN_CANCELLED_FRACTION):
                live = []
                for entry in heap:
                    if entry[2]._cancelled:
                        entry[2]._scheduled = False
                    else:
                        live.append(entry)
                heapq.heapify(live)
                self._scheduled = heap = live
                self._timer_cancelled_count = 0
            else:
                while heap and heap[0][2]._cancelled:
                    self._timer_cancelled_count -= 1
                    heappop(heap)[2]._scheduled = False
            now = self._now
            if not ready and not self._stopping:
                if not heap:
                    raise SimDeadlock(f"at t={now:.6f}: nothing is ready and no timer is pending")
                # asyncio's timeout, then landing exactly on the deadline, not a rounding
                # error past it: bit for bit what the selector's wait did
                delay = heap[0][0] - now
                if delay > 0:
                    target = now + (delay if delay < _MAX_WAIT else _MAX_WAIT)
                    if target > heap[0][0]:
                        target = heap[0][0]
                    if target > now:
                        self._now = now = target
            end = now + resolution
            while heap and heap[0][0] < end:
                handle = heappop(heap)[2]
                handle._scheduled = False
                ready.append(handle)
            for _ in range(len(ready)):
                handle = popleft()
                if handle._cancelled:
                    continue
                try:  # Handle._run, inline
                    handle._context.run(handle._callback, *handle._args)
                except (SystemExit, KeyboardInterrupt):
                    raise
                except BaseException as exc:
                    _report(handle, exc)
            handle = None  # as asyncio: no cycle through the last callback's exception
            if self._stopping:
                return

    def _write_to_self(self) -> None:
        pass  # single-threaded: nothing to wake

    # -- scheduling ------------------------------------------------------------------------
    def call_soon(self, callback, *args, context=None):
        """asyncio's call_soon (FIFO), refusing quietly what a dead process schedules. The
        handle is made here, as `_Handle.__init__` would: a frame less for every callback."""
        if context is None:
            context = contextvars.copy_context()
        proc = context.get(SIM_HOST)
        if proc is not None and not proc.alive:
            return _stillborn(_Handle(callback, args, self, context))
        if self._closed:
            raise RuntimeError("Event loop is closed")
        handle = _new(_Handle)
        handle._context = context
        handle._loop = self
        handle._callback = callback
        handle._args = args
        handle._cancelled = False
        handle._repr = None
        handle._source_traceback = None
        self._ready.append(handle)
        return handle

    def call_later(self, delay, callback, *args, context=None):
        """asyncio's call_later, without going through its Python frame to call_at."""
        if delay is None:
            raise TypeError("delay must not be None")
        return self.call_at(self._now + delay, callback, *args, context=context)

    def call_at(self, when, callback, *args, context=None):
        """asyncio's call_at, refusing quietly what a dead process schedules. The timer is
        made here, as `_TimerHandle.__init__` would: a frame less for every timer."""
        seq = next(self._seq)
        if context is None:
            context = contextvars.copy_context()
        timer = _new(_TimerHandle)
        timer._context = context
        timer._loop = self
        timer._callback = callback
        timer._args = args
        timer._cancelled = False
        timer._repr = None
        timer._source_traceback = None
        timer._when = when
        timer._scheduled = False
        proc = context.get(SIM_HOST)
        if proc is not None and not proc.alive:
            return _stillborn(timer)
        if self._closed:
            raise RuntimeError("Event loop is closed")
        heappush(self._scheduled, (when, seq, timer))
        timer._scheduled = True
        return timer

    def create_future(self) -> asyncio.Future:
        fut = _SimFuture(loop=self)
        fut._sim_seq = next(self._seq)
        return fut

    def create_task(self, coro, *, name=None, context=None) -> asyncio.Task:
        self._check_closed()
        task = _SimTask(coro, loop=self, name=name, context=context)
        proc = owner(context)
        if proc is not None:
            proc.adopt(task)
        return task

    def run_in_executor(self, executor, func: Callable, *args) -> asyncio.Future:
        """Run `func` now, inline: no threads. No virtual time passes, except that its outcome
        is delivered only after the latency its SimDisk syncs sampled (`SimFaults.
        fsync_latency`, metered by harness.sim.disk.fsync_meter): a slow fsync delays the caller,
        and a crash meanwhile leaves the sync done but unacknowledged, as on a real disk."""
        self._check_closed()
        fut = self.create_future()
        with fsync_meter() as meter:
            try:
                outcome = (True, func(*args))
            except Exception as e:
                outcome = (False, e)
        if meter.seconds > 0:
            self.call_later(meter.seconds, _settle, fut, outcome)
        else:
            _settle(fut, outcome)
        return fut

    # -- processes -------------------------------------------------------------------------
    def process(self, host: str) -> SimProcess:
        """The host's live incarnation, started if the host has none."""
        proc = self._procs.get(host)
        if proc is None or not proc.alive:
            proc = SimProcess(host, proc.incarnation + 1 if proc else 1)
            self._procs[host] = proc
        return proc

    def spawn(self, host: str, coro: Coroutine, *, name: str | None = None) -> asyncio.Task:
        """Run `coro` as a task of `host`; everything it starts belongs to the host too."""
        context = contextvars.Context()
        context.run(SIM_HOST.set, self.process(host))
        return self.create_task(coro, name=name, context=context)

    def crash_host(self, host: str) -> None:
        """Kill the host's process mid-step: none of its code runs again, no cleanup. Its
        listeners vanish and its peers see their connections reset."""
        proc = self._procs.get(host)
        if proc is not None and proc.alive:
            proc.alive = False
            self.graveyard.append(proc)
            for task in proc.tasks:
                task._log_destroy_pending = False
            timers = (entry[2] for entry in self._scheduled)
            for handle in itertools.chain(self._ready, timers):
                if owner(handle._context) is proc:
                    handle.cancel()
        self.network.host_crashed(host)

    def close(self) -> None:
        """Cancel the live processes' tasks and let them clean up (as asyncio.run does), then
        close. The dead stay dead: once the loop is gone, collecting their coroutines may run
        their finally blocks, but whatever those schedule is refused quietly. Closed by its
        __del__ while another loop runs in this thread (the GC collected an unclosed one), it
        cannot run anything: it closes without the cleanup, and without a warning for each
        task it abandons."""
        if not self.is_closed() and not self.is_running():
            if asyncio.events._get_running_loop() is None:
                self._stop_the_living()
            else:
                for task in asyncio.all_tasks(self):
                    task._log_destroy_pending = False
        super().close()

    def _stop_the_living(self) -> None:
        dead = {task for proc in self.graveyard for task in proc.tasks}
        tasks = sorted(asyncio.all_tasks(self) - dead, key=hash)
        for task in tasks:
            task.cancel()
        if tasks:
            try:
                self.run_until_complete(asyncio.wait(tasks, timeout=_CLEANUP_SECONDS))
            except SimDeadlock:
                pass  # some cleanup waits for what will never come: abandon it
        self.run_until_complete(self.shutdown_asyncgens())

    def call_exception_handler(self, context: dict) -> None:
        """A plain future failed with no one left to read it: its waiter timed out or died with
        a crashed host, as happens to every abandoned call. Counted, not printed. A task that
        ended with an error no one read is kept (`unread_task_errors`): nothing but the log saw
        that failure. A MemoryError ends the run, raised."""
        if isinstance(context.get("exception"), MemoryError):
            raise context["exception"]  # the seed outgrew its worker's memory: it ends here
        fut = context.get("future")
        if isinstance(fut, _SimFuture) and "never retrieved" in context.get("message", ""):
            self.abandoned_futures += 1
            return
        if (isinstance(fut, asyncio.Task) and "never retrieved" in context.get("message", "")
                and not self.is_closed()):
            self.unread_task_errors.append(
                f"task {fut.get_name()} at {self._now:.3f} virtual s: {context.get('exception')!r}")
            return
        super().call_exception_handler(context)

    # -- network ---------------------------------------------------------------------------
    async def create_connection(self, protocol_factory, host=None, port=None, *, ssl=None,
                                sock=None, local_addr=None, **_options: Any):
        if ssl or sock is not None:
            raise NotImplementedError("SimLoop connections have no TLS and no real sockets")
        return await self.network.connect(protocol_factory, host, port, local_addr)

    async def create_server(self, protocol_factory, host=None, port=None, *, ssl=None,
                            sock=None, start_serving=True, **_options: Any):
        if ssl or sock is not None or not start_serving:
            raise NotImplementedError("SimLoop servers have no TLS, real sockets or deferred start")
        return self.network.listen(protocol_factory, host, port or 0)


def _settle(fut: asyncio.Future, outcome: tuple[bool, Any]) -> None:
    if fut.done():  # its caller gave up (cancelled) while the sync was slow
        return
    ok, value = outcome
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


def _report(handle: asyncio.Handle, exc: BaseException) -> None:
    """A callback raised: reported as Handle._run reports it, to the exception handler."""
    from asyncio import format_helpers

    cb = format_helpers._format_callback_source(handle._callback, handle._args)
    context = {"message": f"Exception in callback {cb}", "exception": exc, "handle": handle}
    if handle._source_traceback:
        context["source_traceback"] = handle._source_traceback
    handle._loop.call_exception_handler(context)


def _stillborn(handle: asyncio.Handle) -> asyncio.Handle:
    """A handle for a dead process's callback: returned to the caller, never run."""
    handle.cancel()
    return handle
