"""Replicated write throughput and latency: Tessera (3 replicas, fsync on) against PySyncObj
(3 nodes, no fsync by design) measured in the same run on this machine.

Prints one JSON line: tessera_ops_per_s and pysyncobj_ops_per_s at 64 concurrent clients, their
ratio, and each system's p50 latency with one client issuing one write at a time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from node.client import TesseraClient  # noqa: E402
from node.tools.local_cluster import LocalCluster, free_port  # noqa: E402


async def _tessera_load(masters, clients: int, seconds: float, latency_ops: int) -> dict:
    client = TesseraClient(masters, timeout=20)
    await client.create_table("bench", num_tablets=1, replication_factor=3)
    table = client.table("bench")
    await table.write("warm", 0)
    lat = []
    for i in range(latency_ops):
        t = time.perf_counter()
        await table.write(f"l{i}", i)
        lat.append(time.perf_counter() - t)
    lat.sort()
    done = 0
    loop = asyncio.get_running_loop()
    stop = loop.time() + seconds

    async def one(c: int):
        nonlocal done
        n = 0
        while loop.time() < stop:
            await table.write(f"c{c}-{n % 100}", n)
            n += 1
        done += n

    t0 = time.perf_counter()
    await asyncio.gather(*(one(c) for c in range(clients)))
    elapsed = time.perf_counter() - t0
    await client.close()
    return {"ops_per_s": done / elapsed, "p50_ms_1client": lat[len(lat) // 2] * 1000}


def tessera(clients: int, seconds: float, latency_ops: int) -> dict:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        c = LocalCluster(Path(d), masters=1, tservers=3)
        try:
            c.up(timeout=60)
            return asyncio.run(_tessera_load(c.master_addrs, clients, seconds, latency_ops))
        finally:
            c.down()


def pysyncobj(clients: int, seconds: float, latency_ops: int) -> dict:
    node = Path(__file__).with_name("_pysyncobj_node.py")
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    procs = []
    try:
        for i, me in enumerate(addrs):
            peers = ",".join(a for a in addrs if a != me)
            argv = [sys.executable, str(node), "--self", me, "--peers", peers]
            if i == 0:
                argv += ["--drive", "--clients", str(clients), "--seconds", str(seconds),
                         "--latency-ops", str(latency_ops)]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE if i == 0 else subprocess.DEVNULL,
                                          text=True))
        out, _ = procs[0].communicate(timeout=seconds * 4 + latency_ops + 60)
        return json.loads(out.strip().splitlines()[-1])
    finally:
        for p in procs:
            p.kill()
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true", help="print one JSON line (the default output)")
    ap.add_argument("--quick", action="store_true", help="shorter runs")
    ap.add_argument("--clients", type=int, default=64)
    a = ap.parse_args()
    seconds, latency_ops = (3.0, 50) if a.quick else (10.0, 200)
    t = tessera(a.clients, seconds, latency_ops)
    p = pysyncobj(a.clients, seconds, latency_ops)
    print(json.dumps({
        "clients": a.clients,
        "tessera_ops_per_s": round(t["ops_per_s"], 1),
        "pysyncobj_ops_per_s": round(p["ops_per_s"], 1),
        "ratio": round(t["ops_per_s"] / p["ops_per_s"], 2),
        "tessera_p50_ms_1client": round(t["p50_ms_1client"], 2),
        "pysyncobj_p50_ms_1client": round(p["p50_ms_1client"], 2),
        "tessera_fsync": True,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
