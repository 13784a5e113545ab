"""Watches, as Jepsen's etcd suite tests them (jepsen-io/etcd watch.clj): some threads write
increasing values to one key; the others watch it, each watch from the revision after the last
event the thread saw, for a random while (up to `watch_s`), so together each thread's watches
cover the key's whole history. After the heal one final watch from revision 1 reads every
event. The watch checker (reports/checkers/watch.py) wants every thread's events to be exactly
the key's, in order, with no gaps.

A watch starts at revision 1, never 0: etcd takes 0 as "from now" (etcd-io/etcd#11496, the
edge case Jepsen reported). The client must offer `watch(key, from_revision, seconds)` and
`watch_until(key, revision, timeout)` (harness.systems.etcd.deployment.EtcdClient).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from workloads.base import Checker, Invocation, Workload, register

KEY = "w"


@register
@dataclass
class Watch(Workload):
    name: str = "watch"
    watch_s: float = 2.0  # the longest watch (below the op timeout)
    seed: int = 0
    _next: dict = field(default_factory=dict)  # thread -> the revision its next watch starts at

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.watch_s <= 0:
            raise ValueError("watch_s must be positive")
        self._rng = random.Random(self.seed)

    @property
    def checker(self) -> Checker:
        return Checker("watch")

    def ops(self, thread: int, threads: int, rng: random.Random) -> Iterator[Invocation]:
        writers = max(1, threads // 2)
        if thread < writers:
            for n in itertools.count():
                yield Invocation("write", thread + n * writers)
        while True:
            yield Invocation("watch", {"thread": thread})

    def final(self) -> list[Invocation]:
        return [Invocation("final-watch")]

    async def apply(self, client, inv: Invocation):
        if inv.f == "write":
            await client.write(KEY, inv.value)
            return inv.value
        if inv.f == "final-watch":
            return {"events": await client.watch_until(KEY, 1, timeout=30.0)}
        thread = inv.value["thread"]
        start = self._next.get(thread, 1)
        events = await client.watch(KEY, start, self._rng.uniform(0, self.watch_s))
        if events:
            self._next[thread] = events[-1][0] + 1
        return {"thread": thread, "from": start, "events": events}
