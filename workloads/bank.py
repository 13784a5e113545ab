"""Bank: transfers between accounts in one tablet and reads of every balance.

A transfer is one transaction [add from -n] [require_ge from 0] [add to +n]: it aborts as a whole
rather than overdraw, so every read must see the same total and no negative balance.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass

from workloads.base import Checker, Invocation, KVClient, Workload, answer, register


@register
@dataclass
class Bank(Workload):
    name: str = "bank"
    tablets: int = 1
    accounts: int = 8
    total: int = 100
    max_transfer: int = 5

    @property
    def checker(self) -> Checker:
        """With the total this run really had, never a guessed one."""
        return Checker("bank", {"total": self.total})

    def _keys(self) -> list[str]:
        return [f"acct{i}" for i in range(self.accounts)]

    def setup(self) -> list[Invocation]:
        each, rest = divmod(self.total, self.accounts)
        writes = [["w", k, each + (1 if i < rest else 0)] for i, k in enumerate(self._keys())]
        return [Invocation("init", writes)]

    def ops(self, thread: int, threads: int, rng: random.Random) -> Iterator[Invocation]:
        for _ in itertools.count():
            if rng.random() < 0.4:
                yield Invocation("read")
            else:
                a, b = rng.sample(range(self.accounts), 2)
                yield Invocation("transfer", {"from": a, "to": b,
                                              "amount": rng.randint(1, self.max_transfer)})

    def final(self) -> list[Invocation]:
        return [Invocation("read")]

    async def apply(self, client: KVClient, inv: Invocation):
        keys = self._keys()
        if inv.f == "init":
            answer(inv.value, await client.txn(inv.value))
            return inv.value
        if inv.f == "read":
            reads = [["r", k, None] for k in keys]
            done = answer(reads, await client.txn(reads))
            return {int(k[4:]): v for _, k, v in done}
        src, dst, n = keys[inv.value["from"]], keys[inv.value["to"]], inv.value["amount"]
        ops = [["add", src, -n], ["require_ge", src, 0], ["add", dst, n]]
        answer(ops, await client.txn(ops))
        return inv.value
