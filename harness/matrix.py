"""The pure parts of `tessera test-all` (harness.matrix_cli): the matrix's cells, the split of one
time budget into per-run time limits, what each run's results.json says in one row, the summary
and its exit code. The runner is injected, so a unit test drives a whole matrix on a fake clock.

The budget rule: before each run, the time left is shared evenly among the runs left, after
setting aside each one's fixed overhead (deploy, heal, final reads, convergence, log collection,
checks, teardown). A run's overhead is estimated from the runs so far with the same fault
packages (their heal, mounts and history sizes differ most), else from DEFAULT_OVERHEAD_S. A run
whose share is below MIN_TIME_LIMIT_S still runs with MIN_TIME_LIMIT_S if that and its overhead
fit in what is left; otherwise it and every later run are "not run". So the matrix ends past its
budget by at most the amount one run's overhead exceeded its estimate. Repeats (`--test-count`)
are ordered round-robin, so a tight budget drops repeats before it drops a cell.

The time above the runs' minimums is not shared evenly once earlier matrices are in the store:
each run's part of it is in proportion to its cell's probe yield (`probe_yields`), the code
probes (node.probes) its last run reached that no other cell's run of that matrix did, plus one,
per second that run took. A cell that alone reaches rare engine paths gets the time that
reaches more of them; one that reached nothing of its own keeps its minimum and a small part.
The cells then run in the order of their yields, so a budget too tight for every cell leaves
out the ones that reached least. With no earlier matrix every weight is equal, which is the
even split in the declared order. Earlier matrices also give each cell's overhead estimate
until a run alike in this one measures it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec

from harness.spec import TestSpec
from node import probes

NOT_RUN = "not run"
# test-all's default --writes: each chaos run of Tessera draws how its workers' writes reach the
# client from its seed, so every night's matrix meets each mode under its faults
# test-all's default for --writes, --external-consistency, --pacing and --client: one per run,
# by seed
DRAWN = "drawn"
MIN_TIME_LIMIT_S = 10.0  # below this a run is mostly start-up: elections, first faults
# Fixed overhead of one run on the 5-host netns cluster before any run measured it: start the
# daemons, wait for the test table, heal, final reads, convergence, logs, checks, teardown.
# Measured 5-20 s once the hosts install only the wheels that changed (more for big set
# histories); a larger guess only starves the first runs of the matrix.
DEFAULT_OVERHEAD_S = 20.0
SOAK_MARGIN_S = 5.0  # a soaking cell (Cell.soak) stops this long before the budget ends


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix: a workload under a set of fault packages, and any other TestSpec
    fields it sets (the self-check's flags, rate, interval)."""

    name: str
    workload: str  # or harness.sim_cell.KIND: the deterministic simulator, not a chaos run
    nemesis: tuple[str, ...]
    overrides: dict[str, Any] = field(default_factory=dict)
    max_time: float | None = None  # the cell never needs a longer time limit than this
    overhead: float | None = None  # its fixed cost before any run measured it (else the default)
    # Runs once, beside the other cells, for the whole budget, on the CPU they leave idle (the
    # whole-stack simulator: chaos runs wait on SSH, sleeps and fault intervals for much of
    # their time, and a seed is pure CPU); it takes no share of the budget from them.
    soak: bool = False

    def spec(self, base: TestSpec, time_limit: float, seed: int) -> TestSpec:
        """The run's spec. Unless the cell sets it, the nemesis interval is a quarter of the
        time limit, so each package starts about twice even in a short run (10 s at most, 3 s at
        least: fast failure detection elects a leader in under a second)."""
        interval = min(10.0, max(3.0, round(time_limit / 4, 1)))
        writes = run_writes(base, seed)
        fields = {"nemesis_interval": interval, "writes": writes,
                  "pacing": run_pacing(base, seed), "client": run_client(base, seed),
                  "external_consistency": run_external_consistency(base, seed),
                  "workload_options": {**run_values(base, self.workload, seed),
                                       **run_session_ops(writes, seed),
                                       **base.workload_options},
                  **self.overrides}
        flags = {**run_flags(base, self.workload, seed), **base.flags, **fields.pop("flags", {})}
        return msgspec.structs.replace(
            base, workload=self.workload, nemesis=list(self.nemesis), time_limit=time_limit,
            seed=seed, flags=flags, **fields).claiming()


