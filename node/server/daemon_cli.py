"""The command line shared by `tessera tserver` and `tessera master`.

Flags use Kudu's names (with dashes) and defaults where the seeds give them; `--config FILE`
reads a TOML file with the same keys (dashes or underscores), and flags given on the command
line win over the file. The fault-* flags are deliberate bugs for harness self-tests (node.faults):
a daemon refuses them unless unlock-unsafe-flags is set too, and warns about each one it runs with.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
import tomllib
from pathlib import Path

from node import faults, probes
from node.consensus import TICK_MS
from node.exit_codes import BAD_ARGS
from node.replica.replica import ReplicaOptions
from node.rpc.wire import ENVELOPE_RESERVE, MIN_MAX_FRAME
from node.security.tls import KUDU_TRUSTED_SUBNETS
from node.tserver.copy_source import MAX_CHUNK_BYTES
from node.wal import LogOptions

OPTION = object()  # a flag's default: the same-named field's of the options classes


def option_default(flag: str) -> object:
    """The default of the field named as `flag` (dashes for underscores) in ServerOptions,
    ReplicaOptions or LogOptions: the daemon's flags never restate what the engine's options
    classes say. KeyError if none has it."""
    import dataclasses

    import msgspec

    from node.server.base import ServerOptions

    key = flag.replace("-", "_")
    for cls in (ServerOptions, ReplicaOptions):
        for f in dataclasses.fields(cls):
            if f.name == key and f.default is not dataclasses.MISSING:
                return f.default
    for f in msgspec.structs.fields(LogOptions):
        if f.name == key and f.default is not msgspec.NODEFAULT:
            return f.default
    raise KeyError(f"no options field {key}")


# flag -> (type, default, help). Defaults are Kudu's unless noted; OPTION: the options class's.
_FLAGS: dict[str, tuple[type, object, str]] = {
    "data-dir": (str, None, "data directory (instance, wals/, tablet-meta/, consensus-meta/, data/)"),
    "rpc-addr": (str, None, "HOST:PORT to serve RPC on (default port 7050 tserver, 7051 master)"),
    "rpc-outbound-host": (str, "", "source address of outgoing RPC connections (empty: the "
                                   "kernel picks); daemons that share a machine but each have an "
                                   "address of their own can then be partitioned by address"),
    "http-port": (int, OPTION, "port of /metrics and /status on the RPC host (0: any free port)"),
    "masters": (str, "", "comma-separated master HOST:PORT list (for a master: all masters, "
                         "itself included; empty = a single master)"),
    "log-force-fsync-all": (bool, OPTION, "fsync every WAL group before acknowledging "
                                        "(Kudu's default is false; Tessera is safe by default)"),
    "log-segment-size-mb": (float, OPTION, "WAL segment size"),
    "log-preallocate-segments": (bool, OPTION, "fallocate WAL segments ahead of use"),
    "group-commit-queue-size-bytes": (int, OPTION, "bytes of WAL entries queued and not yet "
                                                   "written past which writes wait for room "
                                                   "(Kudu's default is 4 MiB)"),
    "raft-heartbeat-interval-ms": (int, ReplicaOptions.heartbeat_interval_ticks * TICK_MS,
                                   "leader heartbeat period"),
    "leader-failure-max-missed-heartbeat-periods": (int, OPTION, "missed heartbeats before an election"),
    "heartbeat-interval-ms": (int, OPTION, "tablet server -> master heartbeat period"),
    "read-mode": (str, OPTION, "linearizable (ReadIndex round per read) or lease "
                                       "(leader lease; assumes bounded clock drift)"),
    "max-clock-drift": (float, OPTION, "lease reads: assumed bound on clock rate differences"),
    "clock-max-error-us": (int, OPTION, "bound on clock disagreement between servers; each write "
                                      "is acknowledged only once now - this bound is past its "
                                      "hybrid timestamp (commit-wait)"),
    "snapshot-interval-entries": (int, OPTION, "applied entries between state-machine snapshots "
                                             "(after each, older WAL segments are collected)"),
    "snapshot-interval-mb": (float, OPTION, "or this many MiB of applied entries' payloads, "
                                            "whichever comes first (Kudu's flush_threshold_mb)"),
    "log-retain-entries": (int, OPTION, "entries kept behind a snapshot for lagging followers"),
    "log-retain-mb": (float, OPTION, "and at most this many MiB of their payloads"),
    "follower-unavailable-considered-failed-sec": (float, OPTION, "masters: a tablet server "
                                                   "silent this long has failed, and each of its "
                                                   "replicas is replaced on another server"),
    "catalog-manager-bg-task-wait-ms": (int, OPTION, "masters: period of the catalog's background "
                                                   "task, which re-sends tablet creations and "
                                                   "deletes replicas the catalog deleted or evicted"),
    "tablet-copy-idle-timeout-sec": (float, OPTION, "a tablet copy source ends a session "
                                                  "nobody fetched from for this long, "
                                                  "releasing the WAL and snapshot it pinned"),
    "tablet-copy-transfer-chunk-size-bytes": (int, OPTION, "bytes a tablet copy asks for "
                                                            "per fetch"),
    "tablet-copy-stall-limit-sec": (float, OPTION, "a tablet copy's receiver gives up once no "
                                                 "chunk arrived for this long (the leader "
                                                 "then starts a new copy)"),
    "rpc-max-message-size": (int, OPTION, "the largest RPC frame this server accepts "
                                                     "or sends; every server of a cluster must "
                                                     "have the same"),
    # Security, with Kudu's names and defaults (node.security; README "Security").
    "rpc-authentication": (str, "optional", "required, optional or disabled: whether a caller "
                                            "must show a certificate the cluster CA signed "
                                            "(optional: callers without one are served only "
                                            "from --trusted-subnets)"),
    "rpc-encryption": (str, "optional", "required, optional or disabled: whether RPC "
                                        "connections must use TLS"),
    "rpc-certificate-file": (str, "", "this daemon's certificate (PEM), issued by the cluster "
                                      "CA for the service role"),
    "rpc-private-key-file": (str, "", "the private key of --rpc-certificate-file (PEM)"),
    "rpc-ca-certificate-file": (str, "", "the cluster CA's certificate (PEM): the only issuer "
                                         "this daemon trusts"),
    "superuser-acl": (str, "", "comma-separated names allowed admin RPCs (delete tablet, unsafe "
                               "config change, master membership, step-down); * for all"),
    "user-acl": (str, "*", "comma-separated names allowed reads, writes and DDL; * for all"),
    "trusted-subnets": (str, KUDU_TRUSTED_SUBNETS, "comma-separated networks whose "
                                                   "unauthenticated connections are served when "
                                                   "--rpc-authentication is optional"),
    "webserver-certificate-file": (str, OPTION, "serve /metrics and /status over HTTPS with "
                                                "this certificate (PEM; empty: plain HTTP)"),
    "webserver-private-key-file": (str, OPTION, "the private key of "
                                                "--webserver-certificate-file (PEM)"),
    "log-level": (str, "INFO", "DEBUG, INFO, WARNING or ERROR"),
    "probes-file": (str, "", "append the name of each code probe (a rare branch of the "
                             "engine: `tessera probes` lists them) to this file the first time "
                             "it fires; empty: probes off"),
    "event-loop": (str, "auto", "asyncio, uvloop, or auto: uvloop when it is installed "
                                "(the default install has it; the project's benchmarks measure both)"),
    "gc-thresholds": (str, "10000,10,100", "Python's cyclic garbage collector thresholds "
                                           "(gc.set_threshold: GEN0,GEN1,GEN2; 0 turns it "
                                           "off). Not Kudu's: Python's own 700,10,10 walks "
                                           "every tracked object ~5 times a second under "
                                           "load, ~14%% of a leader's CPU (measured)"),
    # unlock-unsafe-flags and the fault-* flags: deliberate bugs (node.faults)
    **{name.replace("_", "-"): (bool, default, help_)
       for name, (default, help_) in faults.flags().items()},
}
FLAGS: dict[str, tuple[type, object, str]] = {
    name: (typ, option_default(name) if default is OPTION else default, help_)
    for name, (typ, default, help_) in _FLAGS.items()}

log = logging.getLogger(__name__)


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"not a boolean: {text!r}")


def configure(p: argparse.ArgumentParser, kind: str) -> None:
    p.add_argument("--config", metavar="FILE", help="TOML file with any of the keys below")
    for name, (typ, default, help_) in FLAGS.items():
        shown = f" (default: {default})" if default not in (None, "") else ""
        p.add_argument(f"--{name}", type=_bool if typ is bool else typ, default=None,
                       metavar=name.split("-")[-1].upper() if typ is not bool else "BOOL",
                       help=help_ + shown)
    p.set_defaults(kind=kind)


def resolve(args: argparse.Namespace) -> dict:
    """Flags over TOML over defaults; raises ValueError with a one-line reason."""
    values = {name: default for name, (_, default, _) in FLAGS.items()}
    if args.config:
        try:
            doc = tomllib.loads(Path(args.config).read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ValueError(f"cannot read config {args.config}: {e}") from None
        merge_config(values, doc, args.config)
    for name in FLAGS:
        given = getattr(args, name.replace("-", "_"))
        if given is not None:
            values[name] = given
    return check_values(values)


def merge_config(values: dict, doc: dict, source: str) -> None:
    """Put a config document's keys (dashes or underscores) into `values`, each checked to be a
    daemon flag of the right type; ValueError naming `source` and the key."""
    for key, value in doc.items():
        name = key.replace("_", "-")
        if name not in FLAGS:
            raise ValueError(f"{source}: unknown key {key!r} (see `tessera tserver --help`)")
        typ = FLAGS[name][0]
        if name == "masters" and isinstance(value, list):
            value = ",".join(str(v) for v in value)
        elif typ is bool and not isinstance(value, bool):
            raise ValueError(f"{source}: {key} takes true or false, not {value!r}")
        elif typ is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{source}: {key} takes an integer, not {value!r}")
        elif typ is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"{source}: {key} takes a number, not {value!r}")
        elif typ is str and not isinstance(value, (str, int, float)):
            raise ValueError(f"{source}: {key} takes a string, not {value!r}")
        values[name] = str(value) if typ is str else value


def check_config(doc: dict, source: str) -> dict:
    """A whole daemon config document (the TOML a deployment writes) checked as the daemon will
    check it at start, without starting anything: the values, or ValueError."""
    values = {name: default for name, (_, default, _) in FLAGS.items()}
    merge_config(values, doc, source)
    return check_values(values)


def check_values(values: dict) -> dict:
    """Every value's own rules, and those between values; ValueError with a one-line reason."""
    if not values["data-dir"]:
        raise ValueError("--data-dir is required")
    if values["read-mode"] not in ("linearizable", "lease"):
        raise ValueError(f"--read-mode must be linearizable or lease, not {values['read-mode']!r}")
    if values["event-loop"] not in ("auto", "asyncio", "uvloop"):
        raise ValueError(f"--event-loop must be auto, asyncio or uvloop, not {values['event-loop']!r}")
    if values["clock-max-error-us"] < 0:
        raise ValueError("--clock-max-error-us must be >= 0")
    if values["raft-heartbeat-interval-ms"] % TICK_MS:
        raise ValueError(f"--raft-heartbeat-interval-ms must be a multiple of {TICK_MS}")
    if not 0 < values["tablet-copy-transfer-chunk-size-bytes"] <= MAX_CHUNK_BYTES:
        raise ValueError(f"--tablet-copy-transfer-chunk-size-bytes must be 1..{MAX_CHUNK_BYTES}")
    frame = values["rpc-max-message-size"]
    if frame < MIN_MAX_FRAME:
        raise ValueError(f"--rpc-max-message-size must be at least {MIN_MAX_FRAME}")
    if values["tablet-copy-transfer-chunk-size-bytes"] > frame - ENVELOPE_RESERVE:
        raise ValueError(f"--tablet-copy-transfer-chunk-size-bytes must leave {ENVELOPE_RESERVE} "
                         f"bytes of --rpc-max-message-size ({frame}) for the reply's envelope")
    for flag in ("tablet-copy-idle-timeout-sec", "tablet-copy-stall-limit-sec"):
        if values[flag] <= 0:
            raise ValueError(f"--{flag} must be positive")
    for flag in ("snapshot-interval-entries", "snapshot-interval-mb",
                 "group-commit-queue-size-bytes"):
        if values[flag] <= 0:
            raise ValueError(f"--{flag} must be positive")
    for flag in ("log-retain-entries", "log-retain-mb"):
        if values[flag] < 0:
            raise ValueError(f"--{flag} must be >= 0")
    if values["catalog-manager-bg-task-wait-ms"] < 10:
        raise ValueError("--catalog-manager-bg-task-wait-ms must be at least 10")
    gc_thresholds(values)
    _faults(values)  # refuses fault flags that are not unlocked
    security(values).check()
    _webserver(values)
    return values


