"""What a nemesis is: a fault that can be started on targets, stopped, and finally healed.

`start` and `stop` return a description of exactly what was done, which the scheduler records
as the value of the nemesis op in the history. `heal` must be safe to call at any time, twice,
or after a crash of the harness, because it is what leaves the cluster as it was.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

TARGET_SPECS = ("one", "minority", "majority", "all")


def choose_targets(spec: str, hosts: list[str], rng: random.Random) -> list[str]:
    n = len(hosts)
    count = {"one": 1, "minority": max(1, (n - 1) // 2), "majority": n // 2 + 1, "all": n}.get(spec)
    if count is None:
        raise ValueError(f"unknown target spec {spec!r} (known: {', '.join(TARGET_SPECS)})")
    return sorted(rng.sample(hosts, count))


@dataclass
class Nemesis:
    name: str = "nemesis"
    active: bool = False

    def start(self, rng: random.Random) -> dict:
        raise NotImplementedError

    def stop(self) -> dict:
        raise NotImplementedError

    def heal(self) -> dict:
        return self.stop() if self.active else {}

    def teardown(self) -> None:
        """After the daemons are gone: remove any file the fault needed on the hosts."""
