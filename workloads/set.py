"""Set: adds of unique elements, then one final read; every acknowledged add must be there."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from workloads.base import Invocation, KVClient, Workload

SET_KEY = "set"


@dataclass
class SetWorkload(Workload):
    name: str = "set"
    checker: str = "set"
    tablets: int = 1

    def ops(self, thread: int, threads: int, rng: random.Random) -> Iterator[Invocation]:
        for n in itertools.count():
            yield Invocation("add", thread + n * threads)

    def final(self) -> list[Invocation]:
        return [Invocation("read")]

    async def apply(self, client: KVClient, inv: Invocation):
        if inv.f == "add":
            await client.append(SET_KEY, inv.value)
            return inv.value
        return sorted(await client.read(SET_KEY) or [])
