"""Elle's list-append: transactions of appends and reads over a few keys in one tablet."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from workloads.base import Invocation, KVClient, Workload


@dataclass
class ListAppend(Workload):
    name: str = "list-append"
    checker: str = "list-append"
    tablets: int = 1
    active_keys: int = 8
    max_txn_len: int = 4
    appends_per_key: int = 64

    def ops(self, thread: int, threads: int, rng: random.Random) -> Iterator[Invocation]:
        # Appended values are unique per key across threads: thread + k * threads.
        counter = itertools.count()
        for _ in itertools.count():
            txn = []
            for _ in range(rng.randint(1, self.max_txn_len)):
                n = next(counter)
                slot = rng.randrange(self.active_keys)
                key = f"k{slot + self.active_keys * (n // (self.appends_per_key * self.active_keys))}"
                if rng.random() < 0.5:
                    txn.append(["r", key, None])
                else:
                    txn.append(["append", key, thread + n * threads])
            yield Invocation("txn", txn)

    async def apply(self, client: KVClient, inv: Invocation):
        return await client.txn(inv.value)
