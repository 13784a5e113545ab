"""Kudu's Heartbeater: a tablet server reports its tablets to every master (multi-master seed)
each `heartbeat_interval_ms`, learns its peers' addresses from the leader master's answer and
the current masters from any master's.
Reporting to all masters, not just the leader, lets a new leader master know the tablets at
once instead of after a full heartbeat round.

The master list is taken only from a committed config newer than the one held, ordered by the
config's opid index as Raft orders configs (two committed configs never share an index). Who
answers does not order them: a deposed leader that has not yet heard of its successor still
says LEADER, with the config it knew, and adopting that would bring back removed masters and
drop added ones; nor does the leader's term: a new leader may not know yet that its
predecessor's last config committed, and reports an older one. Followers' answers count as
much as the leader's: a server cut off while a master was added keeps the list it had, and if
that master leads once the server is back, only the followers it heartbeats can tell it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from node.probes import probe
from node.protocol import ServerStatus, TSHeartbeat, TSHeartbeatResponse
from node.rpc import RpcClient
from node.server.daemon import PeerBook

log = logging.getLogger(__name__)


class Heartbeater:
    def __init__(self, rpc_client: RpcClient, masters: list[tuple[str, int]], period_s: float,
                 status: Callable[[], ServerStatus], http_port: int, book: PeerBook):
        self.rpc_client, self.masters, self.period_s = rpc_client, masters, period_s
        self.status, self.http_port, self.book = status, http_port, book
        # Opid index of the config `masters` came from; -1: the command line's list, which
        # any committed config replaces.
        self.masters_config_index = -1

    async def run(self) -> None:
        while True:
            try:
                await self.beat()
            except Exception:
                # Nobody awaits this task: an error leaving it (an OSError saving the peer book)
                # would end it unread, and this server, healthy, would never heartbeat again:
                # the masters would count it dead and replace every replica it holds. The next
                # beat tries afresh (the peer book keeps in memory what it failed to save).
                probe("tserver.heartbeat.beat_failed")
                log.exception("heartbeat failed; trying again next period")
            await asyncio.sleep(self.period_s)

    async def beat(self) -> None:
        hb = TSHeartbeat(self.status(), self.http_port)
        results = await asyncio.gather(*(
            self.rpc_client.call(addr, "master.ts_heartbeat", hb, TSHeartbeatResponse,
                                 to_uuid="", timeout=max(self.period_s, 1.0))
            for addr in self.masters), return_exceptions=True)
        answers = [res for res in results if isinstance(res, TSHeartbeatResponse)]
        led = any(res.leader for res in answers)
        for res in answers:
            if res.leader:
                await self.book.learn(res.tservers)
            if self.adopt_masters(res) and not led:
                probe("tserver.masters.adopted_without_leader")

    def adopt_masters(self, res: TSHeartbeatResponse) -> bool:
        """Take the reply's master list if its committed config is newer than ours; whether
        we did. Replies are taken in any order, so the newest config wins whatever the order."""
        if not res.masters or res.masters_config_index <= self.masters_config_index:
            return False
        probe("tserver.masters.adopted")
        self.masters = [p.addr for p in res.masters]
        self.masters_config_index = res.masters_config_index
        log.info("masters: config index %d (from a %s at term %d): %s",
                 res.masters_config_index, "leader" if res.leader else "follower", res.term,
                 ", ".join(f"{h}:{p}" for h, p in self.masters))
        return True
