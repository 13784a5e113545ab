"""`tessera test-all`: the nightly matrix, workloads x fault packages, in one time budget.

Brings the netns cluster up once and builds the wheelhouse once, then runs every cell (each
`--test-count` times) as `tessera test` runs one, splitting the budget into per-run time limits.
Every cell runs against one system under test, --db as `tessera test` takes it (Tessera by
default). Prints a summary table and writes it to
store/test-all/<timestamp>/summary.json. With --self-check it runs instead one recipe per engine
fault flag (a deliberate engine bug) and reports which flags the harness caught.

Exit: 0 every run valid (self-check: every flag caught), 1 any invalid (self-check: any flag not
caught), 2 some run unknown or some cell not run, 254 bad arguments, 255 crashed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sys
import time
from pathlib import Path

from harness import failure_detection, host_options, timing_options
from harness.matrix import Cell, Outcome

# The classic faults together (ReadIndex reads), and the Raft faults together (copy-race among
# them) with lease reads: a lease bug is invisible in ReadIndex mode, and the classic
# group's clock faults break the clock-drift bound leases rest on, so leases go with Raft's.
DEFAULT_NEMESES = "all,raft@lease"
OTHER_NEMESES = "all"  # another --db's default: it has no lease read mode to pair with Raft's
LEASE = "@lease"  # a --nemeses entry's suffix: its cells' replicas serve lease reads
BUDGET = {"matrix": 300.0, "self-check": 1350.0}  # default --time-budget, seconds
# (self-check: 600 s measured for the chaos and core-simulator cells, plus 5 x 150 s of sim-full)
TESSERA = "tessera"  # the one --db with simulators, lease reads and engine fault flags


def configure(p: argparse.ArgumentParser) -> None:
    from harness.chaos_cli import configure_external_consistency, configure_pacing, configure_writes
    from harness.matrix import DRAWN
    from harness.selfcheck import RECIPES
    from harness.sim_cell import FULL_KIND, KIND
    from harness.spec import CLIENT_MODES
    from harness.systems import SYSTEMS, system

    every = "; ".join(f"{db} {','.join(default_workloads(db, system(db)))}" for db in SYSTEMS)
    p.description = __doc__.split("\n\n")[1].replace("\n", " ")
    p.add_argument("--db", default=TESSERA, choices=list(SYSTEMS),
                   help="the system under test of every cell, as for tessera test; the "
                        "simulator cells, @lease, --self-check and fast failure detection are "
                        f"Tessera's (default {TESSERA})")
    p.add_argument("--workloads", metavar="W,...",
                   help=f"comma list of workloads --db runs, each under every --nemeses entry; "
                        f"with --db {TESSERA} also {KIND}, one cell of the deterministic Raft "
                        f"simulator (tessera sim), and {FULL_KIND}, one of the whole-engine "
                        f"simulator (tessera sim --stack full), each for its share of the budget "
                        f"(default: all of --db's: {every})")
    cells = p.add_mutually_exclusive_group()
    cells.add_argument("--nemesis", metavar="N,...",
                       help="one fault set for every cell, as tessera test takes it: a comma "
                            "list of groups and faults, all in each run (the same as --nemeses "
                            "with the list joined by +)")
    cells.add_argument("--nemeses", metavar="N,...",
                       help="comma list of cells' fault sets: a group (all, raft), a package, or "
                            "packages joined by + (kill+partition); a group keeps the faults that "
                            f"apply to --db; with --db {TESSERA} a suffix {LEASE} runs those cells "
                            f"with lease reads (--flag read-mode=lease) (default: {TESSERA} "
                            f"{DEFAULT_NEMESES}, every package, the Raft group's with lease reads; "
                            f"another --db {OTHER_NEMESES})")
    p.add_argument("--time-budget", type=float, metavar="S",
                   help=f"seconds for the whole matrix, cluster start-up included (default "
                        f"{BUDGET['matrix']:g}; {BUDGET['self-check']:g} with --self-check)")
    p.add_argument("--test-count", type=int, default=1, metavar="N", help="runs of each cell (default 1)")
    p.add_argument("--self-check", action="store_true",
                   help="one run per engine fault flag with that flag on: is each bug caught? "
                        "(--db tessera only)")
    p.add_argument("--fault-flags", default=",".join(RECIPES), metavar="F,...",
                   help="--self-check: the engine fault flags to try (default: all)")
    p.add_argument("--seed", type=int, help="seed of the first run; run i gets seed + i (default random)")
    p.add_argument("--rate", type=float, default=100.0, help="ops/s of each run (default 100)")
    p.add_argument("--concurrency", type=int, default=0, metavar="N", help="processes (default 2 x hosts)")
    p.add_argument("--flag", action="append", default=[], metavar="KEY=VALUE",
                   help="daemon config key for every node of every run, checked as tessera test "
                        "--db checks it (repeatable); a setting --db has a user choose and this "
                        "does not give is drawn for each run from its seed (mariadb: topology; "
                        "isolation, which the run's list-append and rw-register histories are "
                        "judged by, bank drawing repeatable-read or serializable; "
                        "innodb_flush_log_at_trx_commit 1, 0 or 2; sync_binlog 0 or 1)")
    configure_writes(p, "every chaos cell's run, and every seed of the sim-full cell (where own "
                        "or drawn leaves it to each seed's swarm mix), as tessera test takes "
                        "it; ", size="16 ops",
                     drawn="drawn: each chaos run of --db tessera draws one of the four from "
                           "its seed, so each night's matrix meets every mode under its faults "
                           "(the run's test.json says which); another --db runs own")
    p.add_argument("--client", default=DRAWN, choices=(*CLIENT_MODES, DRAWN),
                   help="how each chaos run's workers reach the system, as tessera test takes it "
                        "(node-bound: worker t to host t mod n first, as Jepsen binds clients; "
                        "smart: the leader the client knows, its callers sharing it); drawn: "
                        "each run draws one its --db's client has from its seed (the run's "
                        f"test.json says which; only node-bound for some) (default {DRAWN})")
    configure_pacing(p, drawn="drawn: each chaos run draws even or bursts from its seed (the "
                              "run's test.json says which)")
    configure_external_consistency(
        p, drawn="drawn: each chaos run of --db tessera draws one of the two from its seed, and "
                 "the sim-full cell's seeds their own (the run's test.json says which)")
    failure_detection.configure(p)  # as `tessera test` takes it
    host_options.configure(p)  # where each cell runs: as `tessera test` takes it
    timing_options.configure(p)  # how patient each cell's run is: as `tessera test` takes it
    p.add_argument("--store", type=Path, default=Path("store"), help="store directory (default ./store)")


def default_workloads(db: str, kind) -> list[str]:
    """Every workload `db` (its Deployment class `kind`) can run in the matrix: its chaos
    workloads, after Tessera's two simulator cells, which run Tessera's engine only."""
    from harness.sim_cell import FULL_KIND, KIND

    return [*([KIND, FULL_KIND] if db == TESSERA else []), *kind.workloads]


def _tessera_only(db: str, what: str, why: str) -> None:
    """ValueError unless `db` is Tessera: `what` drives Tessera's own engine (`why`), which
    another system does not have, so its cells could only fail or mislead."""
    if db != TESSERA:
        raise ValueError(f"{what} {why}: not for --db {db}")


def cells_from_args(args: argparse.Namespace) -> list[Cell]:
    """The cells asked for; ValueError says what is wrong."""
    from harness.selfcheck import RECIPES, SIM_TIME_S
    from harness.selfcheck import cells as selfcheck_cells
    from harness.sim_cell import FULL_KIND
    from harness.sim_cell import KIND as SIM
    from harness.systems import system

    kind = system(args.db)
    if args.self_check:
        _tessera_only(args.db, "--self-check", "turns on Tessera's engine fault flags")
        flags = [f.strip() for f in args.fault_flags.split(",") if f.strip()]
        unknown = [f for f in flags if f not in RECIPES]
        if unknown or not flags:
            raise ValueError(f"unknown --fault-flags {unknown} (known: {', '.join(RECIPES)})")
        return selfcheck_cells(flags)
    known = default_workloads(args.db, kind)
    workloads = _entries(args.workloads, ",".join(known))
    for w in workloads:
        if w in (SIM, FULL_KIND):
            _tessera_only(args.db, f"--workloads {w}", "is a cell of Tessera's simulator")
        if w not in known:
            raise ValueError(f"--db {args.db} runs the workloads {', '.join(known)}, not {w!r}")
    given = args.nemeses if args.nemesis is None else "+".join(_entries(args.nemesis, ""))
    nemeses = _entries(given, DEFAULT_NEMESES if args.db == TESSERA else OTHER_NEMESES)
    if not workloads or not nemeses:
        raise ValueError("--workloads and --nemeses need at least one entry each")
    chosen = {n: _faults(n, args.db, kind.offers) for n in nemeses}
    lease = {n: {"flags": {"read-mode": "lease"}} if n.endswith(LEASE) else {} for n in nemeses}
    # the core simulator runs thousands of seeds in its 20 s (as the self-check's); with the
    # whole-stack one soaking, the yield split would otherwise hand it most of the free time
    # (56 s of a 300 s matrix, and the last chaos cell did not fit)
    sims = [Cell(SIM, SIM, (), max_time=SIM_TIME_S, overhead=1.0)] if SIM in workloads else []
    sims += [Cell(FULL_KIND, FULL_KIND, (), overhead=1.0, soak=True)] if FULL_KIND in workloads else []
    return sims + [Cell(f"{w}/{n}", w, chosen[n], lease[n]) for w in workloads
                   if w not in (SIM, FULL_KIND) for n in nemeses]


def _entries(given: str | None, default: str) -> list[str]:
    """A comma list's entries; `default` when the option was not given, which argparse cannot
    fill in itself because the default depends on --db."""
    return [e.strip() for e in (default if given is None else given).split(",") if e.strip()]


def _faults(entry: str, db: str, offers: frozenset[str]) -> tuple[str, ...]:
    """One --nemeses entry's fault packages: each +-joined part's, a group keeping those that
    apply to the system (its `offers`). A part that keeps none is refused, or its cells would
    pass for runs under faults that never happened."""
    from nemeses.registry import select

    if entry.endswith(LEASE):
        _tessera_only(db, f"--nemeses {entry}", "sets Tessera's read-mode flag")
    packages: list[str] = []
    for part in entry.removesuffix(LEASE).split("+"):
        try:
            found = select(part, offers)
        except ValueError as e:
            raise ValueError(f"--nemeses {entry}: {e} (--db {db})") from None
        if not found and part != "none":
            raise ValueError(f"--nemeses {entry}: {part or 'an empty part'} keeps no fault "
                             f"that applies to --db {db}")
        packages += found
    return tuple(packages)


def base_spec(args: argparse.Namespace, wheelhouse: Path):
    """What every cell's run starts from: the system, its checked --flag values and whether
    failure detection is fast; ValueError for a --flag the system's daemons would not take,
    found before the cluster comes up."""
    from harness.chaos_cli import parse_value
    from harness.matrix import DRAWN
    from harness.spec import CLIENT_MODES, TestSpec
    from harness.systems import system

    kind = system(args.db)
    flags = dict(parse_value(f, "--flag") for f in args.flag)
    kind.check_flags(flags)
    # The self-check's recipes were measured writing one op per request: they draw no mode.
    writes = "own" if args.self_check and args.writes == DRAWN else args.writes
    mode = args.external_consistency
    if args.self_check and mode == DRAWN:
        mode = None
    pacing = "even" if args.self_check and args.pacing == DRAWN else args.pacing
    bound = CLIENT_MODES[0] if args.self_check and args.client == DRAWN else args.client
    return TestSpec(db=args.db, rate=args.rate, concurrency=args.concurrency, writes=writes,
                    external_consistency=mode, pacing=pacing, client=bound,
                    **host_options.spec_fields(args), **timing_options.spec_fields(args),
                    flags=flags,
                    fast_failure_detection=failure_detection.fast(args, kind),
                    store=str(args.store), wheelhouse=str(wheelhouse))


def check_cells(cells: list[Cell], base) -> None:
    """Every chaos cell's run checked as `tessera test` checks its own (harness.validate),
    before the cluster comes up: a cell that could not run fails the matrix now, not an hour
    into the night. The wheelhouse is built later; the simulator cells are not chaos runs."""
    import msgspec

    from harness.sim_cell import FULL_KIND, KIND
    from harness.validate import check

    unbuilt = msgspec.structs.replace(base, wheelhouse=None)
    for cell in cells:
        if cell.workload not in (KIND, FULL_KIND):
            try:
                check(cell.spec(unbuilt, 30.0, 1))
            except ValueError as e:
                raise ValueError(f"cell {cell.name}: {e}") from None


def _runner(base, first_seed: int, summary_dir: Path):
    """execute(cell, time_limit, attempt) for harness.matrix.run_matrix: one `tessera test` run,
    its outcome read back from the run's results.json."""
    from harness import chaos, sim_cell
    from harness.matrix import DRAWN, outcome_from_run
    from reports.spark.runs import read_record

    seeds = iter(range(first_seed, first_seed + 10**6))

    def execute(cell: Cell, time_limit: float, attempt: int) -> Outcome:
        if cell.workload in (sim_cell.KIND, sim_cell.FULL_KIND):
            out = summary_dir / f"{cell.name.replace('/', '-')}-{attempt}"
            if cell.workload == sim_cell.KIND:
                return sim_cell.run_cell(cell, time_limit, attempt, next(seeds) * 10_000,
                                         base.flags, out)
            writes = "own" if base.writes == DRAWN else base.writes  # the swarm draws
            run = sim_cell.run_idle if cell.soak else sim_cell.run_full_cell
            return run(cell, time_limit, attempt, next(seeds) * 10_000, base.flags, out,
                       writes=writes)
        spec = cell.spec(base, time_limit, next(seeds))
        t0 = time.monotonic()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):  # execute prints the run dir last
            chaos.execute(spec, test_all=str(summary_dir), cell=cell.name)
        lines = out.getvalue().split()
        run_dir = Path(lines[-1]) if lines else None
        results = error = None
        if run_dir is not None:
            with contextlib.suppress(OSError, ValueError):
                results = json.loads((run_dir / "results.json").read_text())
            error = read_record(run_dir).get("error")
        if error and error.startswith("KeyboardInterrupt"):
            raise KeyboardInterrupt  # the run stopped for ^C: so does the matrix
        return outcome_from_run(cell, attempt, time_limit, str(run_dir) if run_dir else None,
                                results, time.monotonic() - t0, error)

    return execute


