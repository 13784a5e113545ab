"""The masters' check at the end of a run (reports.checkers.masters holds the rules; this is
the harness's I/O edge): ask every master the harness left running until they agree or
`timeout` passes."""

from __future__ import annotations

import time

from node.protocol import MasterInfo
from reports.checkers.masters import compare


def check_masters(db, timeout: float = 30.0, interval: float = 0.5) -> dict:
    """`db`: anything with `master_hosts` and `ask_each`, like harness.systems.tessera.deployment.TesseraDB."""
    hosts = list(db.master_hosts)
    deadline = time.monotonic() + timeout
    while True:
        result = compare([h.name for h in hosts],
                         db.ask_each(hosts, "master", "master.info", MasterInfo))
        if result["verdict"] == "valid" or time.monotonic() >= deadline:
            return result
        time.sleep(interval)
