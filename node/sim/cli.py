"""`tessera sim`: run the deterministic Raft cluster simulator over many seeds."""

from __future__ import annotations

import argparse
import json
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run clusters of Raft cores under a seeded scheduler (drops, duplicates, reordering, "
        "partitions, crashes, config changes, leadership transfers), check safety invariants "
        "after every step, then heal and measure how fast a proposal commits. Exits 1 if any "
        "seed violates an invariant and prints that seed's trace."
    )
    parser.add_argument("--seeds", type=int, required=True, help="number of seeds to run")
    parser.add_argument("--nodes", type=int, choices=(3, 5), default=3, help="cluster size (default 3)")
    parser.add_argument("--steps", type=int, default=3000, help="fault-phase steps per seed (default 3000)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON summary line")
    parser.add_argument("--fault", action="append", default=[], metavar="FLAG",
                        help="run with this engine fault flag (node.faults) on, for those that act "
                             "in the Raft core: fault_vote_skip_log_check, "
                             "fault_commit_prior_term_by_count, fault_keep_conflicting_suffix, "
                             "fault_read_without_leadership (repeatable)")


def run(args: argparse.Namespace) -> int:
    from .runner import replay_report, run_seeds

    try:
        core_options = core_options_for(args.fault)
    except ValueError as e:
        print(f"tessera sim: {e}", file=sys.stderr)
        return 2
    summary = run_seeds(args.seeds, args.seed, args.nodes, args.steps, core_options=core_options)
    for failure in summary.failures[:3]:
        print(replay_report(failure.seed, args.nodes, args.steps, core_options=core_options,
                            faults=args.fault), file=sys.stderr)
    if args.json:
        print(json.dumps(summary.as_json()))
    else:
        s = summary.as_json()
        print(
            f"{s['seeds']} seeds, {s['steps']} steps in {s['seconds']} s ({s['steps_per_s']} steps/s): "
            f"{s['violations']} violations, {s['liveness_failures']} seeds not live within "
            f"{s['liveness_bound_ms']} ms; after heal: leader p50 {s['leader_ms_p50']} ms, "
            f"commit p50 {s['commit_ms_p50']} / p99 {s['commit_ms_p99']} / max {s['commit_ms_max']} ms"
        )
    return 1 if summary.failures else 0


def core_options_for(names: list[str]) -> dict:
    """The core options of the named fault flags; ValueError for a name that is not a fault flag
    or does not act in the Raft core (the simulator runs only the core)."""
    from dataclasses import fields

    from node.faults import Faults

    from .runner import fault_core_options

    known = [f.name for f in fields(Faults)]
    options: dict = {}
    for name in names:
        if name not in known:
            raise ValueError(f"unknown fault flag {name!r} (known: {', '.join(known)})")
        one = fault_core_options(Faults(**{name: True}))
        if not one:
            raise ValueError(f"{name} acts outside the Raft core; the simulator runs only the core")
        options.update(one)
    return options