def run(args: argparse.Namespace) -> int:
    from harness.chaos import say
    from harness.cluster import ClusterError
    from harness.cluster.netns import NetnsCluster
    from harness.store import new_run_dir
    from harness.wheelhouse import build_wheelhouse, wheel_dir
    from node.exit_codes import BAD_ARGS

    started = time.monotonic()
    mode = "self-check" if args.self_check else "matrix"
    budget = args.time_budget if args.time_budget is not None else BUDGET[mode]
    wheelhouse = wheel_dir()
    try:
        cells = cells_from_args(args)
        if budget <= 0 or args.test_count < 1 or args.hosts < 3:
            raise ValueError("--time-budget must be > 0, --test-count >= 1, --netns-hosts >= 3")
        base = base_spec(args, wheelhouse)
        check_cells(cells, base)
    except (ValueError, ClusterError) as e:
        print(f"tessera test-all: {e}", file=sys.stderr)
        return BAD_ARGS
    first_seed = args.seed if args.seed is not None else random.randrange(2**31)
    summary_dir = new_run_dir(args.store, "test-all", link=False)
    say(f"test-all {mode} on {args.db}: {len(cells)} cells x {args.test_count}, budget "
        f"{budget:g}s, first seed {first_seed}; summary in {summary_dir}")
    if base.provider == "netns":  # up once for every cell (each run's up finds it up)
        NetnsCluster(args.hosts).up(say)
    build_wheelhouse(wheelhouse, Path(__file__).resolve().parents[1], say)
    execute = _runner(base, first_seed, summary_dir)
    earlier = [] if args.self_check else earlier_matrices(args.store, args.db, summary_dir)
    return run_cells(cells, args.test_count, execute, budget, started, summary_dir,
                     {"mode": mode, "db": args.db, "first_seed": first_seed,
                      "argv": sys.argv[1:]}, earlier)


