"""The matrix's simulation cell: the deterministic Raft simulator (`tessera sim`) run for the
cell's time limit, seed after seed, on the same core code the chaos runs deploy.

A chaos run on real processes meets Raft's rare interleavings (an earlier term's entry committed
by counting, Raft's figure 8; a follower keeping a conflicting suffix) only by luck: a 5-minute
matrix makes a few dozen elections. The simulator makes thousands of seeds a minute, each with
drops, partitions, crashes and config changes, and checks the Raft invariants after every step,
so a core bug shows up in seconds. The fault flags of the run that act in the core
(harness.sim.runner.fault_core_options) run in the simulated cores too, so the self-check can
ask the simulator as well. A violation makes the cell invalid, naming the invariant and a replay
command; seeds that did not recover after the final heal are listed but do not decide the verdict
(the chaos cells judge availability).
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.matrix import Cell, Outcome
from node import probes

KIND = "sim"  # Cell.workload of a simulation cell
FULL_KIND = "sim-full"  # Cell.workload of a whole-stack simulation cell (tessera sim --stack full)
# Virtual seconds of one seed of that cell. Per CPU second, short seeds reach more code probes:
# the matrix's mix of seeds (half swarm) at 15 s reached 148 probes in 73 CPU s (40 seeds), at
# 60 s 126 in 56 (10 seeds), at 7.5 s 142 in 108 (80 seeds: start-up dominates). See
# docs/benchmarks/history.md, "2026-11-29: matrix seeds: probes per CPU second by seed length".
FULL_SEED_S = 15.0
NODES = 3
STEPS = 3000


def run_cell(cell: Cell, time_limit: float, attempt: int, seed: int, flags: dict,
             out_dir: Path) -> Outcome:
    """Simulate for `time_limit` seconds from `seed` on; results.json and, for a violation, the
    first failing seed's trace (replay.txt) go into `out_dir`."""
    from dataclasses import fields

    from harness.sim.runner import fault_core_options, replay_command, replay_report, run_for
    from harness.store import write_json
    from node.faults import Faults

    names = {f.name for f in fields(Faults)}
    on = sorted(k for k, v in {**flags, **cell.overrides.get("flags", {})}.items()
                if k in names and v is True)
    core_options = fault_core_options(Faults(**{k: True for k in on}))
    faults = [f for f in on if fault_core_options(Faults(**{f: True}))]
    t0 = time.monotonic()
    summary = run_for(time_limit, seed, NODES, STEPS, core_options=core_options)
    out_dir.mkdir(parents=True, exist_ok=True)
    found = [{"checker": "sim", "type": _invariant(r.violation or ""), "seed": r.seed,
              "explanation": f"seed {r.seed}: {r.violation}",
              "replay": replay_command(r.seed, NODES, STEPS, faults)}
             for r in summary.failures]
    verdict = "invalid" if found else "valid"
    if found:
        (out_dir / "replay.txt").write_text(
            replay_report(found[0]["seed"], NODES, STEPS, core_options=core_options,
                          faults=faults) + "\n")
    reached = probes.summarize(summary.probes)
    write_json(out_dir / "results.json", {
        "verdict": verdict, "summary": summary.as_json(), "anomalies": found,
        "core_options": core_options, "faults": faults,
        "liveness_failures": summary.liveness_failures, "probes": reached})
    o = Outcome(cell.name, attempt, verdict, time_limit, str(out_dir),
                seeds=summary.seeds, seconds=round(time.monotonic() - t0, 1),
                anomalies=[{k: a[k] for k in ("checker", "type", "explanation")} for a in found],
                probes=sorted(reached["runs"]))
    o.why = (f"{len(found)} of {summary.seeds} seeds violated an invariant: {found[0]['explanation']}"
             f"; replay: {found[0]['replay']}" if found else "")
    return o


