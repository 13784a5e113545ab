"""Synthetic stored runs for the benchmark and the tests: register histories that are
linearizable by construction (each op takes effect at its invoke), optionally with a stale read
appended, plus nemesis ops and node logs with Raft lines, laid out as the harness lays out runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

from reports.history import NEMESIS, Op, write_jsonl

MS = 1_000_000


def register_history(n_ops: int, seed: int, keys: int = 8, concurrency: int = 10,
                     stale_read: bool = False) -> list[Op]:
    """`n_ops` client ops (invoke + completion each) on `keys` registers, and kill faults every
    ~5 s. With `stale_read`, the last op reads a value no one ever wrote: not linearizable."""
    rng = random.Random(seed)
    events: list[tuple[int, int, dict]] = []  # (time, tiebreak, fields)
    state = {f"r{k}": None for k in range(keys)}
    free_at = {p: rng.randrange(5 * MS) for p in range(concurrency)}
    proc = {p: p for p in range(concurrency)}
    seq = 0
    invokes: list[tuple[int, int, int]] = []  # (invoke time, lane, completion time)
    for _ in range(n_ops):
        lane = min(free_at, key=free_at.get)
        t = free_at[lane]
        done = t + rng.randrange(MS // 2, 10 * MS)
        invokes.append((t, lane, done))
        free_at[lane] = done + rng.randrange(MS // 10, 2 * MS)
    invokes.sort()  # take effect in invoke order: that order is a linearization
    for t, lane, done in invokes:
        p, key = proc[lane], f"r{rng.randrange(keys)}"
        f = rng.choice(("read", "read", "write", "cas"))
        if f == "read":
            inv_v, out_v, out_t = None, state[key], "ok"
        elif f == "write":
            inv_v = out_v = rng.randrange(5)
            state[key], out_t = inv_v, "ok"
        else:
            inv_v = out_v = [rng.randrange(5), rng.randrange(5)]
            out_t = "ok" if state[key] == inv_v[0] else "fail"
            if out_t == "ok":
                state[key] = inv_v[1]
        if f == "write" and rng.random() < 0.005:  # a timed-out write: outcome unknown, retire
            out_t, proc[lane] = "info", proc[lane] + concurrency
        seq += 1
        events.append((t, seq, {"type": "invoke", "process": p, "f": f, "value": inv_v, "key": key}))
        events.append((done, seq, {"type": out_t, "process": p, "f": f, "value": out_v, "key": key}))
    end = max(t for t, _, _ in events)
    if stale_read:
        p = max(proc.values()) + 1
        events.append((end + MS, 0, {"type": "invoke", "process": p, "f": "read", "value": None, "key": "r0"}))
        events.append((end + 2 * MS, 0, {"type": "ok", "process": p, "f": "read", "value": 99, "key": "r0"}))
    for i, start in enumerate(range(2_000 * MS, end, 5_000 * MS)):
        target = f"n{i % 5 + 1}"
        for t, f, value in ((start, "start-kill", None), (start + 10 * MS, "start-kill", {"killed": [target]}),
                            (start + 2_500 * MS, "stop-kill", None),
                            (start + 2_520 * MS, "stop-kill", {"restarted": [target]})):
            events.append((t, -1, {"type": "info", "process": NEMESIS, "f": f, "value": value}))
    events.sort(key=lambda e: (e[0], e[1]))
    return [Op(index=i, time=t, **fields) for i, (t, _, fields) in enumerate(events)]


def raft_log(seed: int, host: str, seconds: int) -> str:
    """A node log with Raft role lines for two tablets (leadership moving every few seconds)."""
    rng = random.Random(seed)
    lines = []
    for tablet in ("t0001", "t0002"):
        for term, s in enumerate(range(0, seconds, 4), 1):
            leader = f"n{rng.randrange(1, 6)}"
            role = "LEADER" if leader == host else "FOLLOWER"
            lines.append((s, f"2026-11-22 10:{s // 60:02d}:{s % 60:02d},{rng.randrange(1000):03d} tserver INFO "
                             f"node.replica.replica: raft tablet={tablet} term={term} role={role} leader=u-{leader}"))
    return "\n".join(line for _, line in sorted(lines)) + "\n"


def write_run(store: Path, stamp: str, ops: list[Op], seed: int, test: str = "register",
              workload: str = "register", **recorded) -> Path:
    """A run directory as the harness writes it: test.json (plus `recorded` fields),
    history.jsonl, node logs."""
    run = store / test / stamp
    (run / "nodes").mkdir(parents=True)
    seconds = max((op.time or 0 for op in ops), default=0) // 1_000_000_000 + 1
    (run / "test.json").write_text(json.dumps({
        "command": f"tessera test --workload {workload} --nemesis kill --time-limit {seconds}",
        "workload": workload, "nemesis": ["kill"], "seed": seed, "time_limit": float(seconds),
        "concurrency": 10, "hosts": [{"name": f"n{i}"} for i in range(1, 6)], "flags": {},
        **recorded}))
    write_jsonl(ops, run / "history.jsonl")
    for i in range(1, 6):
        (run / "nodes" / f"n{i}").mkdir()
        (run / "nodes" / f"n{i}" / "tserver.log").write_text(raft_log(seed, f"n{i}", int(seconds)))
    return run
