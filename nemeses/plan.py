"""The fault schedule as a pure plan, drawn from the seed before the run (Jepsen's generator
decides, the nemesis does): what each package does, when, and with which choices.

Like Jepsen's `nemesis.combined`, each package alternates start and stop every `interval`
seconds, packages staggered over the first interval so faults overlap; at the end every package
heals in heal order. Each package draws from its own stream, `Random(f"{seed}/nemesis/{name}")`,
so adding a package to a run leaves the others' choices as they were. The plan is written to the
run's `schedule.json`, and a replay executes the same plan again.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import msgspec

from nemeses.registry import Package


class Step(msgspec.Struct, frozen=True):
    at: float  # seconds after the main phase began
    package: str
    action: str  # start | stop
    choice: dict[str, Any] = {}  # start: what the package draws (targets, shape, or a rule)


class Plan(msgspec.Struct, frozen=True):
    seed: int
    interval: float
    time_limit: float
    hosts: list[str]
    steps: list[Step]
    heal: list[str]  # package names, in the order the final heal runs them


def plan(packages: Sequence[Package], hosts: list[str], seed: int, interval: float,
         time_limit: float) -> Plan:
    interval, time_limit, steps = float(interval), float(time_limit), []
    for i, p in enumerate(packages):
        rng = random.Random(f"{seed}/nemesis/{p.name}")
        # the workload runs undisturbed first; packages then start staggered over one interval
        t = interval * (i + 1) / len(packages) + rng.uniform(0, 1)
        while t + interval / 2 < time_limit:
            steps.append(Step(round(t, 3), p.name, "start", p.draw(rng, list(hosts))))
            steps.append(Step(round(min(t + interval, time_limit), 3), p.name, "stop"))
            t += 2 * interval
    steps.sort(key=lambda s: (s.at, s.package))
    heal = [p.name for p in sorted(packages, key=lambda p: (p.heal_rank, p.name))]
    return Plan(seed, interval, time_limit, list(hosts), steps, heal)


def dumps(p: Plan) -> bytes:
    return msgspec.json.format(msgspec.json.encode(p), indent=1) + b"\n"


def loads(data: bytes | str) -> Plan:
    return msgspec.json.decode(data, type=Plan)
