"""Unavailability after a leader crash: SIGKILL the tablet's leader under steady write load, ten
times, and measure from each kill to the first write acknowledged after it (default timeouts:
500 ms heartbeats, 3 missed periods, ±25% jitter). Prints one JSON line."""

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

from node.client import TesseraClient  # noqa: E402
from node.errors import OpFailed, OpUnknown  # noqa: E402
from node.tools.local_cluster import LocalCluster  # noqa: E402


async def _run(c: LocalCluster, kills: int, writers: int) -> list[float]:
    client = TesseraClient(c.master_addrs, timeout=10)
    locs = await client.create_table("bench", num_tablets=1, replication_factor=3)
    tablet = locs.tablets[0].tablet_id
    table = client.table("bench")
    await table.write("warm", 0)
    acks: list[tuple[float, float]] = []  # (invoked, acknowledged)
    stop = False

    async def writer(w: int):
        n = 0
        while not stop:
            invoked = time.monotonic()
            try:
                await table.write(f"w{w}-{n % 50}", n)
                acks.append((invoked, time.monotonic()))
            except (OpFailed, OpUnknown):
                pass
            n += 1

    tasks = [asyncio.create_task(writer(w)) for w in range(writers)]
    windows = []
    for k in range(kills):
        await asyncio.sleep(1.0)  # steady state before the kill
        victim = await c.tablet_leader(client.rpc, tablet, timeout=60)
        t_kill = time.monotonic()
        c.kill(victim)
        # Only writes invoked after the kill count: one already in flight may have been
        # committed just before it.
        while not any(inv > t_kill for inv, _ in acks[-writers * 2:]):
            await asyncio.sleep(0.005)
        first = min(ack for inv, ack in acks if inv > t_kill)
        windows.append(first - t_kill)
        print(f"kill {k + 1}/{kills}: {victim} down, writes resumed after {windows[-1]:.2f}s",
              file=sys.stderr)
        c.start(victim)
        await asyncio.sleep(1.5)  # let it rejoin before the next round
    stop = True
    await asyncio.gather(*tasks)
    await client.close()
    return windows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", action="store_true", help="print one JSON line (the default output)")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--writers", type=int, default=4)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        c = LocalCluster(Path(d), masters=1, tservers=3)
        try:
            c.up(timeout=60)
            windows = asyncio.run(_run(c, a.kills, a.writers))
        finally:
            c.down()
    print(json.dumps({"kills": len(windows), "p50_s": round(statistics.median(windows), 3),
                      "max_s": round(max(windows), 3),
                      "all_s": [round(w, 3) for w in windows]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
