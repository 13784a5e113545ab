"""`tessera sim`: the deterministic simulators over many seeds: the Raft core alone
(`--stack core`, harness.sim.cluster) or the whole engine (`--stack full`, harness.sim.stack)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

from node import probes
from node.exit_codes import BAD_ARGS, verdict_exit
from reports.checkers.verdict import merge_verdicts


def configure(parser: argparse.ArgumentParser) -> None:
    from workloads.base import WRITE_MODES

    parser.description = (
        "--stack core (default): run clusters of Raft cores under a seeded scheduler (drops, "
        "duplicates, reordering, partitions, crashes, config changes, leadership transfers), "
        "check safety invariants after every step, then heal and measure how fast a proposal "
        "commits. --stack full: run the real masters (3), tablet servers (5) and client on "
        "virtual time, simulated TCP and simulated disks, with a workload through the real "
        "client while servers crash (losing unfsynced writes), partition, reset connections "
        "and skew clocks; the project's checker judges each seed's history and Raft invariants "
        "are checked on the live replicas. Exits 1 if any seed fails and prints how to replay it."
    )
    parser.add_argument("--stack", choices=("core", "full"), default="core",
                        help="simulate the Raft core alone (default) or the whole engine")
    parser.add_argument("--seeds", type=int, default=100, help="number of seeds to run (default 100)")
    parser.add_argument("--nodes", type=int, choices=(3, 5), default=3,
                        help="core: cluster size (default 3)")
    parser.add_argument("--steps", type=int, default=3000,
                        help="core: fault-phase steps per seed (default 3000)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--workload", choices=("register", "list-append", "both"), default="both",
                        help="full: the workload; both (default): the one a seed's mix names (a "
                        "bundle of wide values runs register), else by seed parity")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="full: virtual seconds of workload under faults per seed (default 60)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="full: worker processes (default: the number of CPUs)")
    parser.add_argument("--out", type=Path, default=None,
                        help="full: where failing seeds keep their history (default "
                             "store/sim/<UTC time>)")
    parser.add_argument("--schedule", type=Path, default=None, metavar="FILE",
                        help="full, with --seeds 1: replay exactly this fault schedule (a JSON list "
                             "of [virtual time, kind, value], as --shrink writes) instead of "
                             "random faults")
    parser.add_argument("--shrink", action="store_true",
                        help="full: reduce the first failing seed's faults to a minimal schedule "
                             "that still fails (delta debugging; minutes), write it and print "
                             "its replay command")
    parser.add_argument("--writes", choices=WRITE_MODES, default="own",
                        help="full: how the workers' writes reach the client, as tessera test "
                             "--writes: own (default), a handle each, paced, one ts.write per "
                             "write; shared, the workers of one node share client sessions and "
                             "run back to back, so the writes they issue in one loop turn leave "
                             "as one ts.write_batch; session-background, they share one "
                             "AUTO_FLUSH_BACKGROUND session; session-manual, one MANUAL_FLUSH "
                             "session each worker flushes after its op; session-sync, a "
                             "session each in AUTO_FLUSH_SYNC (Kudu's default flush mode). With "
                             "own a swarm mix "
                             "draws it per seed (writes=MODE in its spec)")
    parser.add_argument("--batch", type=int, default=0, metavar="N",
                        help="full, with --writes session-background or session-manual: up to "
                             "N ops per tablet batch (default 0: 16)")
    parser.add_argument("--mix", default="swarm", metavar="swarm|classic|SPEC",
                        help="full: swarm (default) draws each seed's own fault mix from the "
                             "seed (which faults are on, their weights, how often faults come, "
                             "ReadIndex or lease reads, the load) and prints it first, so some "
                             "seeds hammer a few kinds; classic runs every seed with the fixed "
                             "mix of earlier releases (the recorded seeds of the tests); a SPEC "
                             "as a seed prints it (kind:weight,...;every=LO-HI;reads=MODE"
                             "[;load=CLIENTSxRATE]) runs that mix on every seed")
    parser.add_argument("--value-sizes", choices=("small", "wide", "zeros"), default="small",
                        help="full, register: small values (default); wide: sizes up to the "
                             "RPC frame limit, mostly small, heavy-tailed, half NUL-padded; "
                             "zeros: half the values NUL-padded to 520-2100 bytes")
    parser.add_argument("--until-probe", default=None, metavar="NAME",
                        help="full: stop at the first seed whose run fires the code probe NAME "
                             "(tessera probes lists them) and print its seed, mix and replay "
                             "command; --seeds caps the search, and exit 1 if no seed fired it "
                             "(or a seed failed)")
    parser.add_argument("--json", action="store_true", help="print one JSON summary line")
    parser.add_argument("--fault", action="append", default=[], metavar="FLAG",
                        help="run with this engine fault flag (a deliberate bug, as the "
                             "daemons' fault_* flags) on (repeatable). The "
                             "core simulator takes those that act in the Raft core: "
                             "fault_vote_skip_log_check, fault_commit_prior_term_by_count, "
                             "fault_keep_conflicting_suffix, fault_vote_twice_in_term, "
                             "fault_count_unsynced_own_entries, "
                             "fault_read_without_leadership; "
                             "the full stack takes any")


def run(args: argparse.Namespace) -> int:
    if args.seeds < 1:
        print("tessera sim: --seeds must be at least 1", file=sys.stderr)
        return BAD_ARGS
    if args.stack == "full":
        return run_full(args)
    from .runner import replay_report, run_seeds

    try:
        core_options = core_options_for(args.fault)
    except ValueError as e:
        print(f"tessera sim: {e}", file=sys.stderr)
        return BAD_ARGS
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


def run_full(args: argparse.Namespace) -> int:
    from dataclasses import fields

    from node.faults import Faults
    from workloads.base import SESSION_MODES

    from .stack import StackConfig, replay_command, run_seeds
    from .swarm import bundle_reach, mix_for, workload_for

    known = {f.name for f in fields(Faults)}
    unknown = [f for f in args.fault if f not in known]
    if unknown:
        print(f"tessera sim: unknown fault flag {unknown[0]!r} (known: {', '.join(sorted(known))})",
              file=sys.stderr)
        return BAD_ARGS
    if not 0 <= args.batch <= 128:
        print("tessera sim: --batch must be 0..128 (the results a tablet keeps per session)",
              file=sys.stderr)
        return BAD_ARGS
    if args.batch and args.writes not in SESSION_MODES:
        print(f"tessera sim: --batch sizes a batching session's batches: it takes --writes "
              f"{' or '.join(SESSION_MODES)}, not {args.writes}", file=sys.stderr)
        return BAD_ARGS
    if args.value_sizes != "small" and args.workload != "register":
        print("tessera sim: --value-sizes wide or zeros takes --workload register", file=sys.stderr)
        return BAD_ARGS
    try:
        named = mix_for(args.mix, args.seed).workload
    except ValueError as e:
        print(f"tessera sim: --mix: {e}", file=sys.stderr)
        return BAD_ARGS
    # a spec typed for every seed may name a workload; a swarm seed's bundle yields to the ask
    if args.mix not in ("swarm", "classic") and named and args.workload not in ("both", named):
        print(f"tessera sim: --mix names workload={named}: not --workload {args.workload}",
              file=sys.stderr)
        return BAD_ARGS
    if args.seconds <= 0 or args.jobs < 1:
        print("tessera sim: --seconds must be positive and --jobs at least 1", file=sys.stderr)
        return BAD_ARGS
    if args.until_probe is not None and args.until_probe not in probes.CATALOG:
        print(f"tessera sim: --until-probe: no probe {args.until_probe!r} (tessera probes "
              "lists them)", file=sys.stderr)
        return BAD_ARGS
    faults = Faults(**{f: True for f in args.fault})
    schedule = None
    if args.schedule is not None:
        try:
            schedule = tuple(tuple(e) for e in json.loads(args.schedule.read_text()))
        except (OSError, ValueError, TypeError) as e:
            print(f"tessera sim: cannot read --schedule {args.schedule}: {e}", file=sys.stderr)
            return BAD_ARGS
        if args.seeds != 1:
            print("tessera sim: --schedule replays one seed: use --seeds 1", file=sys.stderr)
            return BAD_ARGS
    mixes = {s: mix_for(args.mix, s) for s in range(args.seed, args.seed + args.seeds)}
    configs = [StackConfig(seed=s, workload=workload_for(s, mix, args.workload),
                           seconds=args.seconds, faults=faults, schedule=schedule,
                           writes=args.writes, batch=args.batch, mix=mix,
                           value_sizes=args.value_sizes)
               for s, mix in mixes.items()]
    for c in configs[:args.jobs]:  # the rest are printed as they start
        print(f"seed {c.seed} mix {c.mix.describe()}", file=sys.stderr, flush=True)
    out = args.out or Path("store/sim") / time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    t0 = time.monotonic()
    done = []

    def progress(r) -> None:
        done.append(r)
        why = (r.results.get("check_error") or r.results.get("error")
               or r.results.get("anomalies", []))
        what = "ok" if r.ok() else f"FAILED: {r.violation or r.verdict} {why}"
        if len(done) + args.jobs - 1 < len(configs):  # the seed that starts in its place
            nxt = configs[len(done) + args.jobs - 1]
            print(f"seed {nxt.seed} mix {nxt.mix.describe()}", file=sys.stderr, flush=True)
        print(f"[{len(done)}/{len(configs)}] seed {r.seed} {configs[len(done) - 1].workload}: "
              f"{what} ({r.ops} ok ops, {r.virtual_s:g} virtual s, {r.wall_s:.1f} s)",
              file=sys.stderr, flush=True)

    wanted = args.until_probe
    results = run_seeds(configs, out, args.jobs, on_result=progress,
                        stop=(lambda r: r.probes.get(wanted, 0) > 0) if wanted else None)
    seconds = time.monotonic() - t0
    failed = [r for r in results if not r.ok()]
    by_seed = {c.seed: c for c in configs}
    reached = next((r for r in results if wanted and r.probes.get(wanted)), None)
    if reached is not None:
        print(f"probe {wanted} fired {reached.probes[wanted]} times in seed {reached.seed} "
              f"(mix {by_seed[reached.seed].mix.describe()}); replay: "
              f"{replay_command(by_seed[reached.seed], args.fault, args.schedule)}",
              file=sys.stderr)
    elif wanted:
        print(f"probe {wanted} fired in none of {len(results)} seeds", file=sys.stderr)
    for r in failed[:5]:
        print(f"seed {r.seed}: {r.violation or r.verdict}; history in {out}/seed-{r.seed}; "
              f"replay: {replay_command(by_seed[r.seed], args.fault, args.schedule)}",
              file=sys.stderr)
    shrunk = None
    if args.shrink and failed:
        shrunk = _shrink(by_seed[failed[0].seed], failed[0], out, args)
    summary = {
        "stack": "full", "seeds": len(results), "first_seed": args.seed,
        "failed": len(failed), "violations": sum(r.violation is not None for r in results),
        "invalid": sum(r.verdict == "invalid" for r in results),
        "unknown": sum(r.verdict not in ("valid", "invalid") for r in results),
        "failed_seeds": [r.seed for r in failed][:50], "faults": args.fault, "jobs": args.jobs,
        "seconds": round(seconds, 1), "virtual_s": round(sum(r.virtual_s for r in results), 1),
        "ok_ops": sum(r.ops for r in results),
        "seeds_per_min": round(60 * len(results) / seconds, 1) if seconds else 0,
        "shrunk": shrunk,
        # what bit flips did: a master or tablet server that refused to start, replicas FAILED
        # naming the corrupt file, or nothing seen (a file never read again)
        "flips": dict(sorted(Counter(_flip_kind(h, o) for r in results
                                     for h, o in r.flips.items()).items())),
        "catalog_lag_seeds": [r.seed for r in results if r.catalog_lag][:50],
        "probes": probes.summarize([r.probes for r in results]),
    }
    if args.mix == "swarm":  # whether the bundles its seeds drew reached what they aim at
        summary["bundles"] = bundle_reach([(r.seed, by_seed[r.seed].workload, r.probes)
                                           for r in results])
    if wanted:
        summary["until_probe"] = {"probe": wanted,
                                  "seed": reached.seed if reached is not None else None}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['seeds']} seeds ({summary['virtual_s']:g} virtual s, "
              f"{summary['ok_ops']} ok ops) in {summary['seconds']} s with {args.jobs} jobs: "
              f"{summary['failed']} failed ({summary['violations']} invariant violations, "
              f"{summary['invalid']} invalid, {summary['unknown']} unknown)")
        print(probes.line(summary["probes"]))
        for name, row in summary.get("bundles", {}).items():
            reached = ", ".join(f"{aim} {n}/{row['seeds']}" for aim, n in row["aims"].items())
            by = ", ".join(f"{w} {r['reached']}/{r['seeds']}" for w, r in row["workloads"].items())
            print(f"bundle {name}: {row['seeds']} seeds ({by} reached an aim); "
                  f"{'MISSED every aim' if row['missed'] else 'aims reached'}: {reached}")
    if wanted and reached is None:
        return 1
    # a seed that broke an invariant or judged invalid is a failure; one that could not be
    # judged (out of memory, a crash) is unknown
    return verdict_exit(merge_verdicts(r.judged() for r in results))


def _flip_kind(host: str, outcome: str) -> str:
    """`master: refused to start`, `tserver: FAILED`, `tserver: no failure seen`, ..."""
    from .stack import tserver_hosts

    who = "tserver" if host in tserver_hosts(100) else "master"
    what = next((k for k in ("refused to start", "FAILED") if outcome.startswith(k)),
                "no failure seen")
    return f"{who}: {what}"


def _shrink(cfg, first, out: Path, args: argparse.Namespace) -> dict:
    import json as _json

    from .shrink import shrink
    from .stack import replay_command

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    say(f"shrinking seed {cfg.seed}: {len(first.events)} faults")
    root = out / f"shrink-{cfg.seed}"
    minimal, result = shrink(cfg, first, root, args.jobs, say)
    path = root / "schedule.min.json"
    path.write_text(_json.dumps(minimal) + "\n")
    outcome = result.violation or result.verdict if not result.ok() else "passed (not reproduced)"
    say(f"seed {cfg.seed} shrunk from {len(first.events)} to {len(minimal)} faults: {minimal}")
    say(f"  it fails with: {outcome}; history in {root}/minimal")
    say(f"  replay: {replay_command(cfg, args.fault, path)}")
    return {"seed": cfg.seed, "from": len(first.events), "to": len(minimal), "schedule": str(path),
            "reproduced": not result.ok()}