def run_flags(base: TestSpec, workload: str, seed: int) -> dict[str, object]:
    """The settings the system has a user choose (Deployment.drawn_flags) that the matrix was
    not given by --flag, each drawn from the run's seed in a stream of its own: a nightly
    matrix of MariaDB meets every topology and isolation level, each run judged by what its
    own draw claims (TestSpec.claiming)."""
    import random

    from harness.systems import system

    return {key: random.Random(f"{seed}/{key}").choice(values)
            for key, values in system(base.db).drawn_flags(workload).items()
            if key not in base.flags}


def run_writes(base: TestSpec, seed: int) -> str:
    """The write mode of the run with this seed: the matrix's own, or with DRAWN one of
    workloads.base.WRITE_MODES drawn from the seed for Tessera (another system's client has
    only its own)."""
    if base.writes != DRAWN:
        return base.writes
    if base.db != "tessera":
        return "own"
    import random

    from workloads.base import WRITE_MODES

    return random.Random(f"{seed}/writes").choice(WRITE_MODES)


def run_pacing(base: TestSpec, seed: int) -> str:
    """How the op starts of the run with this seed are spread (harness.spec.PACINGS): the
    matrix's own, or with DRAWN evenly or in bursts, drawn from the seed for every system (a
    run at --rate 0 has no pacing: even). Evenly paced workers each wake on a timer of their
    own, so a client grouping the requests made in one loop turn (Tessera's shared handles,
    a manual-flush session) groups nothing: only bursts reach that path in a chaos run."""
    if base.pacing != DRAWN:
        return base.pacing
    if not base.rate:
        return "even"
    import random

    from harness.spec import PACINGS

    return random.Random(f"{seed}/pacing").choice(PACINGS)


def run_client(base: TestSpec, seed: int) -> str:
    """How the run with this seed's workers reach the system (harness.spec.CLIENT_MODES): the
    matrix's own, or with DRAWN one of the modes its system's client has, drawn from the seed.
    Jepsen binds each worker to a node; an application's client goes to the leader it knows,
    and its callers share it: with list-append's key sets (the threads of one set are bound
    to different nodes) only that client groups the writes of one tablet's callers."""
    if base.client != DRAWN:
        return base.client
    import random

    from harness.systems import system

    return random.Random(f"{seed}/client").choice(system(base.db).client_modes)


# What a run's register values are, drawn per run for Tessera: the small integers, values
# NUL-padded to hold a whole zero sector (workloads.values' `zeros`), or those handed to the
# client in buffers the workers overwrite at once (Workload.value_buffers), as an application
# serializing rows into one buffer does. `wide` stays the simulator's: frame-sized values
# would fill a short cell's disks and memory.
VALUE_DRAWS: tuple[dict[str, object], ...] = (
    {}, {"value_sizes": "zeros"}, {"value_sizes": "zeros", "value_buffers": True})


def run_values(base: TestSpec, workload: str, seed: int) -> dict[str, object]:
    """The value options of the run with this seed (VALUE_DRAWS), for a workload with sized
    values on Tessera, whose client adapter alone hands values over in buffers; {} otherwise."""
    from dataclasses import fields

    from workloads import WORKLOADS

    kind = WORKLOADS.get(workload)
    if base.db != "tessera" or kind is None or "value_sizes" not in {f.name for f in fields(kind)}:
        return {}
    import random

    return dict(random.Random(f"{seed}/values").choice(VALUE_DRAWS))


# Writes through a shared session before the run's workers close it and open another
# (Workload.session_ops), drawn per run of a batching session mode: a program that opens a
# session per unit of work closes it while its other callers may still be applying. None: kept.
SESSION_OPS = (None, 50, 200)
# Writes per unit of work of a program that opens a client and a session for each unit
# (Workload.fresh_clients), drawn per run of a batching session mode in a stream of its own:
# the unit's new client knows no tablet's location, so its session's first applies wait for
# a lookup while the next unit may close it. A count here replaces SESSION_OPS's. None: no
# such program.
FRESH_CLIENTS = (None, None, 1, 4)


def run_session_ops(writes: str, seed: int) -> dict[str, object]:
    """The session renewal of the run with this seed ({"session_ops": N}, with
    "fresh_clients": True for a client per unit; or {}), for a batching session mode (only
    Tessera's client has them)."""
    from workloads.base import SESSION_MODES

    if writes not in SESSION_MODES:
        return {}
    import random

    unit = random.Random(f"{seed}/fresh-clients").choice(FRESH_CLIENTS)
    if unit is not None:
        return {"session_ops": unit, "fresh_clients": True}
    n = random.Random(f"{seed}/session-ops").choice(SESSION_OPS)
    return {} if n is None else {"session_ops": n}


