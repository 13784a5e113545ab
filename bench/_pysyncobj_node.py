"""One PySyncObj node process for bench/replication.py (the anchor).

The parent starts three of these on loopback and talks to each over stdin/stdout, one JSON object
a line:

  out  {"event": "ready", "self": ADDR, "leader": ADDR}        once a leader is known
  in   {"cmd": "latency", "ops": N}                            one thread, sync=True writes
  out  {"p50_ms": ..., "p99_ms": ..., "ops": N}
  in   {"cmd": "load", "outstanding": N, "start_at": T, "warmup": W, "seconds": S}
  out  {"ok": ..., "err": ..., "submitted": ..., "drained": bool, "errors": {reason: count}}
  EOF on stdin                                                 destroy the node and exit

The load is driven the way PySyncObj's own benchmark (benchmarks/testobj.py in bakwc/PySyncObj)
drives it: asynchronous calls of a @replicated method with callback=, no sync=True, so thousands
of commands can be outstanding at once and get batched into append-entries messages. Unlike that
script (open loop at a fixed requests/s, binary-searched for the highest rate with >= 90 %
success), this one is closed loop: a semaphore keeps exactly N commands outstanding, and a
command's callback frees its slot. Successes are counted when the callback reports
FAIL_REASON.SUCCESS with a time inside [start_at + warmup, start_at + warmup + seconds] (wall
clock, so the three nodes' windows line up).
"""

import argparse
import json
import sys
import threading
import time

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf
from pysyncobj.batteries import ReplDict


def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _latency(d: ReplDict, ops: int) -> dict:
    lat = []
    for i in range(ops):
        t = time.perf_counter()
        d.set(f"l{i}", i, sync=True, timeout=10)
        lat.append(time.perf_counter() - t)
    lat.sort()
    return {"ops": ops, "p50_ms": lat[len(lat) // 2] * 1000,
            "p99_ms": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000}


def _load(d: ReplDict, outstanding: int, start_at: float, warmup: float, seconds: float,
          drain_timeout: float = 20.0) -> dict:
    slots = threading.Semaphore(outstanding)
    lock = threading.Lock()
    win_lo = start_at + warmup
    win_hi = win_lo + seconds
    st = {"ok": 0, "err": 0, "completed": 0}
    errors: dict[str, int] = {}

    # Called on PySyncObj's tick thread (or on this thread for QUEUE_FULL).
    def callback(_result, err):
        now = time.time()
        with lock:
            st["completed"] += 1
            if err == FAIL_REASON.SUCCESS:
                if win_lo <= now <= win_hi:
                    st["ok"] += 1
            else:
                st["err"] += 1
                errors[str(err)] = errors.get(str(err), 0) + 1
        slots.release()

    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    submitted = 0
    while time.time() < win_hi:
        if not slots.acquire(timeout=0.05):
            continue
        d.set(f"c{submitted % 1000}", submitted, callback=callback)
        submitted += 1
    # Let every outstanding command finish so the next point starts from an idle cluster.
    deadline = time.monotonic() + drain_timeout
    while time.monotonic() < deadline:
        with lock:
            if st["completed"] >= submitted:
                break
        time.sleep(0.01)
    with lock:
        return {"ok": st["ok"], "err": st["err"], "submitted": submitted,
                "drained": st["completed"] >= submitted, "errors": dict(errors)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--self", required=True, help="this node's host:port")
    ap.add_argument("--peers", required=True, help="the other nodes' host:port, comma-separated")
    a = ap.parse_args()
    d = ReplDict()
    # SyncObjConf() defaults, as in PySyncObj's benchmark (TestObj passes no conf at all):
    # appendEntriesUseBatch=True, appendEntriesPeriod=0.1, raftMinTimeout=0.4, raftMaxTimeout=1.4,
    # commandsQueueSize=100000, autoTick=True, no journalFile (in-memory log, no fsync).
    # dynamicMembershipChange=False is also the default; it is spelled out because the node set
    # is fixed here.
    node = SyncObj(a.self, a.peers.split(","), consumers=[d], conf=SyncObjConf(dynamicMembershipChange=False))
    try:
        while node._getLeader() is None:
            time.sleep(0.05)
        _emit({"event": "ready", "self": a.self, "leader": str(node._getLeader())})
        for line in sys.stdin:
            if not line.strip():
                continue
            req = json.loads(line)
            if req["cmd"] == "latency":
                _emit(_latency(d, int(req["ops"])))
            elif req["cmd"] == "load":
                _emit(_load(d, int(req["outstanding"]), float(req["start_at"]), float(req["warmup"]),
                            float(req["seconds"])))
            elif req["cmd"] == "leader":
                _emit({"leader": str(node._getLeader())})
            else:
                _emit({"error": f"unknown cmd {req['cmd']!r}"})
    except (KeyboardInterrupt, BrokenPipeError):
        pass
    finally:
        node.destroy()


if __name__ == "__main__":
    main()
