"""`tessera probes`: the engine's code probes (node.probes), what each marks, and, given stored
runs or a simulator summary, which of them fired and which never did."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from node import probes
from node.exit_codes import BAD_ARGS
from reports.probes import across


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "List the engine's code probes: named marks on its rare branches (refusals, guards, "
        "recovery decisions, copy and tombstone transitions, master decisions). The simulators "
        "count them per seed, and chaos runs collect what each daemon fired with its log "
        "(results.json \"probes\"); a probe no run fires marks a path no run has walked. With "
        "--runs, say which fired in those runs' results.json files and which never did.")
    parser.add_argument("--runs", type=Path, nargs="+", default=None, metavar="DIR",
                        help="run directories or stores: every results.json under them "
                             "(a chaos run's, or one a test-all summary names) is read")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def run(args: argparse.Namespace) -> int:
    if args.runs is None:
        if args.json:
            print(json.dumps(probes.CATALOG, indent=1))
        else:
            width = max(map(len, probes.CATALOG), default=0)
            for name, what in probes.CATALOG.items():
                print(f"{name.ljust(width)}  {what}")
            print(f"{len(probes.CATALOG)} probes", file=sys.stderr)
        return 0
    missing = [str(p) for p in args.runs if not p.exists()]
    if missing:
        print(f"tessera probes: no such directory: {', '.join(missing)}", file=sys.stderr)
        return BAD_ARGS
    runs = []
    for path in _results_files(args.runs):
        try:
            runs.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            print(f"tessera probes: skipping unreadable {path}", file=sys.stderr)
    summary = across([r for r in runs if isinstance(r, dict)])
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['runs_with_probes']} runs with probes; "
              + probes.line(summary, width=len(probes.CATALOG)))
    return 0


def _results_files(roots: list[Path]) -> list[Path]:
    """Every results.json under `roots`, and those of the runs each test-all summary.json under
    them names (a matrix keeps its chaos runs in the store beside it, not under its own
    directory), each once."""
    found: dict[Path, None] = {}
    for root in roots:
        for path in sorted(root.rglob("results.json")):
            found.setdefault(path.resolve())
        for summary in sorted(root.rglob("summary.json")):
            for run_dir in _named_runs(summary):
                if (results := run_dir / "results.json").exists():
                    found.setdefault(results.resolve())
    return list(found)


def _named_runs(summary: Path) -> list[Path]:
    """The run directories a test-all summary names that exist. A relative name is relative
    to where test-all ran (the store's parent, for store/test-all/<time>/summary.json): it is
    looked for from the summary's directory upwards, so a summary copied elsewhere, or any
    other summary.json, costs nothing but the names it cannot find."""
    try:
        rows = json.loads(summary.read_text()).get("runs", [])
    except (OSError, ValueError, AttributeError):
        print(f"tessera probes: skipping unreadable {summary}", file=sys.stderr)
        return []
    bases = summary.resolve().parents
    dirs = []
    for row in rows if isinstance(rows, list) else []:
        named = row.get("run_dir") if isinstance(row, dict) else None
        if isinstance(named, str) and named:
            found = next((base / named for base in bases if (base / named).is_dir()), None)
            if found is not None:
                dirs.append(found)
    return dirs
