"""`tessera test`: build a `TestSpec` from the command line, checking every argument before
anything touches a host, then run it (`harness.chaos`).

Runs one chaos test: deploys the system under test (--db) on the hosts,
runs the workload with the fault plan for --time-limit seconds, heals, runs the final reads,
checks, and prints the run's store directory.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import msgspec

from harness import failure_detection, host_options, timing_options
from harness.spec import CLIENT_MODES, TestSpec
from harness.systems import SYSTEMS, summaries


def configure(p: argparse.ArgumentParser) -> None:
    from nemeses.registry import packages
    from workloads import WORKLOADS

    p.description = __doc__.split("\n\n")[1].replace("\n", " ")
    d = TestSpec()
    p.add_argument("--db", default=d.db, choices=list(SYSTEMS),
                   help="the system under test, each with the workloads and faults that apply "
                        f"to it: {'; '.join(summaries())} (default {d.db})")
    p.add_argument("--workload", default=d.workload, help=f"one of {', '.join(WORKLOADS)} (default register)")
    p.add_argument("--workload-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a workload parameter, e.g. ops_per_key=100; batch=N: ops per batch of "
                        "--writes session-background or session-manual (default 16); "
                        "session_ops=N: with those, each node's shared session is closed and "
                        "replaced after N writes through it (default 0: kept), and "
                        "fresh_clients=true opens each new session on a client of its own; "
                        "value_buffers=true (--db tessera, string values: value_sizes=wide or "
                        "zeros): the workers hand each value over in a bytearray they overwrite "
                        "as soon as the client has the op (repeatable)")
    p.add_argument("--consistency-model", metavar="MODEL",
                   help="list-append, rw-register: the consistency model the system claims, "
                        "which the history is judged against, so a run is invalid only for an "
                        "anomaly that model forbids: e.g. repeatable-read, snapshot-isolation, "
                        "serializable, strict-serializable (default: what --db claims with its "
                        "--flag values: strict-serializable for Tessera and etcd; for MariaDB "
                        "the --flag isolation level, snapshot-isolation on Galera or with "
                        "innodb_snapshot_isolation=ON at repeatable-read or serializable; "
                        "`tessera check --help` lists every model)")
    p.add_argument("--nemesis", default="none",
                   help="none, or a comma list of groups (all: the classic faults; raft: "
                        "Raft-shaped; masters: the masters' own membership, 3 -> 5 -> 3; admin: "
                        "maintenance such as etcd's compaction and defrag) and "
                        f"faults: {', '.join(packages())}; a group keeps the faults that apply "
                        "to --db (default none)")
    p.add_argument("--nemesis-interval", type=float, default=d.nemesis_interval, metavar="S",
                   help="seconds between a fault's start and stop (default 10)")
    p.add_argument("--time-limit", type=float, default=d.time_limit, metavar="S",
                   help="seconds of workload (default 60)")
    p.add_argument("--concurrency", type=int, default=d.concurrency, metavar="N",
                   help="logical processes (default 2 x hosts)")
    p.add_argument("--rate", type=float, default=d.rate, help="ops/s over all processes (default 100; 0 = unlimited)")
    p.add_argument("--seed", type=int, default=None, help="seed of the op and fault schedule (default: random, recorded)")
    p.add_argument("--client", default=d.client, choices=CLIENT_MODES,
                   help="node-bound: worker t sends each op first to its tablet's replica on host "
                        "t mod n, as Jepsen binds clients to nodes; smart: to the leader it knows "
                        "(default node-bound)")
    configure_pacing(p)
    configure_writes(p)
    configure_external_consistency(p)
    host_options.configure(p)
    p.add_argument("--store", type=Path, default=Path(d.store), help="store directory (default ./store)")
    p.add_argument("--wheelhouse", type=Path, help="use these prebuilt wheels instead of building them")
    p.add_argument("--flag", action="append", default=[], metavar="KEY=VALUE",
                   help="daemon config key for every node, e.g. log_force_fsync_all=false; with "
                        "--db pysyncobj a SyncObjConf keyword or reads=log|local (repeatable)")
    failure_detection.configure(p)
    p.add_argument("--leave-db-running", action="store_true",
                   help="leave the daemons running (faults healed) at the end, to inspect them; "
                        "the next test or `tessera cluster down` cleans up")
    timing_options.configure(p)
    p.add_argument("--test-count", type=int, default=1, metavar="N",
                   help="run the test N times, run i with seed + i, stopping at the first that "
                        "is not valid, as Jepsen's --test-count (default 1)")
    p.add_argument("--ca-cert", type=Path, metavar="FILE",
                   help="--db tessera: issue the daemons' and clients' certificates from this CA "
                        "certificate (PEM, with --ca-key) instead of a new CA per run; either "
                        "way the run's store keeps them in tls/")
    p.add_argument("--ca-key", type=Path, metavar="FILE", help="the private key of --ca-cert (PEM)")


def configure_pacing(p: argparse.ArgumentParser, drawn: str = "") -> None:
    """--pacing, as `tessera test` takes it; `drawn`: test-all's words for its default, which
    draws one per run (harness.matrix.run_pacing)."""
    from harness.matrix import DRAWN
    from harness.spec import PACINGS

    default = DRAWN if drawn else TestSpec().pacing
    p.add_argument("--pacing", default=default, choices=(*PACINGS, DRAWN) if drawn else PACINGS,
                   help="how the --rate's op starts are spread. even: one at a time, each a "
                        "random 0 to 2/rate s after the last (Jepsen's stagger); bursts: the same "
                        "mean rate in bursts of 1 to 8 starts at one instant, as an "
                        "application's requests arrive, so the workers of one burst issue their "
                        "ops in the same loop turn and a client that groups concurrent requests "
                        "(--writes shared, session-manual) groups them"
                        + (f"; {drawn} (default {default})" if drawn else f" (default {default})"))


def configure_writes(p: argparse.ArgumentParser, scope: str = "",
                     size: str = "--workload-option batch=N ops (default 16)",
                     drawn: str = "") -> None:
    """--writes, as `tessera test` takes it; `scope`: test-all's words for where it applies,
    `size`: how large the session modes' batches are; `drawn`: test-all's words for its
    default, which draws a mode per run (harness.matrix.DRAWN)."""
    from harness.matrix import DRAWN
    from workloads.base import WRITE_MODES

    default = DRAWN if drawn else TestSpec().writes
    p.add_argument("--writes", default=default,
                   choices=(*WRITE_MODES, DRAWN) if drawn else WRITE_MODES,
                   help=scope + "--db tessera: how the workers' writes reach the client, each op "
                        "still its own op of the history. own: each worker has a handle of its "
                        "own, one ts.write per write; shared: the workers of a node share one "
                        "handle's client sessions, so the writes they issue in one loop turn "
                        "leave as one ts.write_batch (wants --rate 0 or --pacing bursts); "
                        "session-background: the "
                        "workers of a node share one AUTO_FLUSH_BACKGROUND batching session, "
                        f"batches of up to {size}; session-manual: they share one MANUAL_FLUSH "
                        "session, and each worker flushes after applying its op, so a flush "
                        "carries what the node's other workers applied in the same loop turn; "
                        "session-sync: each worker writes through a session of its own in "
                        "AUTO_FLUSH_SYNC, Kudu's default flush mode, every apply sent alone and "
                        "answered before it returns"
                        + (f"; {drawn} (default {default})" if drawn else f" (default {default})"))


def configure_external_consistency(p: argparse.ArgumentParser, drawn: str = "") -> None:
    """--external-consistency, as `tessera test` takes it; `drawn`: test-all's words for its
    default, which draws a mode per run (harness.matrix.run_external_consistency)."""
    from harness.matrix import DRAWN
    from harness.systems.tessera.clients import client_modes

    p.add_argument("--external-consistency", default=DRAWN if drawn else None,
                   choices=(*client_modes(), DRAWN) if drawn else list(client_modes()),
                   help="--db tessera: Kudu's external consistency mode of the client's writes. "
                        "client-propagated (the client's default): a write is answered once "
                        "applied, and carries the highest timestamp the client has seen, so "
                        "each client's writes get rising timestamps whatever the clocks do; "
                        "commit-wait: a write is answered only once every clock is past its "
                        "timestamp (up to the max clock error later), so timestamps follow "
                        "real time across clients and tablets; mixed: the workers alternate "
                        "between the two, as different users' clients may, and one leader "
                        "commits writes of both modes together. Every run checks each "
                        "process's own timestamp order"
                        + (f"; {drawn} (default {DRAWN})" if drawn
                           else " (default: the client's, client-propagated)"))


def parse_value(text: str, what: str) -> tuple[str, object]:
    """KEY=VALUE with VALUE read as a bool, int, float or string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"{what} wants KEY=VALUE, got {text!r}")
    key, low = key.replace("-", "_"), value.lower()
    if low in ("true", "false"):
        return key, low == "true"
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            pass
    return key, value