def _webserver(values: dict) -> None:
    """--webserver-certificate-file and its key: both or neither, and loadable."""
    import ssl

    cert, key = values["webserver-certificate-file"], values["webserver-private-key-file"]
    if bool(cert) != bool(key):
        raise ValueError("--webserver-certificate-file and --webserver-private-key-file go "
                         "together")
    if cert:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
        except (ssl.SSLError, OSError) as e:
            raise ValueError(f"cannot load --webserver-certificate-file {cert}: {e}") from None


def security(values: dict):
    """The RpcSecurity the flags describe (not yet checked)."""
    from node.security.acl import Acl
    from node.security.pki import CertFiles
    from node.security.tls import RpcSecurity

    paths = [values[f] for f in ("rpc-certificate-file", "rpc-private-key-file",
                                 "rpc-ca-certificate-file")]
    if any(paths) and not all(paths):
        raise ValueError("--rpc-certificate-file, --rpc-private-key-file and "
                         "--rpc-ca-certificate-file go together")
    files = CertFiles(*(Path(p) for p in paths)) if all(paths) else None
    return RpcSecurity(values["rpc-authentication"], values["rpc-encryption"], files,
                       Acl.parse(values["superuser-acl"], values["user-acl"]),
                       values["trusted-subnets"])


def gc_thresholds(values: dict) -> tuple[int, int, int]:
    """--gc-thresholds as gc.set_threshold's three numbers; ValueError if it is not that."""
    text = str(values["gc-thresholds"])
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        raise ValueError(f"--gc-thresholds must be three counts GEN0,GEN1,GEN2 (>= 0), not {text!r}")
    gen0, gen1, gen2 = (int(p) for p in parts)
    return gen0, gen1, gen2


