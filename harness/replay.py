"""`tessera replay RUN_DIR`: run a recorded test again, as it was.

Reads the run's test.json (its `TestSpec`: the same seed, hence the same op stream for every
process) and schedule.json (the same fault plan, step for step), and runs them on the same kind
of cluster into a new run directory of the same store; the new test.json names the run replayed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory: store/<test>/<timestamp>")


def load(run_dir: Path):
    """The spec and the fault plan of a recorded run; ValueError says what is missing."""
    import msgspec

    from harness.spec import TestSpec
    from harness.validate import check
    from nemeses import plan

    try:
        test = json.loads((run_dir / "test.json").read_text())
        schedule = plan.loads((run_dir / "schedule.json").read_bytes())
        spec = TestSpec.from_dict(test)
    except (OSError, ValueError, msgspec.ValidationError) as e:
        raise ValueError(f"{run_dir} cannot be replayed: {e}") from None
    if spec.wheelhouse and not Path(spec.wheelhouse).is_dir():
        # a build cache, not part of the test: one gone (another machine's) is built again
        spec = msgspec.structs.replace(spec, wheelhouse=None)
    try:  # the run as recorded must still be one this version can make (harness.validate)
        check(spec)
    except ValueError as e:
        raise ValueError(f"{run_dir} cannot be replayed: {e}") from None
    return msgspec.structs.replace(spec, store=str(run_dir.resolve().parent.parent)), schedule


def run(args: argparse.Namespace) -> int:
    from harness import chaos
    from node.exit_codes import BAD_ARGS

    try:
        spec, schedule = load(args.run_dir)
    except ValueError as e:
        print(f"tessera replay: {e}", file=sys.stderr)
        return BAD_ARGS
    return chaos.execute(spec, schedule, replay_of=str(args.run_dir.resolve()))
