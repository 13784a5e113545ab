"""One Tessera client process of bench/replication.py. A Python client is one thread on one
core, so a sweep point's clients are spread over several of these, as Kudu's loadgen spreads
its writers over threads; one process caps what a point can show at what one interpreter can
issue, not at what the cluster can commit.

Speaks bench/_load_protocol.py's JSON lines: a "prepare" command builds the point's clients,
"go" runs them and answers the counts and a latency histogram:

  writes   N writers, each one single-op write at a time on its own rows ("c<i>-<k>");
  batched  N AUTO_FLUSH_BACKGROUND sessions with Kudu's defaults, each fed as fast as its
           buffers take ops (rows "b<i>-<k>"). By default each session reports as Kudu's does
           and as `kudu perf loadgen` reads it: the rows that applied ok are counted (rows_ok,
           read when the window closes), the others collected as errors; no row has a future,
           so no row latency is measured. With "row_futures", each row's future counts it once
           its own result is ok, with its latency, as the harness's workloads read rows;
  reads    N readers, each one read at a time of the rows "c0-<k>" (k < 100) the parent wrote.

A point runs for `seconds`, or for `count` ops per client when given (the single-client p50).
Its writes go in the point's "external_consistency" mode (node.protocol), else the client's
default (CLIENT_PROPAGATED, Kudu's).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._load_protocol import HIST_RES_S, serve  # noqa: E402
from node.client import TesseraClient  # noqa: E402
from node.client.session import FlushMode, SessionOptions  # noqa: E402
from node.errors import OpFailed, OpUnknown  # noqa: E402
from node.server.daemon_cli import event_loop_factory  # noqa: E402
from node.tablet.ops import Write  # noqa: E402


class _Point:
    def __init__(self, table, req: dict):
        self.table, self.req = table, req
        self.hist: Counter[int] = Counter()
        self.ops = self.failed = 0
        self.sessions = []
        if req["kind"] == "batched":
            opts = SessionOptions(mode=FlushMode.AUTO_FLUSH_BACKGROUND,
                                  row_futures=req.get("row_futures", False))
            self.sessions = [table.new_session(opts) for _ in range(req["n"])]

    def _landed(self, lat: float) -> None:
        self.hist[int(lat / HIST_RES_S)] += 1
        self.ops += 1

    async def run(self) -> dict:
        req, loop = self.req, asyncio.get_running_loop()
        self.stop = loop.time() + req["seconds"]
        first, count = req["first"], req.get("count")
        kind = req["kind"]
        t0 = time.perf_counter()
        if kind == "batched":
            at_stop: list[int] = []  # rows ok when the window closed (row_futures off)
            loop.call_at(self.stop, lambda: at_stop.append(sum(s.rows_ok for s in self.sessions)))
            await asyncio.gather(*(self._feed(first + i, s) for i, s in enumerate(self.sessions)))
            await asyncio.gather(*(s.close() for s in self.sessions))
            if not req.get("row_futures"):
                self.ops = at_stop[0] if at_stop else sum(s.rows_ok for s in self.sessions)
                self.failed = sum(s.count_pending_errors() for s in self.sessions)
        else:
            def op(w: int, n: int):
                if kind == "writes":
                    return self.table.write(f"c{w}-{n % 100}", n)
                return self.table.read(f"c0-{n % 100}")

            await asyncio.gather(*(self._closed(first + w, op, count) for w in range(req["n"])))
        elapsed = min(time.perf_counter() - t0, req["seconds"] + 0.001)
        return {"ops": self.ops, "failed": self.failed, "elapsed": elapsed,
                "hist": {str(k): v for k, v in self.hist.items()}}

    async def _closed(self, w: int, op, count: int | None) -> None:
        loop, n = asyncio.get_running_loop(), 0
        while loop.time() < self.stop and (count is None or n < count):
            t = time.perf_counter()
            try:
                await op(w, n)
            except (OpFailed, OpUnknown):  # counted, as a batched row that failed is
                self.failed += 1
            else:
                self._landed(time.perf_counter() - t)
            n += 1

    async def _feed(self, i: int, s) -> None:
        loop, n = asyncio.get_running_loop(), 0

        def landed(fut: asyncio.Future, t: float) -> None:
            if loop.time() > self.stop:
                return
            if fut.cancelled() or fut.exception() is not None or not fut.result().result.ok:
                self.failed += 1
            else:
                self._landed(time.perf_counter() - t)

        if not s.options.row_futures:
            while loop.time() < self.stop:
                await s.apply(f"b{i}-{n % 100}", Write(f"b{i}-{n % 100}", n))
                n += 1
            return
        while loop.time() < self.stop:
            t = time.perf_counter()
            fut = await s.apply(f"b{i}-{n % 100}", Write(f"b{i}-{n % 100}", n))
            fut.add_done_callback(lambda f, t=t: landed(f, t))
            n += 1


async def _serve(masters: list[tuple[str, int]], table_name: str, tls_cert: str | None) -> None:
    from node.security.tls import client_tls

    client = TesseraClient(masters, timeout=20, tls=client_tls(tls_cert))
    mode = client.external_consistency  # the client's default, unless a point asks
    table = client.table(table_name)

    async def prepare(req: dict) -> _Point:
        client.external_consistency = req.get("external_consistency") or mode
        point = _Point(table, req)
        await table.read("c0-0")  # the tablet's location and a connection, before timing
        return point

    try:
        await serve(prepare)
    finally:
        await client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--masters", required=True, help="JSON list of [host, port]")
    ap.add_argument("--table", default="bench")
    ap.add_argument("--event-loop", choices=("auto", "asyncio", "uvloop"), default="auto")
    ap.add_argument("--tls-cert", default=None, help="connect with TLS as this certificate's identity")
    a = ap.parse_args()
    masters = [tuple(m) for m in json.loads(a.masters)]
    with asyncio.Runner(loop_factory=event_loop_factory(a.event_loop)) as runner:
        try:
            runner.run(_serve(masters, a.table, a.tls_cert))
        except (KeyboardInterrupt, BrokenPipeError):
            pass


if __name__ == "__main__":
    main()
