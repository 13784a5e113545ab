"""Kudu's Heartbeater: a tablet server reports its tablets to every master (multi-master seed)
each `heartbeat_interval_ms`, and learns its peers' addresses and the current masters from the
leader master's answer.
Reporting to all masters, not just the leader, lets a new leader master know the tablets at
once instead of after a full heartbeat round."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from node.daemon import PeerBook
from node.protocol import ServerStatus, TSHeartbeat, TSHeartbeatResponse
from node.rpc import RpcClient


class Heartbeater:
    def __init__(self, rpc_client: RpcClient, masters: list[tuple[str, int]], period_s: float,
                 status: Callable[[], ServerStatus], http_port: int, book: PeerBook):
        self.rpc_client, self.masters, self.period_s = rpc_client, masters, period_s
        self.status, self.http_port, self.book = status, http_port, book

    async def run(self) -> None:
        while True:
            await self.beat()
            await asyncio.sleep(self.period_s)

    async def beat(self) -> None:
        hb = TSHeartbeat(self.status(), self.http_port)
        results = await asyncio.gather(*(
            self.rpc_client.call(addr, "master.ts_heartbeat", hb, TSHeartbeatResponse,
                                 to_uuid="", timeout=max(self.period_s, 1.0))
            for addr in self.masters), return_exceptions=True)
        for res in results:
            if isinstance(res, TSHeartbeatResponse) and res.leader:
                await self.book.learn(res.tservers)
                if res.masters:  # masters added or removed since we started
                    self.masters = [p.addr for p in res.masters]
