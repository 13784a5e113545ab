"""Drives a workload's logical processes against a client, Jepsen style.

Each worker thread of the run is an asyncio task that acts as one logical process at a time:
invoke, then ok / fail / info. After `info` (outcome unknown) the process is retired, since it may
still be running the op, and the thread continues as process `p + concurrency`. Op starts are
paced to `rate` per second over the whole run, with jitter, by one `Pacer` all workers share (as
Jepsen's `stagger` spaces a generator's ops): a worker stuck on a slow op leaves its slots to the
free ones, so faults lower the op density only when every worker is stuck. With `bursts` the
same rate comes as an application's load does, several starts at one instant: a client that
groups the requests its callers make together (Tessera's shared handles and sessions) meets
them only so, since evenly spaced workers each wake on a timer of their own. Ops stop at the time
limit; then the nemesis heals, and,
after a settle pause, each of the workload's final ops is retried until it is ok or its own
deadline passes (Jepsen's `gen/until-ok`): a final read that never succeeds proves nothing, so it
gets every fair chance, and every attempt stays in the history.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from harness.recorder import Recorder
from workloads.base import Completion, Invocation, KVClient, Workload

Nemesis = Callable[[Recorder, float], Awaitable[None]]  # injects faults until the deadline
Heal = Callable[[Recorder], Awaitable[None]]  # ends every fault, after the workers stopped


# The first process id of the setup ops (the final ops' start at twice it): above every
# worker's, so a worker's thread is its process modulo the run's concurrency.
SETUP_PROCESS = 10**6
# The most op starts a burst puts at one instant (Pacer with bursts): most of a default run's 10
# workers, so that with workers bound to 5 nodes one burst often gives one node two or more
BURST_MAX = 8

@dataclass
class RunOptions:
    concurrency: int = 10
    time_limit: float = 60.0
    rate: float = 200.0  # ops/s over all processes; 0 = as fast as they go
    seed: int = 0
    bursts: bool = False  # the rate's starts in bursts at one instant (Pacer)
    op_timeout: float = 5.0
    setup_timeout: float = 30.0  # each setup op: one attempt
    final_settle: float = 5.0  # after the heal, before the final ops: elections and catch-up
    final_timeout: float = 60.0  # each final op: seconds to keep retrying until one attempt is ok
    final_backoff: float = 1.0  # between a final op's attempts

    def final_plan(self) -> dict:
        """What the final phase will try, for test.json."""
        return {"settle_s": self.final_settle, "deadline_s": self.final_timeout,
                "attempt_timeout_s": self.op_timeout, "backoff_s": self.final_backoff}


@dataclass
class Progress:
    """One status line, rewritten in place on a terminal and silent otherwise."""

    active_faults: set = field(default_factory=set)
    enabled: bool = field(default_factory=lambda: sys.stderr.isatty())

    def show(self, rec: Recorder, time_limit: float) -> None:
        if not self.enabled:
            return
        t = rec.elapsed_s()
        c = rec.counts
        done = c["ok"] + c["fail"] + c["info"]
        faults = ",".join(sorted(self.active_faults)) or "none"
        sys.stderr.write(f"\r{t:6.1f}/{time_limit:.0f}s  {done / max(t, 1e-9):7.1f} ops/s  "
                         f"ok {c['ok']}  fail {c['fail']}  info {c['info']}  faults: {faults}   ")
        sys.stderr.flush()

    def done(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


async def _call(workload: Workload, client: KVClient, inv: Invocation, timeout: float):
    try:
        return await asyncio.wait_for(workload.invoke(client, inv), timeout)
    except TimeoutError:
        return Completion("info", error="timeout")


def _node(client: KVClient) -> str | None:
    return getattr(client, "node", None)  # clients that know which server answered say so


def _complete(rec: Recorder, process: int, inv: Invocation, done: Completion,
              client: KVClient) -> None:
    """Record `inv`'s completion: the node that answered and, from clients that know them
    (node.client.Table), an ok write's hybrid timestamp and what tied an answered write to its
    request (its session, seq and batch: Op.sent)."""
    answered = done.type != "info"
    rec.record(process, done.type, inv.f, done.value if done.type == "ok" else inv.value,
               key=inv.key, node=_node(client), error=done.error,
               hybrid_time=getattr(client, "hybrid_time", None) if done.type == "ok" else None,
               sent=getattr(client, "sent", None) if answered else None)


class Pacer:
    """Start slots `uniform(0, 2 / rate)` apart, handed to whichever worker asks next; a slot
    already past starts at once. With `bursts`, slots come BURST_MAX at most at one instant
    (how many drawn from 1 to BURST_MAX), a burst of k then `uniform(0, 2k / rate)` before the
    next: the same mean rate, but the workers given one burst's slots wake in one loop turn. A
    burst's slot nobody took by its instant starts at once for the next caller, as a slot
    already past does (otherwise a run whose workers are slow would lose most of its rate).
    Pure: the caller supplies the time."""

    def __init__(self, rate: float, seed: int, bursts: bool = False):
        self.gap = 2.0 / rate if rate > 0 else 0.0
        self.rng = random.Random(f"{seed}/pacer")
        self.next: float | None = None
        self.bursts = bursts
        self.at = 0.0  # the current burst's instant
        self.left = 0  # its slots not taken yet

    def delay(self, now: float) -> float:
        """Seconds until the caller's slot."""
        if not self.gap:
            return 0.0
        if self.bursts:
            return self._burst_slot(now) - now
        slot = now if self.next is None else max(now, self.next)
        self.next = slot + self.rng.uniform(0, self.gap)
        return slot - now

    def _burst_slot(self, now: float) -> float:
        if self.left:  # a place left in the current burst; past its instant, it starts at once
            self.left -= 1
            return max(now, self.at)
        size = self.rng.randint(1, BURST_MAX)
        self.at = now if self.next is None else max(now, self.next)
        self.left = size - 1
        self.next = self.at + self.rng.uniform(0, self.gap * size)
        return self.at