def run_external_consistency(base: TestSpec, seed: int) -> str | None:
    """The external consistency mode of Tessera's client in the run with this seed: the
    matrix's own, or with DRAWN (`--external-consistency drawn`) one of Kudu's two or both
    mixed, drawn from the seed, so a nightly matrix runs each (another system has no such
    mode: None)."""
    if base.external_consistency != DRAWN:
        return base.external_consistency
    if base.db != "tessera":
        return None
    import random

    from harness.systems.tessera.clients import client_modes

    return random.Random(f"{seed}/external-consistency").choice(client_modes())


@dataclass
class Outcome:
    """One run of a cell, or its place when it was not run."""

    cell: str
    attempt: int  # 1..test-count
    verdict: str  # valid | invalid | unknown | not run
    time_limit: float | None = None
    run_dir: str | None = None
    ok_ops: int = 0
    seconds: float = 0.0  # wall time of the whole run
    seeds: int | None = None  # a simulator cell's: the seeds it ran (None: a chaos run)
    anomalies: list[dict] = field(default_factory=list)  # {checker, type, explanation}
    why: str = ""  # one line: the first failure, a crash, or why the cell was not run
    # the faults check's start counts (verified, unverified, unchecked, failed, skipped) and the
    # packages that never fired: whether the faults the cell asked for were in force
    faults: dict = field(default_factory=dict)
    probes: list[str] = field(default_factory=list)  # the code probes the run fired (node.probes)

    @property
    def overhead(self) -> float:
        return max(0.0, self.seconds - (self.time_limit or 0.0))

    def work(self) -> str:
        """What the run did, for the log and the table: its ok ops, and a simulator's seeds."""
        return f"{self.ok_ops} ok ops" + ("" if self.seeds is None else f" in {self.seeds} seeds")


def time_limit_for(remaining: float, overheads: list[float],
                   min_limit: float = MIN_TIME_LIMIT_S,
                   weights: list[float] | None = None) -> float | None:
    """The next run's time limit, `overheads` being the estimates of the runs left, this one
    first, and `weights` their cells' probe yields (None: all equal; see the module
    docstring); None when it cannot fit."""
    free = remaining - sum(overheads) - min_limit * len(overheads)
    if free >= 0:
        w = weights or [1.0] * len(overheads)
        return round(min_limit + free * w[0] / sum(w), 1)
    return min_limit if remaining - overheads[0] >= min_limit else None


def probe_yields(summaries: list[dict]) -> dict[str, float]:
    """cell name -> its probe yield: from the newest of `summaries` (newest first; earlier
    matrices' summary.json) with a run of that cell, the probes that run reached which no other
    run of the same matrix reached, plus one, per second the run costs: its time limit and the
    cell's overhead (`earlier_overheads`: a chaos run's deploy and checks cost the matrix as
    much as its load, but the wheels one run installs for all are nobody's). Runs not run, or
    without a time limit, say nothing."""
    overheads = earlier_overheads(summaries)
    out: dict[str, float] = {}
    for summary in summaries:
        runs = [r for r in summary.get("runs", []) if r.get("verdict") != NOT_RUN
                and r.get("time_limit")]
        for r in runs:
            if r["cell"] in out:
                continue
            others = {p for o in runs if o is not r and o["cell"] != r["cell"]
                      for p in o.get("probes", [])}
            own = set(r.get("probes", [])) - others
            out[r["cell"]] = round((len(own) + 1) / (r["time_limit"]
                                                     + overheads.get(r["cell"], 0.0)), 4)
    return out


def weights_for(cells: list[Cell], yields: dict[str, float]) -> dict[str, float]:
    """Each cell's weight in the split: its yield, or for a cell no earlier matrix ran the
    mean of the known ones (1.0 when none is known: the even split)."""
    known = [yields[c.name] for c in cells if c.name in yields]
    mean = sum(known) / len(known) if known else 1.0
    return {c.name: yields.get(c.name, mean) for c in cells}


