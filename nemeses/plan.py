"""The fault schedule as a pure plan, drawn from the seed before the run (Jepsen's generator
decides, the nemesis does): what each package does, when, and with which choices.

Like Jepsen's `nemesis.combined`, each package alternates start and stop: each fault holds for
`interval` seconds, then rests for a random 0.5 to 1.5 intervals (Jepsen's `stagger`), so two
packages overlap in some cycles and not in others. Fixed phases would pin every pair of packages
to the same overlap for the whole run: when the plan staggered the packages in their declared
order, `membership-race` started inside `all-kill`'s hold in every cycle and never fired. At the
end every package heals in heal order.

Each package draws its choices from its own stream, `Random(f"{seed}/nemesis/{name}")`, and its
times from another, `Random(f"{seed}/nemesis/{name}/time")`, so adding a package to a run leaves
the others' choices and times as they were. The plan is written to the run's `schedule.json`,
and a replay executes the same plan again.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import msgspec

from nemeses.registry import Package

FIRST_START = 0.2  # the earliest first start, in intervals: the workload's undisturbed lead
REST = (0.5, 1.5)  # a package's rest between a stop and its next start, in intervals (mean 1)


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
    for p in packages:
        rng = random.Random(f"{seed}/nemesis/{p.name}")
        clock = random.Random(f"{seed}/nemesis/{p.name}/time")
        # the workload runs undisturbed for a while first; each package's first start falls
        # somewhere in the first interval, every later one after a random rest
        t = clock.uniform(FIRST_START, 1.0) * interval
        while t + interval / 2 < time_limit:
            steps.append(Step(round(t, 3), p.name, "start", p.draw(rng, list(hosts))))
            steps.append(Step(round(min(t + interval, time_limit), 3), p.name, "stop"))
            t += interval + clock.uniform(*REST) * interval
    steps.sort(key=lambda s: (s.at, s.package))
    heal = [p.name for p in sorted(packages, key=lambda p: (p.heal_rank, p.name))]
    return Plan(seed, interval, time_limit, list(hosts), steps, heal)


def dumps(p: Plan) -> bytes:
    return msgspec.json.format(msgspec.json.encode(p), indent=1) + b"\n"


def loads(data: bytes | str) -> Plan:
    return msgspec.json.decode(data, type=Plan)
