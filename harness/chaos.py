"""One chaos test, end to end, from a `TestSpec` (and, for a replay, the fault plan to follow).

Brings up (or reuses) the hosts, deploys the system under test over SSH (`--db`: a
harness.deployment.Deployment), waits until it accepts the workload's ops, runs the workload's logical
processes with the fault plan executing alongside for the time limit, heals every fault, runs
the final reads, runs the system's end checks (Tessera: replica convergence and the masters'
agreement), collects and checks the nodes' logs, checks the history, and records all of it
under store/<test>/<timestamp>/ as it happens: test.json (the spec and the facts fixed when the
run is planned, written once), outcome.json (what became of it: running, complete or crashed
with the error, the history's start time, the final reads tried, the client's batching),
schedule.json (the fault plan), history.jsonl, one JSON per end check (convergence.json,
masters.json), results.json.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import msgspec

from harness.spec import TestSpec, load_line
from nemeses.plan import Plan
from node import probes


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def execute(spec: TestSpec, plan: Plan | None = None, **facts) -> int:
    """Run the test and print its run directory last whenever one was made; the exit code as
    Jepsen's CLI (`node.exit_codes`): the verdict's 0 / 1 / 2, or 255 when anything stopped the run
    before a verdict, which the run's outcome.json then says. `facts` go into test.json as they
    are (the command line, the run replayed)."""
    from harness.cluster import ClusterError
    from node.exit_codes import CRASHED, EXIT

    made: list[Path] = []
    try:
        verdict = run_test(spec, plan, made.append, **facts)
    except (Exception, KeyboardInterrupt) as e:
        if not isinstance(e, ClusterError):  # a cluster error's message is the whole story
            traceback.print_exc()
        say(f"tessera test: crashed: {e or type(e).__name__}")
        if made:
            try:
                _update_outcome(made[0], status="crashed", error=f"{type(e).__name__}: {e}")
            except OSError as oe:
                say(f"tessera test: could not mark the run crashed: {oe}")
            print(made[0])
        return CRASHED
    print(made[0])
    return EXIT[verdict]


def _update_outcome(run_dir: Path, **fields) -> None:
    """outcome.json with `fields` set: what the run has done so far, for every later reader.
    test.json, the plan, is never rewritten."""
    from harness.store import write_json
    from reports.spark.runs import OUTCOME

    path = run_dir / OUTCOME
    outcome = json.loads(path.read_text()) if path.exists() else {}
    write_json(path, {**outcome, **fields})


def _hosts(spec: TestSpec):
    from harness.cluster import hostsfile, vagrant
    from harness.cluster.netns import NetnsCluster

    if spec.provider == "netns":
        return NetnsCluster(spec.hosts).up(say)
    if spec.provider == "hosts" and spec.inline_nodes:
        return hostsfile.from_nodes(spec.inline_nodes, spec.username, spec.ssh_private_key)
    if spec.provider == "hosts":
        return hostsfile.load(Path(spec.hosts_file))
    return vagrant.hosts(Path.cwd())


def draw_plan(spec: TestSpec, hosts: list[str]) -> Plan:
    from nemeses.plan import plan
    from nemeses.registry import packages

    known = packages()
    return plan([known[n] for n in spec.nemesis], hosts, spec.seed, spec.nemesis_interval,
                 spec.time_limit)


def run_test(spec: TestSpec, plan: Plan | None, made: Callable[[Path], None], **facts) -> str:
    """The run, start to teardown; `made(run_dir)` as soon as the run directory exists. The
    fault plan is drawn from the seed unless one is given (a replay). Returns the verdict."""
    from harness.cluster import ClusterError
    from harness.control import Remote
    from harness.runner import RunOptions
    from harness.store import new_run_dir, write_json
    from harness.systems import system
    from harness.wheelhouse import PYTHON_VERSION, check_wheelhouse, wheelhouse_for
    from nemeses import plan as plans
    from nemeses.base import Context
    from nemeses.registry import packages
    from reports.spark.runs import PLANNED

    workload = spec.make_workload()
    chosen = [packages()[n] for n in spec.nemesis]
    kind = system(spec.db)
    hosts = _hosts(spec)
    names = [h.name for h in hosts]
    for p in chosen:
        if len(hosts) < p.min_hosts:
            raise ClusterError(f"nemesis {p.name} needs {p.min_hosts} hosts, not {len(hosts)}")
    if plan is None:
        plan = draw_plan(spec, names)
    elif plan.hosts != names:
        raise ClusterError(f"the plan was drawn for hosts {plan.hosts}, this cluster has {names}")
    spec = msgspec.structs.replace(spec, concurrency=spec.concurrency or 2 * len(hosts))
    run_dir = Path(new_run_dir(Path(spec.store), spec.workload))
    made(run_dir)
    (run_dir / "schedule.json").write_bytes(plans.dumps(plan))
    control_log = open(run_dir / "control.log", "a")

    def log_line(line: str) -> None:
        control_log.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        control_log.flush()

    clock = clock_source(spec)
    opts = RunOptions(concurrency=spec.concurrency, time_limit=spec.time_limit, rate=spec.rate,
                      seed=spec.seed, op_timeout=spec.op_timeout + 1,
                      bursts=spec.pacing == "bursts")
    bound = ([names[t % len(names)] for t in range(spec.concurrency + 1)]
             if spec.client == "node-bound" else None)
    test = {**spec.to_dict(), **facts, "checker": workload.checker.to_json(),
            "log_rules": list(kind.log_rules),  # how the node-log checker reads this system
            "daemon_flags": spec.daemon_flags(),  # what the daemons ran with (time_scale's)
            "clock_source": clock,  # whose clock a clock fault moves
            "nodes": [{"name": h.name, "address": h.address} for h in hosts],
            "bound": bound,  # thread -> its host (the last: setup and final ops), node-bound only
            "final": opts.final_plan()}
    write_json(run_dir / PLANNED, test)
    _update_outcome(run_dir, status="running")
    say(f"run {run_dir} (seed {spec.seed})")
    remotes = {h.name: Remote(h, log_line) for h in hosts}
    db, nemeses, collected = None, {}, False
    try:
        if spec.wheelhouse:
            wheels = check_wheelhouse(Path(spec.wheelhouse))
        else:
            versions = {n: r.run(PYTHON_VERSION, check=False).stdout for n, r in remotes.items()}
            wheels = wheelhouse_for(versions, Path(__file__).resolve().parents[1], say)
        db = kind(hosts, wheels, remotes, flags=spec.daemon_flags(), log=say,
                  time_scale=spec.time_scale,
                  tls_dir=run_dir / "tls",
                  ca=(spec.ca_cert, spec.ca_key) if spec.ca_cert else None)
        db.teardown()
        ctx = Context(db, hosts, remotes, clock_source=clock)
        nemeses = {p.name: p.build(ctx) for p in chosen}
        db.lazyfs = any(p.lazyfs for p in chosen)
        env = {k: v for n in nemeses.values() for k, v in n.daemon_env().items()}
        db.env = {h: env for h in names} if env else {}
        for n in nemeses.values():
            n.heal()  # whatever an earlier, crashed run may have left on the hosts
        db.setup()
        schedule = asyncio.run(_drive(spec, workload, opts, db, ctx, run_dir, nemeses, plan))
        # the plan, and each step as it ran with what the hosts showed after it
        plan_json = json.loads(plans.dumps(plan))
        write_json(run_dir / "schedule.json", {**plan_json, "executed": schedule.executed})
        checks = []
        for name, call in db.end_checks():
            checks.append(_run_check(name, call))
            write_json(run_dir / f"{name}.json", checks[-1])
        _collect(db, run_dir, nemeses)
        collected = True
        return _judge(run_dir, workload.checker, schedule, checks)
    finally:
        if db is not None:
            if not collected:
                _collect(db, run_dir, nemeses)
            steps = [db.teardown, *(n.teardown for n in nemeses.values())]
            if spec.leave_db_running:
                say("leaving the daemons running (--leave-db-running); the next test or "
                    "`tessera cluster down` cleans up")
                steps = []
            for step in steps:
                try:  # every step gets its chance: one failure must not leave the others' mess
                    step()
                except ClusterError as e:
                    say(f"teardown: {e}")
        for r in remotes.values():
            r.close()
        control_log.close()


def clock_source(spec: TestSpec) -> str:
    """VMs each have a kernel clock of their own to step; netns hosts share this machine's, and
    hosts of the hosts provider are someone's machines: libfaketime there."""
    return "kernel" if spec.provider == "vagrant" else "faketime"


