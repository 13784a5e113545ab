"""Where a lone write's time goes, hop by hop, measured by difference in one run.

One writer, one op at a time, through TesseraClient, on a LocalCluster (1 master, 3 tablet
servers), first with fsync on (the default) and then on a fresh one with
`--log-force-fsync-all false`. On each cluster, --ops of each, interleaved in rounds of 50 so
a drift of the host's speed falls on all alike:

- `rtt`: a `ts.status` call to a tablet server: the client's round trip and the RPC layer;
- `read`: a linearizable (ReadIndex) read of the 3-replica tablet: a round trip, plus one
  heartbeat round from its leader to the followers;
- `write_rf1`: a write to a 1-replica tablet: the round trip plus the leader's own work (session,
  proposal, WAL write and sync on the appender thread, apply, answer);
- `write_rf3`: the same on a 3-replica tablet, CLIENT_PROPAGATED (Kudu's default): also a
  follower's append, its WAL sync and its answer, overlapped with the leader's own;
- `write_rf3_cw`: the same, COMMIT_WAIT.

The hops are differences of medians: the leader's own work is write_rf1 - rtt, the follower
hop write_rf3 - write_rf1, the fsyncs' share each figure's fsync-on minus fsync-off, and
commit-wait write_rf3_cw - write_rf3. A difference of medians is not the median of a
difference, so the hops are estimates; the raw p50s and p99s come with them.

Prints one JSON line on stdout (progress on stderr), with the speed anchor (`sum(range(1000))`
in µs, best of 5) at the start and the end.

    python bench/lone_write_hops.py [--ops 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replication import _log, anchor_us  # noqa: E402
from node.client import TesseraClient  # noqa: E402
from node.protocol import CLIENT_PROPAGATED, COMMIT_WAIT, Empty, ServerStatus  # noqa: E402
from node.tools.local_cluster import LocalCluster  # noqa: E402

ROUND = 50  # ops of one kind before the next kind's


def _quantiles(samples: list[float]) -> dict:
    s = sorted(samples)
    return {"p50_ms": round(statistics.median(s) * 1e3, 3),
            "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3, 3), "n": len(s)}


async def _measure(c: LocalCluster, ops: int) -> dict:
    """Each kind's latencies on cluster `c`, in interleaved rounds."""
    cp = TesseraClient(c.master_addrs, timeout=20, tls=c.tls(), external_consistency=CLIENT_PROPAGATED)
    cw = TesseraClient(c.master_addrs, timeout=20, tls=c.tls(), external_consistency=COMMIT_WAIT)
    try:
        await cp.create_table("rf1", num_tablets=1, replication_factor=1)
        await cp.create_table("rf3", num_tablets=1, replication_factor=3)
        rf1, rf3, rf3_cw = cp.table("rf1"), cp.table("rf3"), cw.table("rf3")
        ts = next(d for d in c.daemons.values() if d.kind == "tserver")
        for t in (rf1, rf3, rf3_cw):  # sessions opened, locations cached, leaders found
            for k in range(20):
                await t.write(f"warm-{k}", k)

        async def status():
            await cp.rpc.call((ts.host, ts.port), "ts.status", Empty(), ServerStatus, to_uuid="",
                              timeout=5)

        kinds = {"rtt": status,
                 "read": lambda: rf3.read("k-0"),
                 "write_rf1": None, "write_rf3": None, "write_rf3_cw": None}
        tables = {"write_rf1": rf1, "write_rf3": rf3, "write_rf3_cw": rf3_cw}
        samples: dict[str, list[float]] = {k: [] for k in kinds}
        i = 0
        while len(samples["rtt"]) < ops:
            for kind, call in kinds.items():
                for _ in range(ROUND):
                    i += 1
                    started = time.perf_counter()
                    if call is None:
                        await tables[kind].write(f"k-{i % 100}", i)
                    else:
                        await call()
                    samples[kind].append(time.perf_counter() - started)
        return {k: _quantiles(v) for k, v in samples.items()}
    finally:
        await cp.close()
        await cw.close()


def _cluster_run(flags: list[str], ops: int) -> dict:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        c = LocalCluster(Path(d), masters=1, tservers=3, flags=flags)
        try:
            _log(f"lone-write hops: LocalCluster {' '.join(flags) or '(defaults)'}, {ops} ops each")
            c.up(timeout=60)
            return asyncio.run(_measure(c, ops))
        finally:
            c.down()


def hops(on: dict, off: dict) -> dict:
    """The differences of medians (ms) the docstring names."""
    def p50(run: dict, kind: str) -> float:
        return run[kind]["p50_ms"]

    def diff(a: float, b: float) -> float:
        return round(a - b, 3)
    return {
        "client_round_trip": p50(on, "rtt"),
        "leader_own_work": diff(p50(on, "write_rf1"), p50(on, "rtt")),
        "leader_own_work_fsync_off": diff(p50(off, "write_rf1"), p50(off, "rtt")),
        "follower_hop": diff(p50(on, "write_rf3"), p50(on, "write_rf1")),
        "follower_hop_fsync_off": diff(p50(off, "write_rf3"), p50(off, "write_rf1")),
        "fsync_share_rf1": diff(p50(on, "write_rf1"), p50(off, "write_rf1")),
        "fsync_share_rf3": diff(p50(on, "write_rf3"), p50(off, "write_rf3")),
        "commit_wait": diff(p50(on, "write_rf3_cw"), p50(on, "write_rf3")),
        "write_over_read": diff(p50(on, "write_rf3"), p50(on, "read")),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="One JSON line on stdout; progress on stderr.")
    ap.add_argument("--json", action="store_true",
                    help="accepted for `make bench`; one JSON line on stdout is always the output")
    ap.add_argument("--ops", type=int, default=1000, metavar="N",
                    help="ops of each kind on each cluster (default 1000)")
    a = ap.parse_args(argv)
    if a.ops < ROUND:
        ap.error(f"--ops must be at least {ROUND}")
    doc: dict = {"bench": "lone_write_hops", "ops": a.ops, "anchor_us": [anchor_us()]}
    doc["fsync_on"] = _cluster_run([], a.ops)
    doc["fsync_off"] = _cluster_run(["--log-force-fsync-all", "false"], a.ops)
    doc["anchor_us"].append(anchor_us())
    doc["hops_ms"] = hops(doc["fsync_on"], doc["fsync_off"])
    print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
