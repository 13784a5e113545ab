"""Locks guarding a set, as Jepsen's etcd suite tests etcd's lock API (jepsen-io/etcd lock.clj):
each add takes the lock (on a lease of `ttl_s`, kept alive by the client), reads the set,
waits a random while up to 2 x `latency_s` (work done under the lock), writes the set with the
element added, and releases the lock. The set checker (Jepsen's set-full) judges the adds: a
lost add means two clients held the lock at once.

- `lock-set` keeps the set in the harness's memory, outside the database: only mutual
  exclusion protects it, and a lock on a lease cannot promise that in an asynchronous network
  (a holder paused or cut off past its lease still thinks it holds the lock). Jepsen found
  lost adds with a 2 s TTL under pauses and partitions.
- `lock-etcd-set` keeps the set in etcd and makes the write itself conditional on the lock key
  still existing (an etcd txn), so a holder whose lease expired cannot write: it stays correct.

The client must offer `acquire(name, ttl_s) -> (key, lease)`, `release(key, lease)` and
`put_if_held(key, value, lock_key)` (harness.systems.etcd.deployment.EtcdClient).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from workloads.base import Invocation, register
from workloads.outcomes import OpFailed, OpUnknown
from workloads.set import SetWorkload

LOCK = "foo"  # Jepsen's lock name
SET_KEY = "a-set"  # lock-etcd-set's key


@register
@dataclass
class LockSet(SetWorkload):
    """The set workload's ops and checker; its adds go through the lock."""

    name: str = "lock-set"
    ttl_s: float = 2.0  # the lock's lease (Jepsen: 2 s)
    latency_s: float = 1.0  # the work under the lock takes up to twice this (Jepsen: 1 s)
    seed: int = 0
    shared: list = field(default_factory=list)  # lock-set's set, in the harness's memory

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ttl_s < 1 or self.latency_s < 0:
            raise ValueError("lock workloads need ttl_s >= 1 (etcd leases are whole seconds) "
                             "and latency_s >= 0")
        self._rng = random.Random(self.seed)

    async def _work(self) -> None:
        await asyncio.sleep(self._rng.uniform(0, 2 * self.latency_s))

    async def apply(self, client, inv: Invocation):
        if inv.f == "read":
            return sorted(self.shared)
        try:
            key, lease = await client.acquire(LOCK, self.ttl_s)
        except (OpFailed, OpUnknown) as e:  # no add was made without the lock
            raise OpFailed(f"lock not acquired: {e}") from None
        try:
            before = list(self.shared)
            await self._work()
            self.shared = before + [inv.value]
            return inv.value
        finally:
            await client.release(key, lease)


@register
@dataclass
class LockEtcdSet(LockSet):
    name: str = "lock-etcd-set"

    async def apply(self, client, inv: Invocation):
        if inv.f == "read":
            return sorted(await client.read(SET_KEY) or [])
        try:
            key, lease = await client.acquire(LOCK, self.ttl_s)
        except (OpFailed, OpUnknown) as e:
            raise OpFailed(f"lock not acquired: {e}") from None
        try:
            before = await client.read(SET_KEY) or []  # a failed read wrote nothing: fail
            await self._work()
            if not await client.put_if_held(SET_KEY, before + [inv.value], key):
                raise OpFailed("the lock key was gone at the write (its lease expired): "
                               "not applied")
            return inv.value
        finally:
            await client.release(key, lease)
