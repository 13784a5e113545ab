"""node.precise_timer: timerfd timers on both real loops, and the simulator's loop as its own.
Delays under SPIN_S take the spinning path, longer ones the timerfd's.

No test here asserts how precise a timer is (that is bench/replication.py's one-client p50 and
docs/benchmarks.md); they assert what callers rely on: every callback runs, none before its
delay, in deadline order, and a failing one neither stops the others nor the loop.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import uvloop

from harness.sim.loop import SimLoop
from harness.sim.network import SimNetwork
from node.precise_timer import TimerFd, precise_timers

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


def _run(factory, coro_fn):
    loop = factory()
    try:
        return loop.run_until_complete(coro_fn(loop))
    finally:
        loop.close()


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_callbacks_run_in_deadline_order_and_never_early(kind):
    async def go(loop):
        timers = precise_timers(loop)
        assert isinstance(timers, TimerFd)
        assert precise_timers(loop) is timers  # one timerfd per loop
        fired: list[tuple[str, float]] = []
        done = loop.create_future()
        delays = {"c": 0.0009, "a": 0.0001, "d": 0.003, "b": 0.0003, "e": 0.0}
        # A deadline is taken inside call_later, somewhere between these two clock reads; on a
        # loaded machine registering five timers can take longer than the gaps between delays,
        # so the order asserted is the deadlines' order, each known to within its window.
        window: dict[str, tuple[float, float]] = {}
        for name, delay in delays.items():
            before = time.monotonic()
            timers.call_later(delay, lambda n=name: fired.append((n, time.monotonic())))
            window[name] = (before + delay, time.monotonic() + delay)
        timers.call_later(0.004, done.set_result, None)
        await asyncio.wait_for(done, 5)
        order = [n for n, _ in fired]
        assert sorted(order) == sorted(delays)
        for i, earlier in enumerate(order):
            for later in order[i + 1:]:
                assert window[earlier][0] <= window[later][1], (order, window)
        for name, at in fired:
            assert at >= window[name][0]
    _run(LOOPS[kind], go)


@pytest.mark.parametrize("kind", sorted(LOOPS))
def test_a_failing_callback_is_reported_and_stops_nothing(kind):
    async def go(loop):
        errors = []
        loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx["exception"]))
        timers = precise_timers(loop)
        order: list[int] = []
        done = loop.create_future()

        def boom():
            raise ValueError("planted")

        deadline_delay = 0.0005
        for i in range(3):
            timers.call_later(deadline_delay, order.append, i)
        timers.call_later(deadline_delay, boom)
        for i in range(3, 6):
            timers.call_later(deadline_delay, order.append, i)
        timers.call_later(0.002, done.set_result, None)
        await asyncio.wait_for(done, 5)
        assert order == [0, 1, 2, 3, 4, 5]
        assert [str(e) for e in errors] == ["planted"]
    _run(LOOPS[kind], go)


def test_rearming_for_an_earlier_deadline_and_after_each_fire():
    """A later timer set first must not hold back an earlier one set after it (the timerfd is
    re-armed for the earlier deadline), and a fire that leaves timers pending re-arms for the
    next one."""
    async def go(loop):
        timers = precise_timers(loop)
        got = []
        first = loop.create_future()
        done = loop.create_future()
        timers.call_later(0.05, got.append, "late")
        late_deadline = timers._armed_for
        timers.call_later(0.002, first.set_result, None)
        assert timers._armed_for < late_deadline or timers._spinning
        timers.call_later(0.06, done.set_result, None)
        await asyncio.wait_for(first, 5)
        assert timers._armed_for == late_deadline or got == ["late"]
        await asyncio.wait_for(done, 5)
        assert got == ["late"] and timers._armed_for is None
    _run(uvloop.new_event_loop, go)


def test_the_simulators_loop_is_its_own_precise_timer():
    """Virtual time lands on every deadline: the simulator keeps its determinism and its
    crash semantics (a dead host's timers never run) because commit-wait uses its timers."""
    loop = SimLoop(SimNetwork(1))
    try:
        assert precise_timers(loop) is loop
    finally:
        loop.close()
