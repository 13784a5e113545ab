"""`tessera analyze [STORE_OR_RUN_DIR ...]`: check stored runs with Spark and write their reports.

Prints the path of each run's report.html (newest last), then each store's index.html; with
--json, one JSON object instead. Exit codes, as Jepsen's CLI: 0 every run valid, 1 some run
invalid, 2 none invalid but some unknown (unreadable, crashed or undecided), 254 bad arguments
(no such directory, no runs under it), 255 the analysis crashed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", default=["store"], metavar="STORE_OR_RUN_DIR",
                        help="a store, a test directory in it, or run directories (default: store)")
    parser.add_argument("--master", default="local[*]",
                        help="Spark master: local[N] / local[*] (default, embedded) or spark://HOST:PORT")
    parser.add_argument("--force", action="store_true",
                        help="re-analyze runs already analyzed with the same checker version")
    parser.add_argument("--json", action="store_true", help="print one JSON object summarizing the analysis")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    import json

    from node.exit_codes import BAD_ARGS, verdict_exit
    from reports.checkers.verdict import merge_verdicts
    from reports.spark.job import analyze

    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.is_dir()]
    if missing:
        print(f"tessera analyze: no such directory: {', '.join(missing)}", file=sys.stderr)
        return BAD_ARGS
    summary = analyze(paths, args.master, args.force, out=None if args.quiet else sys.stderr)
    if not summary["runs"]:
        print(f"tessera analyze: no runs under {', '.join(args.paths)}", file=sys.stderr)
        return BAD_ARGS
    if args.json:
        print(json.dumps(summary))
    else:
        for r in summary["runs"]:
            note = f"  ({r['error']})" if r["error"] else ""
            print(f"{r['verdict'].upper():8} {r['report']}{note}")
        for index in summary["stores"]:
            print(index)
    runs = summary["runs"]  # no run analyzed proves nothing: unknown
    return verdict_exit(merge_verdicts(r["verdict"] for r in runs) if runs else "unknown")