def overhead_estimate(cell: Cell, done: list[tuple[Cell, Outcome]],
                      default: float = DEFAULT_OVERHEAD_S,
                      earlier: dict[str, float] | None = None) -> float:
    """The largest overhead measured for runs alike (the same fault packages, and a declared
    overhead on both or neither: a simulation cell is not a chaos run without faults), not
    counting the matrix's first run, which alone also installs the wheels on the hosts, unless it
    is the only one measured; else the cell's overhead in the store's earlier matrices
    (`earlier`, `earlier_overheads`), else its declared overhead, else `default`."""
    same = [(i, o.overhead) for i, (c, o) in enumerate(done)
            if c.nemesis == cell.nemesis and (c.overhead is None) == (cell.overhead is None)
            and o.verdict != NOT_RUN]
    later = [m for i, m in same if i > 0]
    if later:
        return max(later)
    if same:
        return same[0][1]
    if earlier and cell.name in earlier:
        return earlier[cell.name]
    return cell.overhead if cell.overhead is not None else default


def earlier_overheads(summaries: list[dict]) -> dict[str, float]:
    """cell name -> the overhead (wall seconds past its time limit) of its newest run in
    `summaries` (newest first), a matrix's first run (it installed the wheels) only when the
    cell ran nowhere else."""
    out: dict[str, float] = {}
    firsts: dict[str, float] = {}
    for summary in summaries:
        runs = [r for r in summary.get("runs", []) if r.get("verdict") != NOT_RUN
                and r.get("seconds") is not None]
        for i, r in enumerate(runs):
            into = firsts if i == 0 else out
            into.setdefault(r["cell"], round(max(0.0, r["seconds"] - (r.get("time_limit")
                                                                      or 0.0)), 1))
    return {**firsts, **out}


def run_matrix(cells: list[Cell], count: int, execute: Callable[[Cell, float, int], Outcome],
               budget: float, started: float, clock: Callable[[], float] = time.monotonic,
               log: Callable[[str], None] = print, default_overhead: float = DEFAULT_OVERHEAD_S,
               weights: dict[str, float] | None = None,
               earlier: dict[str, float] | None = None) -> list[Outcome]:
    """Every cell `count` times, round-robin, within `budget` seconds from `started` (on
    `clock`); `execute(cell, time_limit, attempt)` runs one, and an exception it raises is that
    run's outcome (`_execute`). `weights`: cell name -> its part of the time above the
    minimums (`weights_for`; None: even); `earlier`: cell name -> its overhead in earlier
    matrices (`earlier_overheads`). Returns every outcome, not-run places included."""
    soaking = [_soak(execute, c, budget - (clock() - started) - SOAK_MARGIN_S, clock, log)
               for c in cells if c.soak]
    cells = [c for c in cells if not c.soak]
    if weights:  # the highest yield first: a budget too tight for all drops the lowest
        cells = sorted(cells, key=lambda c: -weights[c.name])
    runs = [(cell, attempt) for attempt in range(1, count + 1) for cell in cells]
    done: list[tuple[Cell, Outcome]] = []
    for i, (cell, attempt) in enumerate(runs):
        remaining = budget - (clock() - started)
        overheads = [overhead_estimate(c, done, default_overhead, earlier) for c, _ in runs[i:]]
        limit = time_limit_for(remaining, overheads, weights=[weights[c.name] for c, _ in runs[i:]]
                               if weights else None)
        if limit is not None and cell.max_time is not None:
            limit = min(limit, cell.max_time)
        tag = f"[{i + 1}/{len(runs)}] {cell.name}" + (f" #{attempt}" if count > 1 else "")
        if limit is None:
            why = (f"{remaining:.0f}s of the budget left, less than the {MIN_TIME_LIMIT_S:g}s "
                   f"minimum time limit plus {overheads[0]:.0f}s estimated overhead")
            log(f"{tag}: not run: {why}")
            done.append((cell, Outcome(cell.name, attempt, NOT_RUN, why=why)))
            continue
        log(f"{tag}: time limit {limit:g}s ({remaining:.0f}s left, overhead estimates "
            f"{overheads[0]:.0f}s for this run, {sum(overheads):.0f}s for the {len(runs) - i} left)")
        o = _execute(execute, cell, limit, attempt, clock)
        log(f"{tag}: {o.verdict} in {o.seconds:.0f}s, {o.work()}"
            + (f": {o.why}" if o.why else "") + (f" ({o.run_dir})" if o.run_dir else ""))
        done.append((cell, o))
    return [o for _, o in done] + [wait() for wait in soaking]