def earlier_matrices(store: Path, db: str, this: Path, newest: int = 10) -> list[dict]:
    """The summaries of the `newest` earlier matrices of `db` in the store, newest first,
    leaving out `this` one and any summary that cannot be read."""
    import json

    summaries: list[dict] = []
    for path in sorted((store / "test-all").glob("*/summary.json"), reverse=True):
        if path.parent == this or len(summaries) == newest:
            continue
        try:
            s = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(s, dict) and s.get("mode") == "matrix" and s.get("db") == db:
            summaries.append(s)
    return summaries


def run_cells(cells: list[Cell], count: int, execute, budget: float, started: float,
              summary_dir: Path, facts: dict, earlier: list[dict] | None = None) -> int:
    """Run the matrix (or the self-check, `facts["mode"]`), print its table and write
    summary.json; the exit code. `earlier`: earlier matrices' summaries, newest first, which
    weigh the split by probe yield and give the first overhead estimates. Apart from `run` so
    a test can drive it with its own `execute` and no cluster."""
    from harness import matrix, selfcheck
    from harness.chaos import say
    from harness.store import write_json
    from node import probes

    yields = matrix.probe_yields(earlier or [])
    weights = matrix.weights_for(cells, yields) if yields else None
    if weights:
        say(f"the time above the minimums split by probe yield (own probes + 1 per second, "
            f"from {len(earlier or [])} earlier matrices in the store): "
            + ", ".join(f"{c} {w:.3g}" for c, w in weights.items()))
    outcomes = matrix.run_matrix(cells, count, execute, budget, started, log=say,
                                 weights=weights,
                                 earlier=matrix.earlier_overheads(earlier or []))
    facts = {**facts, "probe_yields": weights or {}}
    print(matrix.table(outcomes))
    extra = {**facts, "cells": [{"name": c.name, "workload": c.workload,
                                 "nemesis": list(c.nemesis), "overrides": c.overrides}
                                for c in cells]}
    if facts["mode"] == "self-check":
        findings = [selfcheck.classify(f, outcomes) for f in selfcheck.flags_of(cells)]
        code = selfcheck.exit_code(findings)
        print(selfcheck.report(findings))
        extra["findings"] = [{"flag": f.flag, "status": f.status, "caught": f.caught,
                              "runs": f.runs, "evidence": f.evidence, "why": f.why}
                             for f in findings]
    else:
        code = matrix.exit_code(outcomes)
    result = matrix.summary(outcomes, budget, time.monotonic() - started, code, **extra)
    write_json(summary_dir / "summary.json", result)
    s = result["fault_starts"]
    print(f"fault starts: {s['verified']} verified on the hosts, {s['unverified']} not in force, "
          f"{s['failed']} failed, {s['unchecked']} unchecked, {s['skipped']} skipped"
          + (f"; never fired: {', '.join(result['never_fired'])}" if result["never_fired"] else ""))
    if any(o.probes for o in outcomes):
        print(f"code {probes.line(result['probes'], width=len(probes.CATALOG))} by any cell")
    else:  # the engine's probes (node.probes) say nothing of another system's code
        print("code probes: no cell's daemons reported any (only Tessera's carry them)")
    print(summary_dir / "summary.json")
    return code
