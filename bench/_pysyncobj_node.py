"""One PySyncObj node for bench/replication.py (the anchor). With --drive it also runs the load
from inside this node, against the replicated dict, and prints one JSON line."""

import argparse
import json
import threading
import time

from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.batteries import ReplDict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--self", required=True)
    ap.add_argument("--peers", required=True)
    ap.add_argument("--drive", action="store_true")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--latency-ops", type=int, default=100)
    a = ap.parse_args()
    d = ReplDict()
    node = SyncObj(a.self, a.peers.split(","), consumers=[d], conf=SyncObjConf(dynamicMembershipChange=False))
    if not a.drive:
        while True:
            time.sleep(3600)
    while node._getLeader() is None:
        time.sleep(0.05)
    d.set("warm", 0, sync=True)
    lat = []
    for i in range(a.latency_ops):
        t = time.perf_counter()
        d.set(f"l{i}", i, sync=True)
        lat.append(time.perf_counter() - t)
    lat.sort()
    done = [0]
    stop = time.monotonic() + a.seconds

    def client(c):
        n = 0
        while time.monotonic() < stop:
            d.set(f"c{c}-{n % 100}", n, sync=True, timeout=10)
            n += 1
        done[0] += n

    threads = [threading.Thread(target=client, args=(c,)) for c in range(a.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"ops_per_s": done[0] / (time.perf_counter() - t0),
                      "p50_ms_1client": lat[len(lat) // 2] * 1000}), flush=True)
    node.destroy()


if __name__ == "__main__":
    main()
