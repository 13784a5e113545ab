"""Swarm testing for the whole-stack simulator: each seed draws its own fault mix.

A fixed mix spreads a seed's faults thinly over every kind, so an interleaving that needs two
particular faults close together (a link cut between a leader and one follower while another
follower is tombstoned and copied) is rare in every seed. TigerBeetle's VOPR and Groce et al.'s
swarm testing draw instead, per seed, which faults are on at all, how often each fires, how often
faults come, and here also the read mode: most seeds then hammer a few kinds, and across seeds
every combination gets its turn. The mix is a pure function of the seed (its own random stream,
not the run's), so a seed replays with the same mix, and the mix is printed before the run.

`CLASSIC` is the mix every seed used before (and still does with `--mix classic`): the
recorded seeds of the tests and the mutant table were found with it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# Every fault kind the simulator's nemesis knows (node.sim.stack.StackSim._choose).
KINDS = ("crash", "power", "restart", "partition", "isolate", "heal", "reset", "skew",
         "membership", "flip", "disk", "transfer", "cut", "tombstone", "copy-race")
# Always on in a swarm mix: a crashed server comes back and a partition heals, or a seed that
# drew crashes and no restarts only ever runs degraded.
ALWAYS = ("restart", "heal")
WEIGHTS = (1, 2, 4, 8)  # a kind that is on fires with one of these relative weights
FAULT_EVERY = ((0.2, 0.8), (0.5, 2.0), (1.0, 4.0))  # (lo, hi) seconds between two faults
LOADS = ((5, 50.0), (10, 100.0), (20, 200.0))  # (clients, ops/s over all of them)
P_ON = 0.5  # the chance each optional kind is on
MIN_ON = 2  # optional kinds on, at least


@dataclass(frozen=True)
class Mix:
    """Which faults fire and how often (relative weights), the pause between two faults, and
    the replicas' read mode."""

    weights: tuple[tuple[str, int], ...]
    fault_every_s: tuple[float, float]
    read_mode: str = "linearizable"
    name: str = "swarm"
    # the workload's clients and their op rate (ops/s over all), None: the run's own; more
    # clients keep proposals coming to a leader whose other clients all wait on it
    concurrency: int | None = None
    rate: float | None = None

    def kinds(self) -> list[str]:
        return [k for k, _ in self.weights]

    def describe(self) -> str:
        """One line, printed before the seed runs: enough to see what the seed hammers."""
        kinds = " ".join(f"{k}x{w}" for k, w in self.weights)
        lo, hi = self.fault_every_s
        load = "" if self.concurrency is None else f"; {self.concurrency} clients at {self.rate:g} ops/s"
        return f"{self.name}: {kinds}; a fault every {lo:g}-{hi:g} s; reads {self.read_mode}{load}"

    def as_json(self) -> dict:
        return {"name": self.name, "weights": dict(self.weights),
                "fault_every_s": list(self.fault_every_s), "read_mode": self.read_mode,
                "concurrency": self.concurrency, "rate": self.rate}


# The fixed mix (its list of kinds, with crash, restart and membership twice, is the one the
# nemesis drew from uniformly before swarm mixes existed).
CLASSIC = Mix((("crash", 2), ("power", 1), ("restart", 2), ("partition", 1), ("isolate", 1),
               ("heal", 1), ("reset", 1), ("skew", 1), ("membership", 2), ("flip", 1),
               ("disk", 1), ("transfer", 1)), (1.0, 4.0), "linearizable", "classic")


def swarm_mix(seed: int) -> Mix:
    """Seed `seed`'s own mix. Its stream is `swarm/<seed>`, apart from the run's, so choosing
    the mix never shifts the run's other random choices."""
    rng = random.Random(f"swarm/{seed}")
    optional = [k for k in KINDS if k not in ALWAYS]
    on = [k for k in optional if rng.random() < P_ON]
    if len(on) < MIN_ON:
        on = sorted(set(on) | set(rng.sample(optional, MIN_ON)), key=KINDS.index)
    weights = tuple((k, rng.choice(WEIGHTS)) for k in KINDS if k in on or k in ALWAYS)
    every = rng.choice(FAULT_EVERY)
    read_mode = "lease" if rng.random() < 0.5 else "linearizable"
    concurrency, rate = rng.choice(LOADS)
    return Mix(weights, every, read_mode, concurrency=concurrency, rate=rate)


def mix_for(name: str, seed: int) -> Mix:
    """`--mix swarm` (each seed its own) or `--mix classic` (the fixed mix)."""
    if name == "classic":
        return CLASSIC
    if name == "swarm":
        return swarm_mix(seed)
    raise ValueError(f"unknown fault mix {name!r} (swarm or classic)")
