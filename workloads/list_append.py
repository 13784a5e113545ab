"""Elle's list-append: transactions of appends and reads over a few keys of one tablet.

Keys come from Jepsen's independent generator (`workloads.independent`): each group of threads
works on one key set at a time, a fresh set after `ops_per_key` transactions, and successive sets
lie in successive tablets. A set's keys all hash to its tablet's bucket, since a transaction must
keep its keys in one tablet.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar

from reports.checkers.consistency import DEFAULT_MODEL, MODEL_NAMES
from workloads.base import Checker, Invocation, KVClient, Workload, answer, register
from workloads.independent import IndependentKeys


@functools.cache
def key_set(i: int, tablets: int, size: int,
            placement: Callable[[str, int], int] | None = None) -> tuple[str, ...]:
    """Key set `i`: `size` keys in group i mod tablets, as the system places keys
    (`Workload.placement`); the first `size` names when it has no groups."""
    names = (f"k{i}.{m}" for m in itertools.count())
    if placement is not None and tablets > 1:
        names = (k for k in names if placement(k, tablets) == i % tablets)
    return tuple(itertools.islice(names, size))


@register
@dataclass
class ListAppend(Workload):
    name: str = "list-append"
    tablets: int = 4
    active_keys: int = 8  # keys per set
    max_txn_len: int = 4
    threads_per_key: int = 5
    ops_per_key: int = 400  # transactions per key set
    # The model the history must satisfy (reports.checkers.consistency.MODEL_NAMES): a system
    # that claims less than strict serializability, say repeatable read, is judged by its claim,
    # so a history is invalid only for what that model forbids (`--consistency-model`).
    consistency_model: str = DEFAULT_MODEL
    # The micro-op that writes (rw-register's subclass: "w", a register's new value).
    write_f: ClassVar[str] = "append"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.consistency_model not in MODEL_NAMES:
            raise ValueError(f"--consistency-model {self.consistency_model!r}: not one of "
                             f"{', '.join(MODEL_NAMES)}")

    @property
    def checker(self) -> Checker:
        if self.consistency_model == DEFAULT_MODEL:
            return Checker(self.name, self.checker_options())  # as runs recorded before the option
        return Checker(self.name, {**self.checker_options(), "consistency_model": self.consistency_model})

    def checker_options(self) -> dict:
        return {}

    def ops(self, thread: int, threads: int, rng: random.Random) -> Iterator[Invocation]:
        # Written values are unique across threads: thread + n * threads.
        sets = IndependentKeys(self.threads_per_key, self.ops_per_key)
        counter = itertools.count()
        for t in itertools.count():
            keys = key_set(sets.key(thread, threads, t), self.tablets, self.active_keys,
                           self.placement)
            txn = []
            for _ in range(rng.randint(1, self.max_txn_len)):
                key = rng.choice(keys)
                if rng.random() < 0.5:
                    txn.append(["r", key, None])
                else:
                    txn.append([self.write_f, key, thread + next(counter) * threads])
            yield Invocation("txn", txn)

    async def apply(self, client: KVClient, inv: Invocation):
        return answer(inv.value, await client.txn(inv.value))