def run_full_cell(cell: Cell, time_limit: float, attempt: int, seed: int, flags: dict,
                  out_dir: Path, writes: str = "own") -> Outcome:
    """The whole engine simulated (harness.sim.stack), seed after seed on every core, until
    `time_limit`, half of them with their own swarm fault mix (half of those steered toward
    the bundles no seed of the cell has reached yet); a seed that fails keeps its
    history in `out_dir`/seed-N. `writes` (test-all --writes): how every seed's workers write;
    own leaves it to each swarm mix's draw."""
    import os
    from dataclasses import fields

    from harness.sim.stack import StackConfig, replay_command, run_seeds
    from harness.sim.steer import BundleSteer
    from harness.sim.swarm import CLASSIC, bundle_reach, swarm_mix, workload_for
    from harness.store import write_json
    from node.faults import Faults
    from reports.checkers.verdict import merge_verdicts

    names = {f.name for f in fields(Faults)}
    on = sorted(k for k, v in {**flags, **cell.overrides.get("flags", {})}.items()
                if k in names and v is True)
    faults = Faults(**{k: True for k in on})
    jobs = os.cpu_count() or 1
    t0 = time.monotonic()
    # more seeds than can run in time: the deadline stops the run
    # Half the seeds (s % 4 in 2, 3) with their own swarm fault mix and read mode
    # (harness.sim.swarm), half with the fixed mix: a swarm mix leaves some faults out of each seed
    # (a seed without crashes cannot catch an acknowledgement before fsync), and the fixed mix
    # is where the recorded mutant seeds were found; each workload gets both.
    # Unless the cell says (`seconds`), a seed simulates FULL_SEED_S virtual seconds (fewer
    # when the cell has fewer wall seconds, 5 at least), so a cell overruns its share by one
    # short seed at most, and a long share runs many mixes rather than a few long seeds.
    # A quarter of the seeds (the place of s % 4 == 3) is steered (harness.sim.steer): each
    # runs a bundle none of the cell's swarm seeds has reached an aim of, while one is left.
    virtual_s = cell.overrides.get("seconds", min(FULL_SEED_S, max(5.0, time_limit)))
    steer = BundleSteer(seed)
    by_seed: dict[int, StackConfig] = {}

    def configs():
        for n in range(seed, seed + jobs * max(1, int(time_limit))):
            steered = steer.next_seed() if n % 4 == 3 else None
            s = n if steered is None else steered
            mix = swarm_mix(s) if n % 4 >= 2 else CLASSIC
            by_seed[s] = StackConfig(seed=s, workload=workload_for(s, mix), faults=faults,
                                     mix=mix, seconds=virtual_s, writes=writes)
            yield by_seed[s]

    def note(r) -> None:
        if by_seed[r.seed].mix is not CLASSIC:
            steer.note(r.seed, r.probes)

    results = run_seeds(configs(), out_dir, jobs, on_result=note, deadline=t0 + time_limit)
    found = [{"checker": "sim-full",
              "type": _invariant(r.violation) if r.violation else r.verdict,
              "seed": r.seed, "explanation": _seed_failure(r),
              "replay": replay_command(by_seed[r.seed], on)}
             for r in results if not r.ok()]
    verdict = merge_verdicts(r.judged() for r in results) if results else "unknown"
    reached = probes.summarize([r.probes for r in results])
    bundles = bundle_reach([(r.seed, by_seed[r.seed].workload, r.probes) for r in results
                            if by_seed[r.seed].mix is not CLASSIC])
    write_json(out_dir / "results.json", {
        "verdict": verdict, "seeds": len(results), "first_seed": seed, "faults": on,
        "ok_ops": sum(r.ops for r in results), "anomalies": found,
        "virtual_s": round(sum(r.virtual_s for r in results), 1), "probes": reached,
        "bundles": bundles, "steered": sorted(steer.steered & {r.seed for r in results})})
    o = Outcome(cell.name, attempt, verdict, time_limit, str(out_dir),
                ok_ops=sum(r.ops for r in results), seeds=len(results),
                seconds=round(time.monotonic() - t0, 1),
                anomalies=[{k: a[k] for k in ("checker", "type", "explanation")} for a in found],
                probes=sorted(reached["runs"]),
                # a bundle whose seeds reached none of its aims is this cell's fault that
                # never fired (test-all lists those of the chaos cells' packages beside it)
                faults={"never_fired": [f"bundle {name} (none of its aims in {row['seeds']} "
                                        "seeds)" for name, row in bundles.items() if row["missed"]]})
    o.why = (f"{len(found)} of {len(results)} seeds failed: {found[0]['explanation']}; "
             f"replay: {found[0]['replay']}" if found else "" if results else
             f"no seed finished in {time_limit:g}s (a soaking cell gets only idle CPU)")
    return o


def run_idle(cell: Cell, time_limit: float, attempt: int, seed: int, flags: dict,
             out_dir: Path, writes: str = "own") -> Outcome:
    """run_full_cell in a process of its own at the idle scheduling class (SCHED_IDLE, which
    its seed workers inherit): it runs only on CPU nothing else wants, so the chaos runs beside
    it keep their timing (Cell.soak). Its own process also keeps the seed workers' start-up
    environment (PYTHONHASHSEED, harness.sim.stack.run_seeds) out of the harness's."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_idle_main, name=f"soak {cell.name}",
                       args=(send, cell, time_limit, attempt, seed, flags, out_dir, writes))
    proc.start()
    send.close()
    try:
        return receive.recv()
    except EOFError:
        raise RuntimeError(f"the {cell.name} process ended without an outcome "
                           f"(exit code {proc.join() or proc.exitcode})") from None
    finally:
        proc.join()


def _idle_main(send, cell: Cell, time_limit: float, attempt: int, seed: int, flags: dict,
               out_dir: Path, writes: str) -> None:
    import os

    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    send.send(run_full_cell(cell, time_limit, attempt, seed, flags, out_dir, writes=writes))


def _seed_failure(r) -> str:
    """What went wrong in one seed (a harness.sim.stack.StackResult), in one line: the violated
    invariant (a safety guard's FAILED replica quoted), else the verdict with why the run
    stopped (a setup that never worked, a crash) and the checker's anomalies."""
    what = r.violation or " ".join(filter(None, [r.verdict, r.results.get("error")]))
    found = r.results.get("anomalies")
    return f"seed {r.seed}: {what}" + (f" {found}" if found else "")


def _invariant(violation: str) -> str:
    """`commit durability: leader n1 ...` -> `commit-durability`."""
    head = violation.split(":", 1)[0].strip()
    return head.replace(" ", "-") if head else "violation"
