"""`tessera test`: one chaos test, end to end.

Brings up (or reuses) the hosts, deploys Tessera over SSH, creates the test table, runs the
workload's logical processes with the nemesis schedule alongside for --time-limit seconds,
heals every fault, runs the final reads, collects the nodes' logs, checks the history, and
prints the run's store directory. Everything is recorded as it happens under
store/<test>/<timestamp>/.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import traceback
from pathlib import Path

NEMESES = ("partition", "packet", "clock", "pause", "kill", "membership", "disk", "lose-unfsynced")
PROVIDERS = ("netns", "hosts", "vagrant")


def configure(p: argparse.ArgumentParser) -> None:
    from workloads import WORKLOADS

    p.description = __doc__.split("\n\n")[1].replace("\n", " ")
    p.add_argument("--workload", default="register", help=f"one of {', '.join(WORKLOADS)} (default register)")
    p.add_argument("--nemesis", default="none",
                   help=f"none, all, or a comma list of: {', '.join(NEMESES)} (default none)")
    p.add_argument("--nemesis-interval", type=float, default=10.0, metavar="S",
                   help="seconds between a fault's start and stop (default 10)")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S", help="seconds of workload (default 60)")
    p.add_argument("--concurrency", type=int, default=0, metavar="N",
                   help="logical processes (default 2 x hosts)")
    p.add_argument("--rate", type=float, default=100.0, help="ops/s over all processes (default 100; 0 = unlimited)")
    p.add_argument("--seed", type=int, default=None, help="seed of the op and fault schedule (default: random, recorded)")
    p.add_argument("--provider", default="netns", choices=PROVIDERS, help="where the hosts come from (default netns)")
    p.add_argument("--hosts", type=int, default=5, help="netns: number of hosts (default 5)")
    p.add_argument("--hosts-file", type=Path, help="hosts provider: TOML file of hosts")
    p.add_argument("--store", type=Path, default=Path("store"), help="store directory (default ./store)")
    p.add_argument("--wheelhouse", type=Path, help="use these prebuilt wheels instead of building them")
    p.add_argument("--flag", action="append", default=[], metavar="KEY=VALUE",
                   help="daemon config key for every node, e.g. log_force_fsync_all=false (repeatable)")
    p.add_argument("--op-timeout", type=float, default=5.0, help="seconds before an op is recorded as info (default 5)")


def _parse_flag(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"--flag wants KEY=VALUE, got {text!r}")
    low = value.lower()
    if low in ("true", "false"):
        return key.replace("-", "_"), low == "true"
    for cast in (int, float):
        try:
            return key.replace("-", "_"), cast(value)
        except ValueError:
            pass
    return key.replace("-", "_"), value


def validate(args: argparse.Namespace) -> dict:
    """Every argument checked before anything touches a host."""
    from workloads import WORKLOADS

    if args.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {args.workload!r} (known: {', '.join(WORKLOADS)})")
    names = [] if args.nemesis == "none" else list(NEMESES) if args.nemesis == "all" else \
        [n.strip() for n in args.nemesis.split(",") if n.strip()]
    for n in names:
        if n not in NEMESES:
            raise ValueError(f"unknown nemesis {n!r} (known: {', '.join(NEMESES)}, all, none)")
    if args.time_limit <= 0:
        raise ValueError(f"--time-limit must be > 0, got {args.time_limit:g}")
    if args.nemesis_interval <= 0:
        raise ValueError("--nemesis-interval must be > 0")
    if args.concurrency < 0 or args.rate < 0 or args.op_timeout <= 0:
        raise ValueError("--concurrency, --rate must be >= 0 and --op-timeout > 0")
    if args.provider == "hosts" and not args.hosts_file:
        raise ValueError("--provider hosts needs --hosts-file")
    if args.provider == "hosts":
        from harness.cluster import hostsfile
        hostsfile.load(args.hosts_file)  # a bad file is a bad argument, found before any SSH
    if args.wheelhouse is not None:
        from harness.db import check_wheelhouse
        check_wheelhouse(args.wheelhouse)
    flags = dict(_parse_flag(f) for f in args.flag)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    return {"nemeses": names, "flags": flags, "seed": seed}


def _hosts(args):
    from harness.cluster import hostsfile, vagrant
    from harness.cluster.netns import NetnsCluster

    if args.provider == "netns":
        return NetnsCluster(args.hosts).up(lambda m: print(m, file=sys.stderr))
    if args.provider == "hosts":
        return hostsfile.load(args.hosts_file)
    return vagrant.hosts(Path.cwd())


def run(args: argparse.Namespace) -> int:
    """Exit codes as Jepsen's CLI (`harness.cli`): the verdict's 0 / 1 / 2, 254 for bad
    arguments, 255 when anything stopped the run before a verdict. The run directory is printed
    last whenever one was made, and a crashed run says so in its test.json."""
    from harness.cli import BAD_ARGS, CRASHED, EXIT
    from harness.cluster import ClusterError

    try:
        plan = validate(args)
    except (ValueError, ClusterError) as e:
        print(f"tessera test: {e}", file=sys.stderr)
        return BAD_ARGS
    made: list[Path] = []
    try:
        verdict = _run(args, plan, made.append)
    except (Exception, KeyboardInterrupt) as e:
        if not isinstance(e, ClusterError):  # a cluster error's message is the whole story
            traceback.print_exc()
        print(f"tessera test: crashed: {e or type(e).__name__}", file=sys.stderr)
        if made:
            try:
                _update_test(made[0], status="crashed", error=f"{type(e).__name__}: {e}")
            except OSError as oe:
                print(f"tessera test: could not mark the run crashed: {oe}", file=sys.stderr)
            print(made[0])
        return CRASHED
    print(made[0])
    return EXIT[verdict]


def _update_test(run_dir: Path, **fields) -> dict:
    """test.json with `fields` set: what the run has done so far, for every later reader."""
    from harness.store import write_json

    test = {**json.loads((run_dir / "test.json").read_text()), **fields}
    write_json(run_dir / "test.json", test)
    return test


def _run(args, plan, made) -> str:
    """The run, start to teardown; `made(run_dir)` as soon as the run directory exists.
    Returns the verdict."""
    from harness.cluster import ClusterError
    from harness.control import Remote
    from harness.db import TesseraDB, build_wheelhouse, check_wheelhouse
    from harness.runner import RunOptions
    from harness.store import new_run_dir, write_json
    from workloads import make

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    workload = make(args.workload)
    hosts = _hosts(args)
    run_dir = new_run_dir(args.store, args.workload)
    made(run_dir)
    control_log = open(run_dir / "control.log", "a")

    def log_line(line: str) -> None:
        control_log.write(f"{time.strftime('%H:%M:%S')} {line}\n")
        control_log.flush()

    concurrency = args.concurrency or 2 * len(hosts)
    opts = RunOptions(concurrency=concurrency, time_limit=args.time_limit, rate=args.rate,
                      seed=plan["seed"], op_timeout=args.op_timeout + 1)
    test = {"workload": args.workload, "nemesis": plan["nemeses"], "nemesis_interval": args.nemesis_interval,
            "time_limit": args.time_limit, "concurrency": concurrency, "rate": args.rate,
            "seed": plan["seed"], "provider": args.provider,
            "hosts": [{"name": h.name, "address": h.address} for h in hosts],
            "flags": plan["flags"], "op_timeout": args.op_timeout,
            # what the checker needs to know about this run (the bank's total), from the workload
            "checker_options": getattr(workload, "checker_options", {}),
            "final": opts.final_plan(), "status": "running",
            "command": "tessera test " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["test"] else None}
    write_json(run_dir / "test.json", test)
    say(f"run {run_dir} (seed {plan['seed']})")
    remotes = {h.name: Remote(h, log_line) for h in hosts}
    db, nemeses = None, []
    try:
        if args.wheelhouse:
            wheels = check_wheelhouse(args.wheelhouse)
        else:
            wheels = build_wheelhouse(args.store / ".wheelhouse", Path(__file__).resolve().parents[1],
                                      say)
        db = TesseraDB(hosts, wheels, remotes, masters=min(3, len(hosts)), flags=plan["flags"],
                       log=say)
        db.teardown()
        nemeses = _nemeses(plan["nemeses"], db, hosts, remotes)
        db.setup()
        return asyncio.run(_drive(args, plan, workload, opts, db, hosts, run_dir, nemeses, say))
    finally:
        if db is not None:
            for h in hosts:
                try:
                    db.collect(h.name, run_dir / "nodes" / h.name)
                except ClusterError as e:
                    say(f"could not collect logs from {h.name}: {e}")
            for step in [db.teardown, *(n.teardown for n in nemeses)]:
                try:  # every step gets its chance: one failure must not leave the others' mess
                    step()
                except ClusterError as e:
                    say(f"teardown: {e}")
        for r in remotes.values():
            r.close()
        control_log.close()


def _nemeses(names: list[str], db, hosts, remotes) -> list:
    """The requested faults, ready to run; clock skew also needs the daemons under faketime."""
    from nemeses.clock import Clock, daemon_env
    from nemeses.disk import DiskCorruption, LoseUnfsynced
    from nemeses.membership import Membership
    from nemeses.net import PacketFaults, Partition
    from nemeses.process import Kill, Pause

    host_names = [h.name for h in hosts]
    made = {
        "partition": lambda: Partition(hosts=hosts, remotes=remotes, leader=db.leader_master),
        "packet": lambda: PacketFaults(hosts=hosts, remotes=remotes),
        "clock": lambda: Clock(hosts=host_names, remotes=remotes),
        "pause": lambda: Pause(db=db, hosts=host_names),
        "kill": lambda: Kill(db=db, hosts=host_names),
        "membership": lambda: Membership(db=db),
        "disk": lambda: DiskCorruption(db=db, hosts=host_names, remotes=remotes),
        "lose-unfsynced": lambda: LoseUnfsynced(db=db, hosts=host_names, remotes=remotes),
    }
    db.lazyfs = "lose-unfsynced" in names
    out = [made[n]() for n in names]
    for n in out:
        if isinstance(n, Clock):
            n.prepare()
            db.env = {h: daemon_env() for h in host_names}
        n.heal()  # whatever an earlier, crashed run may have left on the hosts
    return out


async def _drive(args, plan, workload, opts, db, hosts, run_dir: Path, nemeses, say) -> str:
    """Test table, workload with nemesis, heal, final ops; then the history is checked."""
    from harness.recorder import Recorder
    from harness.runner import Progress, run
    from harness.store import write_json
    from nemeses.schedule import Schedule
    from node.client import TesseraClient
    from reports.history import read_jsonl, write_edn

    client = TesseraClient(db.master_addrs, timeout=min(args.op_timeout, 10.0))
    say("waiting for the cluster to accept the test table")
    deadline = time.monotonic() + 60
    while True:
        try:
            await client.create_table("test", num_tablets=workload.tablets,
                                      replication_factor=min(3, len(hosts)))
            break
        except Exception as e:
            if "exists" in str(e):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster never accepted the test table: {e}") from e
            await asyncio.sleep(1)
    table = client.table("test")
    await _wait_writable(client, table, deadline)
    names = {h.address: h.name for h in hosts}
    progress = Progress()
    schedule = Schedule(nemeses, args.nemesis_interval, plan["seed"], progress.active_faults)
    rec = Recorder(run_dir / "history.jsonl")
    _update_test(run_dir, started_at=rec.wall_t0)
    say(f"running {args.workload} for {args.time_limit:g}s, nemesis: {','.join(plan['nemeses']) or 'none'}")

    async def watchdog(rec_, deadline_):
        while asyncio.get_running_loop().time() < deadline_:
            await asyncio.sleep(2)
            for host, daemon in await asyncio.to_thread(db.revive):
                rec_.record("nemesis", "info", "watchdog-restart", {"host": host, "daemon": daemon})

    async def nemesis(rec_, deadline_):
        await asyncio.gather(watchdog(rec_, deadline_), schedule.run(rec_, deadline_))

    try:
        tried = await run(workload, lambda _thread: client.table("test", names), rec, opts,
                          nemesis=nemesis, heal=schedule.heal, progress=progress)
    finally:
        rec.close()
        await client.close()
    for t in tried:
        if t["outcome"] != "ok":
            say(f"final {t['f']} never succeeded in {t['attempts']} attempts over {t['seconds']:g}s")
    test = _update_test(run_dir, status="complete", final={**opts.final_plan(), "ops": tried})
    ops = read_jsonl(run_dir / "history.jsonl")
    write_edn(ops, run_dir / "history.edn")
    results = _results(ops, workload.checker, test, schedule)
    write_json(run_dir / "results.json", results)
    say(f"{len(ops)} history events; verdict: {results['verdict']}")
    return results["verdict"]


async def _wait_writable(client, table, deadline: float) -> None:
    """Until every tablet of the test table has a leader that accepts writes, so the clock (and
    the first fault) starts on a working cluster. Probe keys live outside every workload's keys."""
    locs = await client.locations("test", refresh=True)
    probes = {}
    for i in range(10_000):
        key = f"_ready{i}"
        bucket = next(t.tablet_id for t in locs.tablets if t.partition.contains(key))
        probes.setdefault(bucket, key)
        if len(probes) == len(locs.tablets):
            break
    for key in probes.values():
        while True:
            try:
                await table.write(key, 1)
                break
            except Exception as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"test table never became writable: {e}") from e
                await asyncio.sleep(0.5)


def _results(ops, checker: str, test: dict, schedule) -> dict:
    """The run's verdict, as `tessera analyze` gives it: the workload's checker with the options
    test.json recorded, composed with Jepsen's stats checker (an f that never succeeded makes
    the run invalid)."""
    from collections import Counter

    from reports.checkers.check import check_history
    from reports.checkers.stats import stats
    from reports.spark.results import run_verdict

    client_ops = [o for o in ops if o.process != "nemesis"]
    counts = Counter(f"{o.f}:{o.type}" for o in client_ops if o.type != "invoke")
    try:
        check = check_history(client_ops, checker, **test.get("checker_options", {}))
    except Exception as e:  # an unreadable history is reported, never turned into a verdict
        check = {"verdict": "unknown", "error": f"{type(e).__name__}: {e}"}
    st = stats(client_ops)
    return {"verdict": run_verdict(check, st), "checker": checker, "check": check,
            "stats": {k: st[k] for k in ("verdict", "never_ok", "counts")}, "counts": dict(counts),
            "final": test["final"], "nemesis": schedule.summary()}
