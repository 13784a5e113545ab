"""Set: adds of unique elements mixed with reads of the whole set during the run (Jepsen's
set-full shape), then one final read after the heal. Reads during the run are what let the checker
tell stale and lost elements apart from ones that were merely never read."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from workloads.base import Checker, Invocation, KVClient, Workload, register

SET_KEY = "set"


@register
@dataclass
class SetWorkload(Workload):
    name: str = "set"
    tablets: int = 1
    # Each read returns the whole set, so reads cost more as it grows: a tenth of ops keeps many
    # reads per element without their payload dominating the history.
    read_fraction: float = 0.1

    @property
    def checker(self) -> Checker:
        return Checker("set")

    def ops(self, thread: int, threads: int, rng: random.Random) -> Iterator[Invocation]:
        elements = itertools.count(thread, threads)  # unique across threads
        while True:
            if rng.random() < self.read_fraction:
                yield Invocation("read")
            else:
                yield Invocation("add", next(elements))

    def final(self) -> list[Invocation]:
        return [Invocation("read")]

    async def apply(self, client: KVClient, inv: Invocation):
        if inv.f == "add":
            await client.append(SET_KEY, inv.value)
            return inv.value
        return sorted(await client.read(SET_KEY) or [])
