"""`--fast-failure-detection` / `--no-fast-failure-detection`, as `tessera test` and
`tessera test-all` both take it: one definition, one default and one check, so the flag means
the same in each (the demo, a single test and the matrix all run with the same detection).

Fast by default for a system whose daemons take the fast set's flags (Tessera's): a chaos run
exists to find bugs, and a minute of faults then holds dozens of elections and the masters'
re-replication races the nemeses. `--no-fast-failure-detection` runs Kudu's defaults. Another
system keeps its own detection (tuned with --flag); asking it for Tessera's flags by name is
an error, since its daemons would not start with them."""

from __future__ import annotations

import argparse

from harness.spec import FAST_FAILURE_DETECTION


def configure(p: argparse.ArgumentParser) -> None:
    fast = ", ".join(f"{k}={v}" for k, v in FAST_FAILURE_DETECTION.items())
    p.add_argument("--fast-failure-detection", action=argparse.BooleanOptionalAction,
                   default=None,
                   help=f"daemons detect failures fast, for many elections per minute ({fast}); "
                        f"--no-fast-failure-detection keeps Kudu's defaults (default: fast for "
                        f"--db tessera; another --db keeps its own, tuned with --flag)")


def fast(args: argparse.Namespace, kind) -> bool:
    """Whether the run's daemons get the fast set; ValueError when it was asked for by name
    and `kind` (the system's Deployment class) does not take its flags."""
    if args.fast_failure_detection is False:
        return False
    try:
        check_taken(kind, args.db)
    except ValueError:
        if args.fast_failure_detection:
            raise
        return False
    return True


def check_taken(kind, db: str) -> None:
    """ValueError unless the daemons of `kind` (the system --db `db`) take the fast set."""
    try:
        kind.check_flags(dict(FAST_FAILURE_DETECTION))
    except ValueError:
        raise ValueError(f"--fast-failure-detection sets Tessera's daemon flags, which --db "
                         f"{db} does not take: set its own with --flag") from None
