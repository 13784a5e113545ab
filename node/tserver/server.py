"""The tablet server: many tablet replicas, one Raft config each, behind one RPC port. It is
ServerBase (tablet manager, consensus service, copy trigger, status) plus the tablet service
and the heartbeater to the masters."""

from __future__ import annotations

from node.rpc import RpcServer
from node.server.base import ServerBase
from node.tserver.heartbeater import Heartbeater
from node.tserver.service import TabletService


class TabletServer(ServerBase):
    kind = "tserver"

    def _register(self, s: RpcServer) -> None:
        self.service = TabletService(self.tablets, self.book, self.rpc_client, self.server_status)
        self.service.register(s)

    async def _started(self) -> None:
        if self.opts.masters:
            self.heartbeater = Heartbeater(self.rpc_client, self.opts.masters,
                                           self.opts.heartbeat_interval_ms / 1000,
                                           self.server_status, self.http_port, self.book)
            self._keep(self.heartbeater.run(), "heartbeat")

