"""Waiting on the whole-stack simulator's state, for faults that time their steps by it (a
write running behind, a replica FAILED, a message in an inbox): a predicate
polled on virtual time until it holds or a deadline passes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(sim, done: Callable[[], object], seconds: float, every: float = 0.01) -> bool:
    """Poll `done` every `every` virtual s for up to `seconds`; whether it came to hold."""
    deadline = sim.loop.time() + seconds
    while not done():
        if sim.loop.time() >= deadline:
            return False
        await asyncio.sleep(every)
    return True

