"""The `tessera` command.

Subcommands are registered by module path and imported only when chosen, so `tessera --help`
stays fast and a command's heavy dependencies (Spark, SSH) load only for that command.
Each command module defines `configure(parser)` and `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "test": ("harness.test_cmd", "run one chaos test: deploy, workload, nemeses, history, check"),
    "cluster": ("harness.cluster.cli", "create, repair, inspect or remove the local netns test cluster"),
    "wal": ("node.wal.cli", "inspect write-ahead log segments (dump)"),
    "check": ("reports.checkers.cli", "check a history (linearizability, Elle anomalies, bank, set)"),
    "analyze": ("reports.analyze", "check stored runs with Spark; write results, HTML reports and the store index"),
    "sim": ("node.sim.cli", "run the deterministic Raft cluster simulator"),
    "tserver": ("node.tserver.cli", "run a tablet server daemon"),
    "serve": ("reports.serve", "serve the store's reports over HTTP for browsing (loopback by default)"),
    "master": ("node.master.cli", "run a master daemon (the Raft-replicated catalog)"),
    "local-cluster": ("node.tools.local_cluster_cli", "run masters and tablet servers as local processes"),
    "kv": ("node.client.kv_cli", "get, put, cas or append keys of a table"),
    "table": ("node.client.table_cli", "create, delete, list tables or show their locations"),
}


def _top_parser() -> argparse.ArgumentParser:
    width = max(len(n) for n in COMMANDS)
    lines = [f"  {n.ljust(width)}  {h}" for n, (_, h) in COMMANDS.items()]
    return argparse.ArgumentParser(
        prog="tessera",
        usage="tessera COMMAND [options]",
        description="Tessera: a replicated tablet store and a chaos harness to test it.",
        epilog="commands:\n" + "\n".join(lines) + "\n\nRun 'tessera COMMAND --help' for a command's options.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        parser = _top_parser()
        parser.add_argument("command", nargs="?")
        parser.parse_args(argv)
        parser.print_help()
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"tessera: unknown command {name!r} (known: {', '.join(COMMANDS)})", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"tessera {name}", description=COMMANDS[name][1])
    module.configure(parser)
    args = parser.parse_args(rest)
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