def _collect(db, run_dir: Path, nemeses: dict) -> None:
    """Each host's daemon logs, and what a fault's helper on it said (the delay daemon's
    output, as `nodes/<host>/<fault>-helper.txt`, beside the logs the log checker reads)."""
    from harness.cluster import ClusterError

    for h in db.hosts:
        try:
            db.collect(h.name, run_dir / "nodes" / h.name)
            for name, n in nemeses.items():
                if text := n.collect(h.name):
                    (run_dir / "nodes" / h.name / f"{name}-helper.txt").write_text(text)
        except ClusterError as e:
            say(f"could not collect logs from {h.name}: {e}")


def _run_check(checker: str, call) -> dict:
    """A run-level check that crashed is unknown with the reason, never left out of the verdict."""
    try:
        return call()
    except Exception as e:
        traceback.print_exc()
        return {"checker": checker, "verdict": "unknown",
                "errors": [{"type": "crashed", "explanation": f"{type(e).__name__}: {e}"}]}


def _judge(run_dir: Path, checker, schedule, cluster_checks: list[dict]) -> str:
    """The history checked, with the run's other checks, into results.json; the verdict."""
    from harness.store import write_json
    from reports.checkers.faults import check_fault_findings, check_faults
    from reports.checkers.logs import check_logs
    from reports.history import read_jsonl, write_edn
    from reports.probes import check_alarms, run_probes
    from reports.spark.results import anomalies, failure_line
    from reports.spark.runs import read_record

    ops = read_jsonl(run_dir / "history.jsonl")
    write_edn(ops, run_dir / "history.edn")
    logs = _run_check("logs", lambda: check_logs(run_dir, ops))
    test = read_record(run_dir)
    faults = [check_faults(ops, list(test["nemesis"]))] if test.get("nemesis") else []
    if faults and (found := check_fault_findings(ops)) is not None:
        faults.append(found)
    alarms = _run_check("alarms", lambda: check_alarms(run_dir))
    results = _results(ops, checker, test, schedule,
                       extra=[*cluster_checks, logs, *faults, *([alarms] if alarms else [])])
    if (reached := run_probes(run_dir)) is not None:  # the Spark job keeps it (results.build)
        results["probes"] = reached
        say(probes.line(reached))
    write_json(run_dir / "results.json", results)
    say(f"{len(ops)} history events; verdict: {results['verdict']}")
    if results["verdict"] != "valid":  # the why on the terminal (and in CI's log), not only in the report
        found = anomalies(results["check"], results.get("stats"))
        say(f"why: {failure_line(found, 600) if found else results['check'].get('error') or 'no checker was sure'}")
    _report(run_dir, ops, results)
    return results["verdict"]


