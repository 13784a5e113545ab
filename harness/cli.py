"""The `tessera` command.

Subcommands are registered by module path and imported only when chosen, so `tessera --help`
stays fast and a command's heavy dependencies (Spark, SSH) load only for that command.
Each command module defines `configure(parser)` and `run(args) -> int`.

Every command exits by one table (node.exit_codes), Jepsen's: 0 valid or done, 1 invalid or
failed, 2 unknown or could not decide, 254 bad arguments (argparse's usage errors included, in
every command and subcommand), 255 crashed. A verdict command that crashes says so and exits 255.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from node.exit_codes import BAD_ARGS, CRASHED

SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a pipeline reader gone away

VERDICT_COMMANDS = frozenset({"test", "test-all", "replay", "analyze", "check"})

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "test": ("harness.chaos_cli", "run one chaos test: deploy, workload, nemeses, history, check"),
    "test-all": ("harness.matrix_cli", "run the test matrix (workloads x faults) in a time budget; --self-check"),
    "replay": ("harness.replay", "run a recorded test again: same spec, seed and fault schedule"),
    "cluster": ("harness.cluster.cli", "the local netns test cluster (up, down, status); ksck: any cluster's health"),
    "wal": ("node.wal.cli", "inspect write-ahead log segments (dump)"),
    "check": ("reports.checkers.cli", "check a history (linearizability, Elle anomalies, bank, set)"),
    "analyze": ("reports.analyze", "check stored runs with Spark; write results, HTML reports and the store index"),
    "sim": ("harness.sim.cli", "run the deterministic Raft cluster simulator"),
    "probes": ("reports.probes_cli", "list the engine's code probes; which fired in stored runs"),
    "tserver": ("node.tserver.cli", "run a tablet server daemon; 'tserver list': the live tablet servers; 'tserver state': maintenance mode"),
    "serve": ("reports.serve", "serve the store's reports over HTTP for browsing (loopback by default)"),
    "master": ("node.master.cli", "run a master daemon (the Raft-replicated catalog); 'master list | add | remove': the masters"),
    "local-cluster": ("node.tools.local_cluster_cli", "run masters and tablet servers as local processes"),
    "kv": ("node.client.kv_cli", "get, put, cas or append keys of a table"),
    "table": ("node.client.table_cli", "create, delete, list tables or show their locations"),
    "local-replica": ("node.tools.local_replica", "offline tools for a stopped server's replicas: list, cmeta print | unsafe-recreate, delete"),
    "tablet": ("node.tools.tablet_cli", "add, remove or move a tablet's replica; make its leader step down; unsafe-change-config"),
}


class BadArgsParser(argparse.ArgumentParser):
    """argparse's usage errors exit 254 (Jepsen's code for bad arguments), not argparse's 2,
    which a verdict command uses for unknown."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(BAD_ARGS, f"{self.prog}: error: {message}\n")


def _top_parser() -> argparse.ArgumentParser:
    width = max(len(n) for n in COMMANDS)
    lines = [f"  {n.ljust(width)}  {h}" for n, (_, h) in COMMANDS.items()]
    return BadArgsParser(
        prog="tessera",
        usage="tessera COMMAND [options]",
        description="Tessera: a replicated tablet store and a chaos harness to test it.",
        epilog="commands:\n" + "\n".join(lines) + "\n\nRun 'tessera COMMAND --help' for a command's "
               "options; 'tessera --version' for the version.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tessera")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    """The `tessera` command. A reader that goes away (`tessera probes | head`) ends it
    quietly with 141, as a shell reports a pipeline killed by SIGPIPE, not with a traceback."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return SIGPIPE_EXIT


def _main(argv: list[str]) -> int:
    if argv[:1] == ["--version"]:
        print(f"tessera {_version()}")
        return 0
    if not argv or argv[0].startswith("-"):
        parser = _top_parser()
        parser.add_argument("command", nargs="?")
        parser.parse_args(argv)
        parser.print_help()
        return 0 if argv else BAD_ARGS
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"tessera: unknown command {name!r} (known: {', '.join(COMMANDS)})", file=sys.stderr)
        return BAD_ARGS
    module = importlib.import_module(COMMANDS[name][0])
    parser = BadArgsParser(prog=f"tessera {name}", description=COMMANDS[name][1])
    module.configure(parser)
    args = parser.parse_args(rest)
    if name not in VERDICT_COMMANDS:
        return int(module.run(args) or 0)
    try:
        return int(module.run(args) or 0)
    except BrokenPipeError:
        raise
    except (Exception, KeyboardInterrupt):  # a verdict command that broke has no verdict
        traceback.print_exc()
        print(f"tessera {name}: crashed", file=sys.stderr)
        return CRASHED


if __name__ == "__main__":
    sys.exit(main())