def _faults(values: dict) -> faults.Faults:
    return faults.from_config({name.replace("-", "_"): value for name, value in values.items()})


def build_options(values: dict, kind: str):
    from node.client import parse_addrs
    from node.server.base import ServerOptions

    port = 7051 if kind == "master" else 7050
    rpc = parse_addrs(values["rpc-addr"] or f"127.0.0.1:{port}", port)[0]
    masters = parse_addrs(values["masters"], 7051) if values["masters"] else []
    bugs = _faults(values)
    replica = ReplicaOptions(
        heartbeat_interval_ticks=values["raft-heartbeat-interval-ms"] // TICK_MS,
        leader_failure_max_missed_heartbeat_periods=values["leader-failure-max-missed-heartbeat-periods"],
        read_mode=values["read-mode"],
        max_clock_drift=values["max-clock-drift"],
        clock_max_error_us=values["clock-max-error-us"],
        snapshot_interval_entries=values["snapshot-interval-entries"],
        log_retain_entries=values["log-retain-entries"],
        snapshot_interval_mb=values["snapshot-interval-mb"],
        log_retain_mb=values["log-retain-mb"],
        rpc_max_message_size=values["rpc-max-message-size"],
        log=LogOptions(log_force_fsync_all=values["log-force-fsync-all"],
                       log_segment_size_mb=values["log-segment-size-mb"],
                       log_preallocate_segments=values["log-preallocate-segments"],
                       group_commit_queue_size_bytes=values["group-commit-queue-size-bytes"],
                       faults=bugs),
        faults=bugs,
    )
    return ServerOptions(Path(values["data-dir"]), rpc[0], rpc[1], values["http-port"], masters,
                          values["heartbeat-interval-ms"], replica,
                          values["follower-unavailable-considered-failed-sec"],
                          values["catalog-manager-bg-task-wait-ms"],
                          tablet_copy_idle_timeout_sec=values["tablet-copy-idle-timeout-sec"],
                          tablet_copy_transfer_chunk_size_bytes=values[
                              "tablet-copy-transfer-chunk-size-bytes"],
                          tablet_copy_stall_limit_sec=values["tablet-copy-stall-limit-sec"],
                          local_host=values["rpc-outbound-host"] or None,
                          security=security(values),
                          webserver_certificate_file=values["webserver-certificate-file"],
                          webserver_private_key_file=values["webserver-private-key-file"])