def _report(run_dir: Path, ops, results: dict) -> None:
    """The run's report.html, as `tessera analyze` renders it, but without Spark: from the
    checks just made. A report that cannot be drawn is said, and never changes the verdict."""
    from reports.checkers.verdict import split_run_checks
    from reports.html.report import render_report
    from reports.spark.results import build
    from reports.spark.runs import Run, checker_version

    try:
        check, extra = split_run_checks(results)
        run = Run(run_dir.resolve())
        say(f"report: {render_report(run, build(run, check, ops, None, checker_version(), extra), ops)}")
    except Exception as e:  # the verdict stands; `tessera analyze` can draw it again
        say(f"report: not drawn ({type(e).__name__}: {e}); `tessera analyze {run_dir}` draws it")


async def _drive(spec: TestSpec, workload, opts, db, ctx, run_dir: Path, nemeses: dict,
                 plan: Plan):
    """Test table, workload with the fault plan, heal, final ops, counting the probes the client
    fires (reports.probes.CLIENT_FILE). Returns the schedule run."""
    from reports.probes import write_client_probes

    with probes.counting() as fired:  # the client's own: Tessera's client runs in this process
        try:
            return await _drive_workload(spec, workload, opts, db, ctx, run_dir, plan, nemeses)
        finally:
            write_client_probes(run_dir, dict(fired))


