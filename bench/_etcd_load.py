"""One etcd client process of bench/replication.py (bench/_load_protocol.py's protocol, as
Tessera's load processes), over etcd's own gRPC API (etcdserverpb.KV/Put), as etcd's
`benchmark put` tool drives it.

Each writer is one Put at a time on its own keys ("c<i>-<k>", k < 100), with a small value, to
the endpoint the parent names (the leader: a follower would forward every Put to it, one hop
more). The writers share `conns` gRPC channels, as `benchmark --conns` does (HTTP/2 multiplexes
many calls on one connection). A PutRequest is two length-delimited fields (key = 1, value = 2),
encoded here, so the client needs grpcio alone and no generated stubs; a Put counts once its
response arrives (etcd answers once the entry is committed and applied, fsynced on a majority).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._load_protocol import HIST_RES_S, serve  # noqa: E402

PUT = "/etcdserverpb.KV/Put"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def put_request(key: bytes, value: bytes) -> bytes:
    """etcdserverpb.PutRequest{key, value}, protobuf-encoded."""
    return b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(value)) + value


class _Point:
    def __init__(self, channels: list, req: dict):
        self.req = req
        self.puts = [ch.unary_unary(PUT) for ch in channels]  # bytes in, bytes out
        self.hist: Counter[int] = Counter()
        self.ops = self.failed = 0

    async def run(self) -> dict:
        import grpc

        req = self.req
        loop = asyncio.get_running_loop()
        stop = loop.time() + req["seconds"]
        count = req.get("count")

        async def writer(w: int) -> None:
            put, n = self.puts[w % len(self.puts)], 0
            while loop.time() < stop and (count is None or n < count):
                body = put_request(f"c{w}-{n % 100}".encode(), str(n).encode())
                t = time.perf_counter()
                try:
                    await put(body, timeout=10)
                except grpc.aio.AioRpcError:
                    self.failed += 1
                else:
                    self.hist[int((time.perf_counter() - t) / HIST_RES_S)] += 1
                    self.ops += 1
                n += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(writer(req["first"] + w) for w in range(req["n"])))
        elapsed = min(time.perf_counter() - t0, req["seconds"] + 0.001)
        return {"ops": self.ops, "failed": self.failed, "elapsed": elapsed,
                "hist": {str(k): v for k, v in self.hist.items()}}


async def _serve(endpoint: str, conns: int) -> None:
    import grpc

    channels = []

    async def prepare(req: dict) -> _Point:
        want = min(conns, max(1, req["n"]))
        while len(channels) < want:
            channels.append(grpc.aio.insecure_channel(endpoint))
        point = _Point(channels[:want], req)
        for put in point.puts:  # each connection up before timing
            await put(put_request(b"warm", b"0"), timeout=30)
        return point

    try:
        await serve(prepare)
    finally:
        for ch in channels:
            await ch.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoint", required=True, help="HOST:PORT of the member to write to")
    ap.add_argument("--conns", type=int, default=16,
                    help="gRPC connections the writers share (etcd benchmark's --conns)")
    a = ap.parse_args()
    try:
        asyncio.run(_serve(a.endpoint, a.conns))
    except (KeyboardInterrupt, BrokenPipeError):
        pass


if __name__ == "__main__":
    main()
