"""How patient a run is, as `tessera test` and `tessera test-all` both take it: the op timeout
and `--time-scale`, which multiplies every timing for hosts too slow for the defaults (VMs under
qemu's TCG). One definition for both commands, so a matrix on slow hosts scales as a single run
does (harness.spec.scaled_timing; harness.validate checks the values)."""

from __future__ import annotations

import argparse

from harness.spec import TestSpec


def configure(p: argparse.ArgumentParser) -> None:
    d = TestSpec()
    p.add_argument("--op-timeout", type=float, default=None,
                   help=f"seconds before an op is recorded as info (default {d.op_timeout:g} "
                        f"times --time-scale)")
    p.add_argument("--time-scale", type=float, default=d.time_scale, metavar="X",
                   help="multiply every timing by X, for hosts too slow for the defaults (VMs "
                        "under qemu's TCG: 10): --db tessera's heartbeats, election and "
                        "failure timeouts (from the fast set, or Kudu's), the clients' attempts "
                        "and the op timeout; test.json records it (default 1)")


def spec_fields(args: argparse.Namespace) -> dict:
    """The TestSpec fields these options give."""
    op_timeout = args.op_timeout
    if op_timeout is None:
        op_timeout = TestSpec().op_timeout * args.time_scale
    return {"op_timeout": op_timeout, "time_scale": args.time_scale}
