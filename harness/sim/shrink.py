"""Shrinking a failing whole-stack seed to a small fault schedule (`tessera sim --shrink`).

A failing seed applied a few dozen faults; most are noise. The seed fixes everything else (the
workload's ops, latencies, servers' random choices), and `StackConfig.schedule` replays a given
list of faults at their virtual times, so delta debugging (Zeller's ddmin) over that list finds a
schedule from which no single chunk can be dropped without the failure going away. Candidates
of one round run in parallel worker processes. Removing faults changes the run's interleaving,
so a shrunk schedule may fail differently (another invariant, or the checker instead of one):
any failure counts, as in Jepsen's and TigerBeetle's shrinkers. But a run that could not be
judged (unknown: a worker out of memory, a crash) is no failure of the engine's: it counts only
when the seed itself ended so: a seed of wide values whose faults kept its logs short can, with
fewer faults, grow a worker past its memory bound, so that every small schedule "fails", and
ddmin would shrink a state machine safety violation to an empty schedule that has nothing to do
with it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from pathlib import Path

from harness.sim.stack import StackConfig, StackResult, run_seeds


def ddmin(items: list, fails: Callable[[list[list]], list[bool]]) -> list:
    """A 1-minimal sublist of `items` that still fails. `fails` judges a batch of candidate
    sublists at once (so they can run in parallel)."""
    if fails([[]])[0]:
        return []
    n = 2
    while len(items) >= 2:
        size = -(-len(items) // n)
        chunks = [items[i:i + size] for i in range(0, len(items), size)]
        complements = [[x for j, c in enumerate(chunks) if j != i for x in c]
                       for i in range(len(chunks))]
        verdicts = fails(chunks + complements)
        failing_chunk = next((c for c, v in zip(chunks, verdicts[:len(chunks)], strict=True) if v), None)
        if failing_chunk is not None:
            items, n = failing_chunk, 2
            continue
        failing_rest = next((c for c, v in zip(complements, verdicts[len(chunks):], strict=True) if v), None)
        if failing_rest is not None:
            items, n = failing_rest, max(n - 1, 2)
            continue
        if n >= len(items):
            break
        n = min(2 * n, len(items))
    return items


def shrink(cfg: StackConfig, first: StackResult, out_root: Path, jobs: int,
           say: Callable[[str], None] = lambda _: None) -> tuple[list, StackResult]:
    """A small schedule on which `cfg`'s seed still fails, and the result of running it.
    `first` is the failing run of `cfg` (its `events` are the schedule to shrink)."""
    trial = itertools.count(1)
    judged = _judged_failure(first)

    def fails(candidates: list[list]) -> list[bool]:
        batch = next(trial)
        configs = [dataclasses.replace(cfg, schedule=tuple(map(tuple, c))) for c in candidates]
        results = run_seeds(configs, out_root / f"round-{batch}", jobs,
                            names=[f"candidate-{i}" for i in range(len(configs))])
        verdicts = [not r.ok() and (_judged_failure(r) or not judged) for r in results]
        say(f"shrink round {batch}: {len(candidates)} candidates of "
            f"{sorted({len(c) for c in candidates})} faults, {sum(verdicts)} still fail")
        return verdicts

    minimal = ddmin([list(e) for e in first.events], fails)
    # Once more into a directory of its own: the history to read, and proof that it replays.
    result = run_seeds([dataclasses.replace(cfg, schedule=tuple(map(tuple, minimal)))],
                       out_root, jobs, names=["minimal"])[0]
    return minimal, result


def _judged_failure(r: StackResult) -> bool:
    """The run failed on a verdict (an invariant, or the checker's invalid), not for want of
    one (unknown)."""
    return r.violation is not None or r.verdict == "invalid"