async def _thread(thread: int, opts: RunOptions, workload: Workload, client: KVClient,
                  rec: Recorder, deadline: float, loop: asyncio.AbstractEventLoop, pacer: Pacer) -> None:
    rng = random.Random(f"{opts.seed}/{thread}")
    process = thread
    stream = workload.ops(thread, opts.concurrency, rng)
    while loop.time() < deadline:
        if (wait := pacer.delay(loop.time())) > 0:
            await asyncio.sleep(min(wait, max(0.0, deadline - loop.time())))
            if loop.time() >= deadline:
                break
        inv = next(stream)
        rec.record(process, "invoke", inv.f, inv.value, key=inv.key)
        done = await _call(workload, client, inv, opts.op_timeout)
        _complete(rec, process, inv, done, client)
        if done.type == "info":
            process += opts.concurrency


async def _sequential(ops: list[Invocation], workload: Workload, client: KVClient, rec: Recorder,
                      process: int, timeout: float) -> None:
    for inv in ops:
        rec.record(process, "invoke", inv.f, inv.value, key=inv.key)
        done = await _call(workload, client, inv, timeout)
        _complete(rec, process, inv, done, client)
        if done.type == "info":
            process += 1


async def _until_ok(inv: Invocation, workload: Workload, client: KVClient, rec: Recorder,
                    process: int, opts: RunOptions) -> tuple[int, dict]:
    """Attempts of one final op until one is ok; no attempt starts after `final_timeout`. Each
    attempt is an op of its own, and an info attempt retires its process. Returns the next free
    process and what was tried."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    attempts, failures = 0, []
    while True:
        rec.record(process, "invoke", inv.f, inv.value, key=inv.key)
        done = await _call(workload, client, inv, opts.op_timeout)
        _complete(rec, process, inv, done, client)
        attempts += 1
        if done.type == "info":
            process += 1
        if done.type == "ok":
            break
        failures.append({"type": done.type, "error": done.error})
        if loop.time() + opts.final_backoff > start + opts.final_timeout:
            break
        await asyncio.sleep(opts.final_backoff)
    return process, {"f": inv.f, "outcome": done.type, "attempts": attempts,
                     "seconds": round(loop.time() - start, 3), "failures": failures}


async def run(workload: Workload, clients: Callable[[int], KVClient], rec: Recorder,
              opts: RunOptions, nemesis: Nemesis | None = None, heal: Heal | None = None,
              progress: Progress | None = None) -> list[dict]:
    """Setup ops; the timed main phase with the nemesis alongside; once every worker has
    stopped, the heal; then the final ops, on a healed cluster, each until ok (`_until_ok`).
    `clients(thread)` gives each worker thread its own client handle. Returns what each final
    op tried."""
    progress = progress or Progress(enabled=False)
    loop = asyncio.get_running_loop()
    # Setup and final ops use process ids above any worker's, so they never collide.
    await _sequential(workload.setup(), workload, clients(opts.concurrency), rec, SETUP_PROCESS,
                      opts.setup_timeout)
    deadline = loop.time() + opts.time_limit

    async def ticker():
        while True:
            progress.show(rec, opts.time_limit)
            await asyncio.sleep(0.5)

    tick = asyncio.create_task(ticker())
    try:
        pacer = Pacer(opts.rate, opts.seed, opts.bursts)
        tasks = [asyncio.create_task(_thread(t, opts, workload, clients(t), rec, deadline, loop, pacer))
                 for t in range(opts.concurrency)]
        if nemesis is not None:
            tasks.append(asyncio.create_task(nemesis(rec, deadline)))
        await asyncio.gather(*tasks)
        if heal is not None:
            await heal(rec)
        final, tried = workload.final(), []
        if final:
            await asyncio.sleep(opts.final_settle)
        client, process = clients(opts.concurrency), 2 * SETUP_PROCESS
        for inv in final:
            process, summary = await _until_ok(inv, workload, client, rec, process, opts)
            tried.append(summary)
        return tried
    finally:
        tick.cancel()
        progress.show(rec, opts.time_limit)
        progress.done()