async def _drive_workload(spec: TestSpec, workload, opts, db, ctx, run_dir: Path, plan: Plan,
                          nemeses: dict):
    from harness.recorder import Recorder
    from harness.runner import Progress, run
    from nemeses.schedule import Schedule

    names = {h.address: h.name for h in ctx.hosts}
    binds = [h.address for h in ctx.hosts] if spec.client == "node-bound" else None
    clients, close, groups = await db.open_clients(workload, names, binds, spec.op_timeout)
    ctx.tablets.update(groups)
    progress = Progress()
    schedule = Schedule(nemeses, plan, progress.active_faults)
    rec = Recorder(run_dir / "history.jsonl")
    _update_outcome(run_dir, started_at=rec.wall_t0)
    say(f"running {spec.workload} for {spec.time_limit:g}s, "
        f"nemesis: {','.join(spec.nemesis) or 'none'}, {spec.client} clients, "
        f"{load_line(spec.to_dict())}")

    async def watchdog(rec_, deadline_):
        while asyncio.get_running_loop().time() < deadline_:
            await asyncio.sleep(2)
            for host, daemon in await asyncio.to_thread(db.revive):
                rec_.record("nemesis", "info", "watchdog-restart", {"host": host, "daemon": daemon})

    async def nemesis(rec_, deadline_):
        await asyncio.gather(watchdog(rec_, deadline_), schedule.run(rec_))

    try:
        tried = await run(workload, clients, rec, opts, nemesis=nemesis, heal=schedule.heal,
                          progress=progress)
    finally:
        batches = await close()
        rec.close()
    if batches is not None and "coalesced" in batches:
        c = batches["coalesced"]
        say(f"coalesced writes: {c['writes']} in {c['requests']} requests "
            f"({c['mean_writes_per_request']} a request; {c['requests_with_several']} "
            "carried several)")
        _update_outcome(run_dir, coalesced=c)
    elif batches is not None and "rows_ok" in batches:  # session-sync: nothing batched
        say(f"{batches['mode']}: {batches['sessions']} sessions applied {batches['rows_ok']} "
            "rows ok, each apply sent alone")
        _update_outcome(run_dir, sessions=batches)
    elif batches is not None:
        renewed = (f"; {batches['renewed']} closed and replaced under load"
                   if "renewed" in batches else "")
        say(f"{batches['mode']} sessions sent {batches['ops']} ops in {batches['batches']} batches "
            f"({batches['mean_ops_per_batch']} a batch; cut by {batches['cut_by']}{renewed})")
        _update_outcome(run_dir, batches=batches)
    for t in tried:
        if t["outcome"] != "ok":
            say(f"final {t['f']} never succeeded in {t['attempts']} attempts over {t['seconds']:g}s")
    _update_outcome(run_dir, status="complete", final={**opts.final_plan(), "ops": tried})
    return schedule


def _results(ops, checker, test: dict, schedule, extra: list[dict] = ()) -> dict:
    """The run's verdict, as `tessera analyze` gives it: the workload's checker composed with the
    run's other checks (`extra`: convergence, masters, node logs) and Jepsen's stats checker (an f that
    never succeeded makes the run invalid)."""
    from reports.checkers.verdict import judge

    return {**judge(ops, checker, extra), "final": test["final"],
            "nemesis": schedule.summary()}
