"""The combined nemesis schedule, like Jepsen's `nemesis.combined`: each fault package
alternates start and stop every `interval` seconds, packages staggered so faults overlap, and
at the end every fault heals in a fixed order before the final reads.

Every start, stop and heal is a pair of ops in the history (process "nemesis": an `info`
invoke, then an `info` completion whose value says exactly what was done), and the coverage
(how often each fault fired and healed) goes into results.json.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from harness.recorder import Recorder
from nemeses.base import Nemesis

HEAL_ORDER = ("partition", "packet", "clock", "pause", "kill", "membership", "disk")


class Schedule:
    def __init__(self, nemeses: list[Nemesis], interval: float, seed: int, active: set | None = None):
        self.nemeses = nemeses
        self.interval = interval
        self.rng = random.Random(f"nemesis/{seed}")
        self.coverage: Counter = Counter()
        self.active = active if active is not None else set()

    async def _do(self, rec: Recorder, n: Nemesis, action: str) -> None:
        f = f"{action}-{n.name}"
        rec.record("nemesis", "info", f, None)
        try:
            done = await asyncio.to_thread(n.start, self.rng) if action == "start" else \
                await asyncio.to_thread(n.stop if action == "stop" else n.heal)
            rec.record("nemesis", "info", f, done)
            if action == "start" and isinstance(done, dict) and "skipped" in done:
                self.coverage[f"{f}-skipped"] += 1  # nothing was done: not a firing
                return
            self.coverage[f] += 1
            if action == "start":
                self.active.add(n.name)
            else:
                self.active.discard(n.name)
        except Exception as e:  # a fault that failed to apply is recorded, and the run goes on
            rec.record("nemesis", "info", f, None, error=f"{type(e).__name__}: {e}")
            self.coverage[f"{f}-failed"] += 1

    async def run(self, rec: Recorder, deadline: float) -> None:
        """Until the deadline: each package's start/stop cycle, offset by i * interval / n."""
        if not self.nemeses:
            return
        loop = asyncio.get_running_loop()

        async def package(i: int, n: Nemesis) -> None:
            # the workload runs undisturbed first; packages then start staggered over one interval
            await asyncio.sleep(self.interval * (i + 1) / len(self.nemeses) + self.rng.uniform(0, 1))
            while loop.time() + self.interval / 2 < deadline:
                await self._do(rec, n, "start")
                await asyncio.sleep(min(self.interval, max(0, deadline - loop.time())))
                await self._do(rec, n, "stop")
                await asyncio.sleep(min(self.interval, max(0, deadline - loop.time())))

        await asyncio.gather(*(package(i, n) for i, n in enumerate(self.nemeses)))

    async def heal(self, rec: Recorder) -> None:
        order = {name: i for i, name in enumerate(HEAL_ORDER)}
        for n in sorted(self.nemeses, key=lambda n: order.get(n.name, len(order))):
            await self._do(rec, n, "heal")

    def summary(self) -> dict:
        fired = {n.name: self.coverage[f"start-{n.name}"] for n in self.nemeses}
        return {"counts": dict(self.coverage), "fired": fired,
                "never_fired": [name for name, c in fired.items() if c == 0]}
