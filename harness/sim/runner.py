"""Runs many seeds and summarises them; replays a failing seed with its readable trace."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from node import probes

from .cluster import LIVENESS_BOUND_MS, RunResult, Simulation


@dataclass
class Summary:
    seeds: int = 0
    steps: int = 0
    seconds: float = 0.0
    failures: list[RunResult] = field(default_factory=list)  # safety violations
    liveness_failures: list[int] = field(default_factory=list)  # seeds that did not recover
    leader_ms: list[int] = field(default_factory=list)
    commit_ms: list[int] = field(default_factory=list)
    probes: list[dict] = field(default_factory=list)  # each seed's code probe hits (node.probes)

    def as_json(self) -> dict:
        out = {
            "seeds": self.seeds,
            "violations": len(self.failures),
            "seconds": round(self.seconds, 2),
            "steps_per_s": round(self.steps / self.seconds) if self.seconds else 0,
            "steps": self.steps,
            "liveness_bound_ms": LIVENESS_BOUND_MS,
            "liveness_failures": len(self.liveness_failures),
        }
        for name, values in (("leader_ms", self.leader_ms), ("commit_ms", self.commit_ms)):
            for label, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
                out[f"{name}_{label}"] = _quantile(values, q)
            out[f"{name}_max"] = max(values) if values else None
        if self.failures:
            out["violating_seeds"] = [r.seed for r in self.failures]
        return out


def _quantile(values: list[int], q: float) -> int | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_seeds(
    seeds: int, first_seed: int = 0, nodes: int = 3, steps: int = 3000, stop_at_first: bool = False,
    core_options: dict | None = None,
) -> Summary:
    """`core_options`: further CoreConfig fields for every node (e.g. an unsafe one)."""
    summary = Summary()
    start = time.perf_counter()
    for seed in range(first_seed, first_seed + seeds):
        probes.enable()
        try:
            result = Simulation(seed, nodes=nodes, steps=steps, core_options=core_options).run()
        finally:
            summary.probes.append(probes.hits())
            probes.disable()
        summary.seeds += 1
        summary.steps += result.steps
        if result.violation is not None:
            summary.failures.append(result)
            if stop_at_first:
                break
        elif result.commit_ms is None:
            summary.liveness_failures.append(seed)
        else:
            summary.leader_ms.append(result.leader_ms)
            summary.commit_ms.append(result.commit_ms)
    summary.seconds = time.perf_counter() - start
    return summary


def run_for(seconds: float, first_seed: int = 0, nodes: int = 3, steps: int = 3000,
            core_options: dict | None = None, clock=time.perf_counter) -> Summary:
    """Seeds from `first_seed` on, one after another, until `seconds` have passed (at least one):
    as many as a time budget holds, for the nightly matrix."""
    summary, start = Summary(), clock()
    while summary.seeds == 0 or clock() - start < seconds:
        one = run_seeds(1, first_seed + summary.seeds, nodes, steps, core_options=core_options)
        summary.seeds += 1
        summary.steps += one.steps
        summary.failures += one.failures
        summary.liveness_failures += one.liveness_failures
        summary.leader_ms += one.leader_ms
        summary.commit_ms += one.commit_ms
        summary.probes += one.probes
    summary.seconds = clock() - start
    return summary


def fault_core_options(faults) -> dict:
    """The CoreConfig fields the engine's fault flags (node.faults) change, as node.replica.replica maps
    them: the simulator then runs the same deliberate bugs in the core it drives."""
    from dataclasses import fields

    from node.replica.replica import ReplicaOptions

    bad, good = ReplicaOptions(faults=faults).core_config("sim"), ReplicaOptions().core_config("sim")
    return {f.name: getattr(bad, f.name) for f in fields(bad)
            if getattr(bad, f.name) != getattr(good, f.name)}


def replay_report(seed: int, nodes: int, steps: int, tail: int = 80,
                  core_options: dict | None = None, faults: list[str] = ()) -> str:
    """Re-run one seed with tracing on (same seed, same run) and describe what went wrong;
    `faults` are the fault flag names behind `core_options`, for the replay command."""
    sim = Simulation(seed, nodes=nodes, steps=steps, trace=True, core_options=core_options)
    result = sim.run()
    lines = [
        f"seed {seed} ({nodes} nodes, {steps} steps): {result.violation or 'no violation'}",
        "leaders by term: " + ", ".join(f"{t}:{u}" for t, u in sim.leaders_by_term().items()),
        "final logs (last index/term, commit): " + ", ".join(
            f"{n.uuid} {len(n.disk.log)}/{n.disk.log[-1].term if n.disk.log else 0} c{n.commit}"
            for n in sim.nodes
        ),
        f"last {tail} trace lines (heartbeats omitted):",
    ]
    events = [line for line in result.trace if "Heartbeat" not in line]
    lines.extend(events[-tail:])
    lines.append(f"replay: {replay_command(seed, nodes, steps, faults)}")
    return "\n".join(lines)


def replay_command(seed: int, nodes: int, steps: int, faults: list[str] = ()) -> str:
    return (f"tessera sim --seeds 1 --seed {seed} --nodes {nodes} --steps {steps}"
            + "".join(f" --fault {f}" for f in faults))
