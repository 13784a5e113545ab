"""The load processes' side of bench/replication.py's protocol (bench/_tessera_load.py,
bench/_etcd_load.py): JSON lines on stdin/stdout. "prepare" builds a point's clients and is
answered {"ready": true}; "go" runs them and is answered with the point's counts and latency
histogram: {"ops", "failed", "elapsed", "hist"}, latencies in buckets of HIST_RES_S so the
parent merges the processes' histograms exactly."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

HIST_RES_S = 1e-5  # 10 µs latency buckets


class Point(Protocol):
    async def run(self) -> dict[str, Any]: ...


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def serve(prepare: Callable[[dict], Awaitable[Point]]) -> None:
    """Answer the parent's commands until stdin closes: `prepare(request)` builds a point."""
    loop = asyncio.get_running_loop()
    point = None
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        if not line.strip():
            continue
        req = json.loads(line)
        if req["cmd"] == "prepare":
            point = await prepare(req)
            emit({"ready": True})
        elif req["cmd"] == "go" and point is not None:
            emit(await point.run())
            point = None
        else:
            emit({"error": f"unexpected cmd {req['cmd']!r}"})