def _soak(execute: Callable[[Cell, float, int], Outcome], cell: Cell, limit: float,
          clock: Callable[[], float], log: Callable[[str], None]) -> Callable[[], Outcome]:
    """Start `cell` (Cell.soak) on a thread for `limit` seconds; the function that waits for
    its outcome. Its execute is what lowers it to idle priority (harness.sim_cell.run_idle)."""
    import threading

    log(f"{cell.name}: soaking the CPU the other cells leave idle, for {limit:.0f}s")
    box: list[Outcome] = []
    thread = threading.Thread(target=lambda: box.append(_execute(execute, cell, limit, 1, clock)),
                              name=f"soak {cell.name}", daemon=True)
    thread.start()

    def wait() -> Outcome:
        thread.join()
        o = box[0]
        log(f"{cell.name} (soaked): {o.verdict} in {o.seconds:.0f}s, {o.work()}"
            + (f": {o.why}" if o.why else ""))
        return o
    return wait


def _execute(execute: Callable[[Cell, float, int], Outcome], cell: Cell, limit: float,
             attempt: int, clock: Callable[[], float]) -> Outcome:
    """One run; an exception inside it (a harness bug, a simulator that could not start) is
    that run's outcome, unknown with the error, so the matrix goes on to the next cell and still
    writes its summary. Only ^C (KeyboardInterrupt) stops the matrix."""
    import traceback

    t0 = clock()
    try:
        return execute(cell, limit, attempt)
    except Exception as e:
        where = traceback.extract_tb(e.__traceback__)[-1]
        return Outcome(cell.name, attempt, "unknown", limit, seconds=round(clock() - t0, 1),
                       why=f"crashed: {type(e).__name__}: {e} (at {where.filename.split('/')[-1]}"
                           f":{where.lineno})")


def outcome_from_run(cell: Cell, attempt: int, time_limit: float, run_dir: str | None,
                     results: dict | None, seconds: float, error: str | None = None) -> Outcome:
    """A finished run's row from its results.json (None: the run crashed before a verdict;
    `error` says why, from test.json)."""
    from reports.spark.results import anomalies, failure_line

    o = Outcome(cell.name, attempt, "unknown", time_limit, run_dir, seconds=round(seconds, 1))
    if results is None:
        o.why = f"crashed: {error or 'no results.json'}"
        return o
    o.verdict = results["verdict"]
    o.ok_ops = sum(n for k, n in results.get("counts", {}).items() if k.endswith(":ok"))
    found = anomalies(results["check"], results.get("stats"))
    o.anomalies = [{k: a[k] for k in ("checker", "type", "explanation")} for a in found]
    o.why = failure_line(found) if found else (
        "" if o.verdict == "valid" else results["check"].get("error", "") or "no checker was sure")
    faults = next((r for r in results["check"].get("results", []) if r.get("checker") == "faults"),
                  None)
    if faults is not None:
        o.faults = {**faults["starts"], "never_fired": faults["never_fired"]}
    o.probes = sorted((results.get("probes") or {}).get("runs", {}))
    return o


def exit_code(outcomes: list[Outcome]) -> int:
    """0 every run valid, 1 any invalid, else 2 (some unknown, or some cell not run)."""
    from node.exit_codes import verdict_exit
    from reports.checkers.verdict import merge_verdicts

    return verdict_exit(merge_verdicts(o.verdict for o in outcomes) if outcomes else "unknown")


def table(outcomes: list[Outcome]) -> str:
    """The summary as a plain-text table, one row per run."""
    rows = [("cell", "run dir", "limit", "verdict", "ok ops", "failure")]
    for o in outcomes:
        cell = o.cell + (f" #{o.attempt}" if o.attempt > 1 else "")
        rows.append((cell, o.run_dir or "-", f"{o.time_limit:g}s" if o.time_limit else "-",
                     o.verdict, "-" if o.verdict == NOT_RUN else str(o.ok_ops) + (
                         "" if o.seeds is None else f" ({o.seeds} seeds)"), o.why or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
                     for r in rows)


def summary(outcomes: list[Outcome], budget: float, seconds: float, exit_: int,
            **extra) -> dict:
    """summary.json: the budget, the wall time, every run's row, the counts and the exit."""
    counts = {v: sum(o.verdict == v for o in outcomes)
              for v in ("valid", "invalid", "unknown", NOT_RUN)}
    starts = {k: sum(o.faults.get(k, 0) for o in outcomes)
              for k in ("verified", "unverified", "unchecked", "failed", "skipped")}
    never = sorted({f"{o.cell}: {f}" for o in outcomes for f in o.faults.get("never_fired", [])})
    return {"budget_s": budget, "seconds": round(seconds, 1), "counts": counts, "exit": exit_,
            "fault_starts": starts, "never_fired": never,
            "probes": probes.summarize([dict.fromkeys(o.probes, 1) for o in outcomes]),
            "runs": [asdict(o) for o in outcomes], **extra}
