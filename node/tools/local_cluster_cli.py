"""`tessera local-cluster up|down|status`: real daemons as local processes, for development."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from node.exit_codes import BAD_ARGS

DEFAULT_DIR = Path(os.environ.get("TESSERA_LOCAL_CLUSTER", Path.home() / ".tessera" / "local-cluster"))


def configure(p: argparse.ArgumentParser) -> None:
    p.description = ("Start masters and tablet servers as processes on 127.0.0.1 (free ports), "
                     "stop them by pid, or show them.")
    sub = p.add_subparsers(dest="action", required=True, metavar="{up,down,status}")

    def verb(name: str, what: str) -> argparse.ArgumentParser:
        v = sub.add_parser(name, help=what, description=what)
        v.add_argument("--cluster-dir", "--dir", dest="dir", type=Path, default=DEFAULT_DIR,
                       metavar="DIR", help=f"the cluster's directory, one --data-dir in it per "
                                           f"daemon (default {DEFAULT_DIR})")
        return v

    up = verb("up", "start the cluster, or the daemons of it that are down; print the masters")
    verb("down", "stop every daemon the cluster started, by pid")
    verb("status", "one line a daemon: name, kind, address, pid, up or down")
    up.add_argument("--num-masters", type=int, default=1, help="1, 3 or 5 masters (default 1)")
    up.add_argument("--num-tservers", type=int, default=3, help="tablet servers (default 3)")
    up.add_argument("--security", action=argparse.BooleanOptionalAction, default=True,
                    help="a CA of the cluster's own in DIR/tls, and daemons that require TLS and "
                         "certificates; the CLI finds the operator's certificate there "
                         "(default: on; --no-security: plaintext, open to any caller on "
                         "--trusted-subnets)")
    up.add_argument("--ca-cert", type=Path, metavar="FILE",
                    help="issue the cluster's certificates from this CA (PEM, with --ca-key) "
                         "instead of a new one in DIR/tls/ca")
    up.add_argument("--ca-key", type=Path, metavar="FILE", help="the private key of --ca-cert")
    up.add_argument("--flag", action="append", default=[], metavar="NAME=VALUE",
                    help="a daemon flag for every daemon, repeatable, as `tessera test --flag` "
                         "takes it (e.g. --flag log_force_fsync_all=false; dashes or underscores)")


def daemon_flag(text: str) -> str:
    """`NAME=VALUE` as the daemon's command line takes it (`--name=value`); ValueError for a
    name the daemons do not have."""
    from node.server.daemon_cli import FLAGS

    name, sep, value = text.lstrip("-").partition("=")
    name = name.replace("_", "-")
    if not sep or name not in FLAGS:
        raise ValueError(f"--flag {text!r}: want NAME=VALUE with NAME one of the daemon flags "
                         f"(see `tessera tserver --help`)")
    return f"--{name}={value}"


def _ca(args) -> tuple[str, str] | None:
    """--ca-cert/--ca-key, checked to be a CA and its key; ValueError says what is wrong."""
    if bool(args.ca_cert) != bool(args.ca_key):
        raise ValueError("--ca-cert and --ca-key go together")
    if not args.ca_cert:
        return None
    if not args.security:
        raise ValueError("--ca-cert needs security on (drop --no-security)")
    from node.security.pki import load_ca

    load_ca(args.ca_cert, args.ca_key)
    return str(args.ca_cert.resolve()), str(args.ca_key.resolve())


def run(args: argparse.Namespace) -> int:
    import sys

    from node.tools.local_cluster import LocalCluster, LocalClusterError

    if args.action == "up":
        try:
            flags = [daemon_flag(f) for f in args.flag]
            ca = _ca(args)
        except ValueError as e:
            print(f"tessera local-cluster: {e}", file=sys.stderr)
            return BAD_ARGS
    try:
        if args.action == "up":
            path = args.dir / "cluster.json"
            c = LocalCluster.load(args.dir) if path.exists() else LocalCluster(
                args.dir, args.num_masters, args.num_tservers, flags, security=args.security,
                ca=ca)
            c.up()
            print("masters: " + ",".join(f"{h}:{p}" for h, p in c.master_addrs))
            if c.security:
                print(f"operator certificate: {c.cert('admin')} (the CLI finds it; for other "
                      f"clients: TESSERA_TLS_CERT={c.cert('client')})")
            return 0
        c = LocalCluster.load(args.dir)
        if args.action == "down":
            # A daemon whose pid another process has now died earlier; that process is not
            # ours to stop, so it is named and left alone, and the record goes with the rest.
            notes = c.down()
            for note in notes:
                print(f"tessera local-cluster: {note}: left alone, not signalled", file=sys.stderr)
            (args.dir / "cluster.json").unlink()
            left = f"; left {len(notes)} pid(s) alone" if notes else ""
            print(f"stopped {len(c.daemons) - len(notes)} daemons{left}")
            return 0
        for name, d in c.daemons.items():
            state = "up" if c.alive(name) else "DOWN"
            if c.stranger(name):
                state += f" (pid {d.pid} is another process now)"
            print(f"{name}\t{d.kind}\t{d.addr}\tpid {d.pid}\t{state}")
        return 0
    except LocalClusterError as e:
        print(f"tessera local-cluster: {e}", file=sys.stderr)
        return 1
