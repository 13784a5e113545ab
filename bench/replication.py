"""Replicated single-op write throughput and latency: Tessera (3 replicas, fsync on) against
PySyncObj (3 nodes, in-memory log, no fsync by design), measured one after the other on this
machine, each driven the way it is meant to be driven.

PySyncObj runs as three node processes on loopback (bench/_pysyncobj_node.py), like its authors'
benchmark (benchmarks/benchmarks.py + testobj.py in bakwc/PySyncObj): default SyncObjConf,
asynchronous @replicated calls with callback=, load issued from every node (followers forward to
the leader); by default the sweep is also run with the leader alone issuing the load, which does
better on 2 cores. Here the load is closed loop: for each N in --pysyncobj-sweep, N commands are
kept outstanding (split evenly over the issuing nodes) and a command counts when its callback
reports success inside the measuring window. Its best point, either way, is reported.

Tessera runs as a LocalCluster (1 master, 3 tablet servers, one tablet with 3 replicas) and is
driven through the asyncio client by C concurrent writers, each issuing one single-op write at a
time, for each C in --tessera-sweep, with p50/p99 write latency at every step. Its best point is
reported.

Both systems also get the single-client p50: one writer, one write at a time (PySyncObj: sync=True
on the leader node).

Prints one JSON line on stdout (progress goes to stderr): pysyncobj_sweep, pysyncobj_best_ops_per_s,
tessera_sweep, tessera_best_ops_per_s, ratio_single_op (tessera best / pysyncobj best),
target_single_op, the two single-client p50s. Not measured yet (the fields are absent, not null):
batched-session writes and reads, which will be added later.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from node.client import TesseraClient  # noqa: E402
from node.tools.local_cluster import LocalCluster, free_port  # noqa: E402

TARGET_SINGLE_OP = 0.6
DEFAULT_TESSERA_SWEEP = [1, 8, 64, 512]
DEFAULT_PYSYNCOBJ_SWEEP = [100, 1000, 5000, 20000]


def _log(msg: str) -> None:
    print(f"[replication] {msg}", file=sys.stderr, flush=True)


def _pct(sorted_vals: list[float], q: float) -> float:
    return sorted_vals[min(len(sorted_vals) - 1, int(len(sorted_vals) * q))]


# ----------------------------------------------------------------------------------- Tessera

async def _tessera_run(masters, sweep: list[int], seconds: float, latency_ops: int) -> dict:
    client = TesseraClient(masters, timeout=20)
    try:
        await client.create_table("bench", num_tablets=1, replication_factor=3)
        table = client.table("bench")
        await table.write("warm", 0)
        lat = []
        for i in range(latency_ops):
            t = time.perf_counter()
            await table.write(f"l{i}", i)
            lat.append(time.perf_counter() - t)
        lat.sort()
        p50_1 = lat[len(lat) // 2] * 1000
        _log(f"tessera single-client p50 {p50_1:.2f} ms over {latency_ops} writes")

        loop = asyncio.get_running_loop()
        points = []
        for clients in sweep:
            stop = loop.time() + seconds
            lats: list[float] = []

            async def one(c: int, stop=stop, lats=lats):
                n = 0
                while loop.time() < stop:
                    t = time.perf_counter()
                    await table.write(f"c{c}-{n % 100}", n)
                    lats.append(time.perf_counter() - t)
                    n += 1

            t0 = time.perf_counter()
            await asyncio.gather(*(one(c) for c in range(clients)))
            elapsed = time.perf_counter() - t0
            lats.sort()
            pt = {"clients": clients, "ops_per_s": round(len(lats) / elapsed, 1),
                  "p50_ms": round(_pct(lats, 0.50) * 1000, 2), "p99_ms": round(_pct(lats, 0.99) * 1000, 2)}
            points.append(pt)
            _log(f"tessera clients={clients}: {pt['ops_per_s']} ops/s p50 {pt['p50_ms']} ms p99 {pt['p99_ms']} ms")
        return {"p50_ms_1client": p50_1, "sweep": points}
    finally:
        await client.close()


def tessera(sweep: list[int], seconds: float, latency_ops: int) -> dict:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as d:
        c = LocalCluster(Path(d), masters=1, tservers=3)
        try:
            _log("tessera: starting LocalCluster (1 master, 3 tservers)")
            c.up(timeout=60)
            return asyncio.run(_tessera_run(c.master_addrs, sweep, seconds, latency_ops))
        finally:
            c.down()


# --------------------------------------------------------------------------------- PySyncObj

class _Node:
    """One bench/_pysyncobj_node.py subprocess, spoken to in JSON lines."""

    def __init__(self, me: str, peers: list[str]):
        script = Path(__file__).with_name("_pysyncobj_node.py")
        self.addr = me
        self.proc = subprocess.Popen([sys.executable, str(script), "--self", me, "--peers", ",".join(peers)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send(self, obj: dict) -> None:
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def recv(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"pysyncobj node {self.addr}: no answer in {timeout:.0f} s")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"pysyncobj node {self.addr} exited (rc {self.proc.poll()})")
            if line.strip().startswith("{"):
                return json.loads(line)

    def close_stdin(self) -> None:
        try:
            self.proc.stdin.close()  # EOF: an idle node destroys itself and exits
        except OSError:
            pass

    def stop(self, deadline: float) -> None:
        """Wait for the exit that close_stdin() asked for until `deadline`, then kill."""
        try:
            self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.proc.kill()  # busy in a load window, or stuck
            self.proc.wait()


def pysyncobj(sweep: list[int], seconds: float, latency_ops: int, drive: str, warmup: float) -> dict:
    addrs = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    nodes: list[_Node] = []
    try:
        _log("pysyncobj: starting 3 node processes")
        for me in addrs:
            nodes.append(_Node(me, [a for a in addrs if a != me]))
        for n in nodes:
            n.recv(timeout=60)  # {"event": "ready"}: this node knows a leader
        by_addr = {n.addr: n for n in nodes}
        deadline = time.monotonic() + 30
        while True:  # wait until all three agree on one leader
            for n in nodes:
                n.send({"cmd": "leader"})
            seen = {n.recv(timeout=10)["leader"] for n in nodes}
            leader_addr = seen.pop() if len(seen) == 1 else None
            if leader_addr in by_addr:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("pysyncobj: the nodes did not agree on a leader in 30 s")
            time.sleep(0.2)
        leader = by_addr[leader_addr]
        _log(f"pysyncobj: leader {leader_addr}")

        leader.send({"cmd": "latency", "ops": latency_ops})
        lat = leader.recv(timeout=latency_ops * 10 + 30)
        _log(f"pysyncobj single-client p50 {lat['p50_ms']:.2f} ms over {latency_ops} sync=True writes")

        points = []
        for mode, outstanding in [(m, n) for m in (("all", "leader") if drive == "both" else (drive,))
                                  for n in sweep]:
            drivers = nodes if mode == "all" else [leader]
            start_at = time.time() + 0.5
            share = [outstanding // len(drivers) + (1 if i < outstanding % len(drivers) else 0)
                     for i in range(len(drivers))]
            active = [(n, k) for n, k in zip(drivers, share, strict=True) if k > 0]
            for n, k in active:
                n.send({"cmd": "load", "outstanding": k, "start_at": start_at,
                        "warmup": warmup, "seconds": seconds})
            res = [n.recv(timeout=warmup + seconds + 60) for n, _ in active]
            ok = sum(r["ok"] for r in res)
            err = sum(r["err"] for r in res)
            for n in nodes:
                n.send({"cmd": "leader"})
            leaders = {n.recv(timeout=10)["leader"] for n in nodes}
            pt = {"outstanding": outstanding, "drive": mode, "ops_per_s": round(ok / seconds, 1)}
            if err:
                pt["errors"] = err
            if not all(r["drained"] for r in res):
                pt["undrained"] = True
            if leaders != {leader_addr}:
                pt["leader_changed"] = True  # an election during the point: its figure is suspect
            points.append(pt)
            _log(f"pysyncobj drive={mode} outstanding={outstanding}: {pt['ops_per_s']} committed ops/s"
                 + (f", {err} failed callbacks" if err else "")
                 + ("" if all(r["drained"] for r in res) else ", NOT drained after the window")
                 + (f", LEADER CHANGED {sorted(leaders)}" if leaders != {leader_addr} else ""))
            if leaders != {leader_addr}:
                break  # the leader node is gone as the leader: later points would be meaningless
        return {"p50_ms_1client": lat["p50_ms"], "sweep": points, "leader": leader_addr}
    finally:
        for n in nodes:
            n.close_stdin()
        deadline = time.monotonic() + 3
        for n in nodes:
            n.stop(deadline)


# -------------------------------------------------------------------------------------- plot

def _plot_svg(path: Path, series: list[tuple[str, str, list[tuple[float, float]]]], xlabel: str) -> None:
    """Tiny hand-written SVG line plot (log-x), used when matplotlib is not installed."""
    import math
    w, h, ml, mr, mt, mb = 640, 400, 70, 20, 30, 50
    xs = [x for _, _, pts in series for x, _ in pts]
    ys = [y for _, _, pts in series for _, y in pts]
    lx0, lx1 = math.log10(min(xs)), math.log10(max(xs))
    if lx1 == lx0:
        lx0, lx1 = lx0 - 0.5, lx1 + 0.5
    y1 = max(ys) * 1.1 or 1.0

    def px(x):
        return ml + (math.log10(x) - lx0) / (lx1 - lx0) * (w - ml - mr)

    def py(y):
        return h - mb - y / y1 * (h - mt - mb)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{ml}" y1="{h - mb}" x2="{w - mr}" y2="{h - mb}" stroke="black"/>',
           f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{h - mb}" stroke="black"/>',
           f'<text x="{(w + ml) / 2}" y="{h - 10}" text-anchor="middle">{xlabel}</text>',
           f'<text x="15" y="{(h - mb + mt) / 2}" transform="rotate(-90 15 {(h - mb + mt) / 2})" '
           f'text-anchor="middle">committed ops/s</text>']
    for i in range(6):
        y = y1 * i / 5
        out.append(f'<text x="{ml - 5}" y="{py(y) + 4:.1f}" text-anchor="end">{y:,.0f}</text>')
    for x in sorted(set(xs)):
        out.append(f'<text x="{px(x):.1f}" y="{h - mb + 15}" text-anchor="middle">{x:g}</text>')
    for k, (label, color, pts) in enumerate(series):
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="2"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{color}"/>' for x, y in pts]
        out.append(f'<text x="{ml + 10}" y="{mt + 15 * k}" fill="{color}">{label}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def plot(path: Path, doc: dict) -> Path:
    series = [
        ("Tessera (x = concurrent clients)", "tab:blue",
         [(p["clients"], p["ops_per_s"]) for p in doc["tessera_sweep"]]),
    ]
    for drive, color in (("all", "tab:orange"), ("leader", "tab:red")):
        pts = [(p["outstanding"], p["ops_per_s"]) for p in doc["pysyncobj_sweep"] if p["drive"] == drive]
        if pts:
            who = "all 3 nodes" if drive == "all" else "leader only"
            series.append((f"PySyncObj, {who} issuing (x = outstanding commands)", color, pts))
    xlabel = "concurrency (Tessera: clients; PySyncObj: outstanding commands), log scale"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = path.with_suffix(".svg")
        _plot_svg(path, [(lbl, c.replace("tab:", ""), pts) for lbl, c, pts in series], xlabel)
        return path
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, color, pts in series:
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label, color=color)
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("committed ops/s")
    ax.set_ylim(bottom=0)
    ax.set_title("Replicated single-op writes, 3 replicas on one machine")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# -------------------------------------------------------------------------------------- main

def _int_list(s: str) -> list[int]:
    try:
        vals = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {s!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {s!r}")
    return vals


def _on_sigterm(_signo, _frame):
    raise KeyboardInterrupt  # unwind through the finally blocks that stop every process


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true",
                    help="accepted for compatibility; one JSON line on stdout is always the output")
    ap.add_argument("--seconds", type=float, default=None,
                    help="measuring window per sweep point, in seconds (default 10, 3 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="shorthand for --seconds 3 --latency-ops 50 (explicit flags win)")
    ap.add_argument("--latency-ops", type=int, default=None,
                    help="sequential writes for each system's single-client p50 (default 200, 50 with --quick)")
    ap.add_argument("--tessera-sweep", type=_int_list, default=DEFAULT_TESSERA_SWEEP, metavar="C,C,...",
                    help="Tessera concurrent single-op writers per point (default 1,8,64,512)")
    ap.add_argument("--pysyncobj-sweep", type=_int_list, default=DEFAULT_PYSYNCOBJ_SWEEP, metavar="N,N,...",
                    help="PySyncObj commands kept outstanding per point (default 100,1000,5000,20000)")
    ap.add_argument("--pysyncobj-drive", choices=("both", "all", "leader"), default="both",
                    help="which PySyncObj nodes issue the commands: 'all' three, N split evenly, as "
                         "in its authors' benchmark; only the 'leader'; or 'both' (default): the "
                         "sweep once each way, the best point of either counts")
    ap.add_argument("--pysyncobj-warmup", type=float, default=1.0,
                    help="seconds of PySyncObj load before each window starts counting (default 1)")
    ap.add_argument("--only", choices=("tessera", "pysyncobj"), default=None,
                    help="run one system only (no ratio is printed then)")
    ap.add_argument("--plot", type=Path, default=None, metavar="PATH",
                    help="also write ops/s against concurrency for both systems to PATH (PNG with "
                         "matplotlib; an .svg beside it if matplotlib is not installed)")
    a = ap.parse_args()
    if a.seconds is None:
        a.seconds = 3.0 if a.quick else 10.0
    latency_ops = a.latency_ops if a.latency_ops is not None else (50 if a.quick else 200)
    if a.plot and a.only:
        ap.error("--plot needs both systems (drop --only)")
    signal.signal(signal.SIGTERM, _on_sigterm)

    doc: dict = {"seconds_per_point": a.seconds}
    try:
        if a.only != "pysyncobj":
            t = tessera(a.tessera_sweep, a.seconds, latency_ops)
            best = max(t["sweep"], key=lambda p: p["ops_per_s"])
            doc.update(tessera_fsync=True, tessera_sweep=t["sweep"], tessera_best_ops_per_s=best["ops_per_s"],
                       tessera_best_clients=best["clients"],
                       tessera_p50_ms_1client=round(t["p50_ms_1client"], 2))
        if a.only != "tessera":
            p = pysyncobj(a.pysyncobj_sweep, a.seconds, latency_ops, a.pysyncobj_drive, a.pysyncobj_warmup)
            best = max(p["sweep"], key=lambda q: q["ops_per_s"])
            doc.update(pysyncobj_fsync=False, pysyncobj_sweep=p["sweep"], pysyncobj_best_ops_per_s=best["ops_per_s"],
                       pysyncobj_best_outstanding=best["outstanding"], pysyncobj_best_drive=best["drive"],
                       pysyncobj_p50_ms_1client=round(p["p50_ms_1client"], 2))
    except KeyboardInterrupt:
        _log("interrupted; every process started was stopped")
        return 130
    if a.only is None and doc["pysyncobj_best_ops_per_s"] > 0:
        doc["ratio_single_op"] = round(doc["tessera_best_ops_per_s"] / doc["pysyncobj_best_ops_per_s"], 3)
    doc["target_single_op"] = TARGET_SINGLE_OP
    if a.plot:
        written = plot(a.plot, doc)
        _log(f"plot written to {written}")
    print(json.dumps(doc), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
