"""A fake clock for the nemesis schedule's unit tests (nemeses.schedule.Clock's interface)."""

from __future__ import annotations

import asyncio
import heapq


class FakeClock:
    """Virtual time for the executor and its packages' tasks: a sleeper wakes once every other
    task is asleep here, done, or waiting on another task, so a fake fault (run in a thread,
    as the executor runs every fault) takes no time, and time jumps to the next wake-up."""

    def __init__(self):
        self.t = 1000.0
        self._sleepers: list = []  # (wake time, order, future, task)
        self._order = 0
        self._driver: asyncio.Task | None = None

    def now(self):
        return self.t

    async def sleep(self, seconds):
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.t + seconds, self._order, fut, asyncio.current_task()))
        self._order += 1
        if self._driver is None or self._driver.done():
            self._driver = asyncio.create_task(self._drive())
        await fut

    def _busy(self) -> bool:
        asleep = {s[3] for s in self._sleepers}
        for task in asyncio.all_tasks() - {asyncio.current_task()} - asleep:
            waiting = getattr(task, "_fut_waiter", None)  # what the task awaits now
            if not (isinstance(waiting, asyncio.Task) or type(waiting).__name__ == "_GatheringFuture"):
                return True  # runnable, or waiting on a thread
        return False

    async def _drive(self):
        while self._sleepers:
            while self._busy():
                await asyncio.sleep(0.001)
            when, _, fut, _ = heapq.heappop(self._sleepers)
            self.t = max(self.t, when)
            fut.set_result(None)
            await asyncio.sleep(0)
