"""Where each microsecond of a replicated single-op write goes, in Tessera and in PySyncObj.

Each system runs the way bench/replication.py runs it at its best (Tessera: --clients
concurrent single-op writers from --client-procs load processes against a fresh LocalCluster of
three tablet servers; PySyncObj: the leader alone keeping --outstanding commands in flight).
During the measuring window:

- every process's cost per committed op: CPU µs, context switches (each voluntary one is a
  wake-up) and read/write-class syscalls, from /proc (bench/replication.py's meter);
- py-spy samples the busiest processes (Tessera's leader, one follower and the load processes;
  PySyncObj's leader) at --rate Hz, without stopping them (--nonblocking). Idle threads are not
  sampled, so a function's share is its share of the process's busy time. The leaf functions
  with the most samples (self time) and the frames most often on the stack (inclusive) are
  reported, and the raw collapsed stacks are kept in --out for a flame graph.

Prints one JSON line on stdout (progress on stderr), with the speed anchor (`sum(range(1000))`
in µs, best of 5) taken before each system, which says which host kind it ran on.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replication import (  # noqa: E402
    DEFAULT_CLIENT_PROCS,
    _create_table,
    _log,
    _pysyncobj_cluster,
    _pysyncobj_point,
    _run_async,
    _with_cluster,
    anchor_us,
)

TOP = 15
PY_SPY = str(Path(sys.executable).with_name("py-spy")) if Path(sys.executable).with_name(
    "py-spy").exists() else shutil.which("py-spy")
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^():]*)(?::\d+)?\)$")


def _frame_name(frame: str) -> str:
    """`func (path/to/module.py:123)` as `module.py:func`: one name for every line of it."""
    m = FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    return f"{Path(m['file']).name}:{m['func']}"


def summarize(raw: Path) -> dict:
    """Self and inclusive shares of the busy samples in a py-spy raw (collapsed) file."""
    own: collections.Counter[str] = collections.Counter()
    total_on_stack: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame_name(f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))] or frames
        samples += n
        own[frames[-1]] += n
        for f in set(frames):
            total_on_stack[f] += n

    def share(c: collections.Counter[str]) -> list[list]:
        return [[name, round(100 * k / max(samples, 1), 1)] for name, k in c.most_common(TOP)]

    return {"samples": samples, "self_pct": share(own), "inclusive_pct": share(total_on_stack)}


class _Spy:
    """py-spy recording some processes for `seconds`, starting `delay` seconds from now (after
    the load processes' set-up, inside the measuring window)."""

    def __init__(self, pids: dict[str, int], out: Path, delay: float, seconds: float, rate: int):
        self.files = {name: out / f"{name}.txt" for name in pids}
        self.procs: list[subprocess.Popen] = []

        def start() -> None:
            time.sleep(delay)
            for name, pid in pids.items():
                self.procs.append(subprocess.Popen(
                    [PY_SPY, "record", "--pid", str(pid), "--duration", str(int(seconds)),
                     "--rate", str(rate), "--format", "raw", "--nonblocking",
                     "--output", str(self.files[name])],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

        self.thread = threading.Thread(target=start, daemon=True)
        self.thread.start()

    def results(self) -> dict:
        self.thread.join()
        out = {}
        for name, p in zip(self.files, self.procs, strict=True):
            _, err = p.communicate(timeout=120)
            f = self.files[name]
            if p.returncode != 0 or not f.exists():
                out[name] = {"error": (err or b"").decode(errors="replace")[-300:]}
            else:
                out[name] = summarize(f)
        return out


def tessera(a) -> dict:
    def run(c, a_, pool):
        roles = _run_async(a_, _create_table(c, 1))
        pids = {"leader": roles["leader"][0], "follower1": roles["follower1"][0],
                **{f"client{i}": ch.proc.pid for i, ch in enumerate(pool.children)}}
        spy = _Spy(pids, a.out / "tessera", 2.0, a.seconds - 3, a.rate)
        if a.batched:
            pt = pool.point("sessions", "batched", a.batched, a.seconds, roles)
        else:
            pt = pool.point("clients", "writes", a.clients, a.seconds, roles)
        return {**pt, "profile": spy.results()}

    (a.out / "tessera").mkdir(parents=True, exist_ok=True)
    load = (f"{a.batched} batching sessions" if a.batched else f"{a.clients} single-op writers")
    _log(f"tessera: {load} for {a.seconds:g} s, py-spy on the leader, a follower and the load processes")
    return _with_cluster([], a, run)


def pysyncobj(a) -> dict:
    (a.out / "pysyncobj").mkdir(parents=True, exist_ok=True)
    _log(f"pysyncobj: the leader drives {a.outstanding} outstanding for {a.seconds:g} s, "
         f"py-spy on the leader")
    warmup = 1.0
    with _pysyncobj_cluster() as (nodes, leader):
        spy = _Spy({"leader": leader.proc.pid}, a.out / "pysyncobj", 0.5 + warmup + 1.0,
                   a.seconds - 2, a.rate)
        pt = _pysyncobj_point(nodes, leader, "leader", a.outstanding, a.seconds, warmup)
        return {**pt, "profile": spy.results()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="accepted for `make bench`; the output "
                                                        "is always one JSON line")
    ap.add_argument("--seconds", type=float, default=12.0, help="measuring window (default 12)")
    ap.add_argument("--clients", type=int, default=1024,
                    help="Tessera's concurrent single-op writers (default 1024, its best)")
    ap.add_argument("--batched", type=int, default=0, metavar="SESSIONS",
                    help="drive Tessera with this many AUTO_FLUSH_BACKGROUND sessions instead "
                         "of single-op writers (64 is its best; default 0: single-op)")
    ap.add_argument("--row-futures", action="store_true",
                    help="with --batched: a future per row, as bench/replication.py's "
                         "--row-futures (default: Kudu's error collector)")
    ap.add_argument("--client-procs", type=int, default=DEFAULT_CLIENT_PROCS,
                    help=f"Tessera's load processes (default {DEFAULT_CLIENT_PROCS})")
    ap.add_argument("--outstanding", type=int, default=20000,
                    help="PySyncObj's commands in flight, issued by its leader (default 20000, "
                         "its best in a past sweep)")
    ap.add_argument("--event-loop", choices=("auto", "asyncio", "uvloop"), default="auto")
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples a second (default 200)")
    ap.add_argument("--only", choices=("tessera", "pysyncobj"))
    ap.add_argument("--out", type=Path, default=Path("/var/tmp/tessera-profile"),
                    help="where the raw collapsed stacks go (default /var/tmp/tessera-profile)")
    a = ap.parse_args()
    if a.seconds < 5:
        ap.error("--seconds must be at least 5 (py-spy starts inside the window)")
    for flag, value in (("--clients", a.clients), ("--client-procs", a.client_procs),
                        ("--outstanding", a.outstanding), ("--rate", a.rate)):
        if value < 1:
            ap.error(f"{flag} must be at least 1, not {value}")
    if a.batched < 0:
        ap.error(f"--batched must be 0 (single-op) or a number of sessions, not {a.batched}")
    if PY_SPY is None:
        ap.error("py-spy is not installed: pip install -e '.[bench]'")
    doc: dict = {"bench": "profile_write_path", "seconds": a.seconds}
    if a.only != "pysyncobj":
        doc["anchor_us_tessera"] = anchor_us()
        doc["tessera"] = tessera(a)
    if a.only != "tessera":
        doc["anchor_us_pysyncobj"] = anchor_us()
        doc["pysyncobj"] = pysyncobj(a)
    doc["raw_stacks"] = str(a.out)
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
