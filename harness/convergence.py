"""The convergence check at the end of a run: after the final reads, every tablet server is asked
for its replicas' checksums (`ts.checksum`) through the DB adapter until the live replicas of each
tablet agree on an applied index, and then their rows must match (reports.checkers.convergence
holds the rules; this module is only the harness's I/O edge)."""

from __future__ import annotations

from node.protocol import ChecksumReport
from reports.checkers.convergence import converge


def check_convergence(db, timeout: float = 30.0) -> dict:
    """`db`: anything with `hosts` (each with `.name`) and `ask_each(hosts, daemon, method, reply,
    request)`, like harness.db.TesseraDB. Returns the checker result (see `compare`)."""
    hosts = list(db.hosts)

    def ask(req):
        return db.ask_each(hosts, "tserver", "ts.checksum", ChecksumReport, req)

    return converge(ask, [h.name for h in hosts], timeout)
