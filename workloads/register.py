"""Independent registers: read, write and cas on many keys, checked per key as a cas-register.

Keys rotate by Jepsen's independent generator (`workloads.independent`), so each key's history
stays small enough for the linearizability search. With value_sizes=wide the values written are
padded up to the RPC frame limit (`workloads.values`); the history still holds the small ints.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from workloads.base import Checker, Invocation, KVClient, Workload, register
from workloads.independent import IndependentKeys
from workloads.outcomes import OpFailed
from workloads.values import DEFAULT_LIMIT, ValueSizes


@register
@dataclass
class Register(Workload):
    name: str = "register"
    tablets: int = 4
    threads_per_key: int = 5
    ops_per_key: int = 200
    values: int = 5
    read_share: float = 0.5  # the rest is writes and cas, half each
    # "wide": values padded to sizes up to value_max_bytes (workloads.values); value_seed varies
    # the sizes between runs (the simulator passes its seed). 0: DEFAULT_LIMIT.
    value_sizes: str = "small"
    value_max_bytes: int = 0
    value_seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sizes = ValueSizes(self.value_sizes, self.value_max_bytes or DEFAULT_LIMIT,
                                self.value_seed)

    @property
    def checker(self) -> Checker:
        return Checker("cas-register")

    def ops(self, thread: int, threads: int, rng: random.Random) -> Iterator[Invocation]:
        keys = IndependentKeys(self.threads_per_key, self.ops_per_key)
        for n in itertools.count():
            key = f"r{keys.key(thread, threads, n)}"
            roll = rng.random()
            if roll < self.read_share:
                yield Invocation("read", None, key)
            elif roll < (1 + self.read_share) / 2:
                yield Invocation("write", rng.randrange(self.values), key)
            else:
                yield Invocation("cas", [rng.randrange(self.values), rng.randrange(self.values)], key)

    async def apply(self, client: KVClient, inv: Invocation):
        enc = self.sizes.encode
        if inv.f == "read":
            return self.sizes.decode(inv.key, await client.read(inv.key))
        if inv.f == "write":
            await client.write(inv.key, enc(inv.key, inv.value))
            return inv.value
        expected, new = inv.value
        if not await client.cas(inv.key, enc(inv.key, expected), enc(inv.key, new)):
            raise OpFailed("cas mismatch")
        return inv.value