def run(args: argparse.Namespace) -> int:
    try:
        values = resolve(args)
        opts = build_options(values, args.kind)
    except ValueError as e:
        print(f"tessera {args.kind}: {e}", file=sys.stderr)
        return BAD_ARGS
    logging.basicConfig(level=values["log-level"].upper(), stream=sys.stderr,
                        format=f"%(asctime)s {args.kind} %(levelname)s %(name)s: %(message)s")
    faults.warn_enabled(opts.replica.faults, log)
    try:
        loop_factory = event_loop_factory(values["event-loop"])
    except ValueError as e:
        print(f"tessera {args.kind}: {e}", file=sys.stderr)
        return BAD_ARGS
    log.info("event loop: %s", "asyncio" if loop_factory is None else "uvloop")
    if values["probes-file"]:
        try:
            # held open for the process's life: a probe's first hit is one line, flushed
            sink = open(values["probes-file"], "a", encoding="utf-8")  # noqa: SIM115
        except OSError as e:
            print(f"tessera {args.kind}: cannot open --probes-file: {e}", file=sys.stderr)
            return BAD_ARGS
        probes.enable(sink)
    gc.set_threshold(*gc_thresholds(values))
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(_serve(opts, args.kind))


def event_loop_factory(choice: str):
    """The loop to serve on: None for asyncio's own. uvloop cuts the per-message cost of the
    RPC and WAL paths (docs/benchmarks.md); `auto` falls back to asyncio without it."""
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise ValueError("--event-loop uvloop: uvloop is not installed") from None
        return None
    return uvloop.new_event_loop


async def _serve(opts, kind: str) -> int:
    from node import logfmt
    from node.errors import CorruptionError, TesseraError
    from node.rpc.server import quiet_dropped_tls

    if kind == "master":
        from node.master.server import Master as Server
    else:
        from node.tserver.server import TabletServer as Server
    server = Server(opts)
    quiet_dropped_tls(asyncio.get_running_loop())  # before the server listens
    try:
        await server.start()
    except (OSError, TesseraError) as e:
        if isinstance(e, CorruptionError):
            log.error("%s", logfmt.corruption(e))
        print(f"tessera {kind}: cannot start: {e}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"{kind} {server.uuid} ready on {server.me.host}:{server.me.port} "
          f"http {server.http_port}", flush=True)
    waits = [asyncio.create_task(stop.wait()), asyncio.create_task(server.loop_failed.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    await server.stop()
    if server.loop_ended is not None:  # serving on would be a server up but deaf (ServerBase._keep)
        print(f"tessera {kind}: exiting: {server.loop_ended}", file=sys.stderr)
        return 1
    return 0