def spec_from_args(args: argparse.Namespace) -> TestSpec:
    """The run `args` ask for, checked (harness.validate, as test-all's cells and replay's
    recorded runs are) before anything touches a host; ValueError says what is wrong."""
    from harness.systems import system
    from harness.validate import check
    from nemeses.registry import select

    options = dict(parse_value(o, "--workload-option") for o in args.workload_option)
    if args.consistency_model is not None:
        from workloads import model_judged

        judged = model_judged()
        if args.workload not in judged:
            raise ValueError(f"--consistency-model judges {', '.join(judged)} histories; "
                             f"--workload {args.workload} has a model of its own")
        options["consistency_model"] = args.consistency_model
    flags = dict(parse_value(f, "--flag") for f in args.flag)
    if args.test_count < 1:
        raise ValueError(f"--test-count must be at least 1, got {args.test_count}")
    kind = system(args.db)
    return check(TestSpec(
        db=args.db, workload=args.workload, workload_options=options,
        nemesis=select(args.nemesis, kind.offers),
        nemesis_interval=args.nemesis_interval, time_limit=args.time_limit,
        concurrency=args.concurrency, rate=args.rate, pacing=args.pacing,
        seed=args.seed if args.seed is not None else random.randrange(2**31),
        client=args.client, writes=args.writes,
        external_consistency=args.external_consistency, flags=flags,
        fast_failure_detection=failure_detection.fast(args, kind),
        **timing_options.spec_fields(args),
        **host_options.spec_fields(args), store=str(args.store),
        wheelhouse=str(args.wheelhouse) if args.wheelhouse else None,
        leave_db_running=args.leave_db_running,
        ca_cert=str(args.ca_cert.resolve()) if args.ca_cert else None,
        ca_key=str(args.ca_key.resolve()) if args.ca_key else None).claiming())


def run(args: argparse.Namespace) -> int:
    """Exit codes as Jepsen's CLI (`node.exit_codes`): the verdict's 0 / 1 / 2, 254 for bad
    arguments, 255 when anything stopped the run before a verdict."""
    from harness import chaos
    from harness.cluster import ClusterError
    from node.exit_codes import BAD_ARGS

    try:
        spec = spec_from_args(args)
    except (ValueError, ClusterError) as e:
        print(f"tessera test: {e}", file=sys.stderr)
        return BAD_ARGS
    command = " ".join(["tessera", *sys.argv[1:]]) if sys.argv[1:2] == ["test"] else None
    for i in range(args.test_count):
        code = chaos.execute(msgspec.structs.replace(spec, seed=spec.seed + i), command=command)
        if code != 0:  # Jepsen's --test-count: the first run that is not valid ends it
            return code
    return code
