"""The leader's side of Kudu's tablet copy: start a copy on each peer that refused our Raft
messages (no replica, or only a tombstone) or is behind the log we retain, and restart the
peer's progress from what the copy installed.

Each request carries the state the leader expects the peer's replica in and the first OpId of
its retained log, so the peer can refuse a copy that would wipe a replica AppendEntries can
still catch up (the guards are in TabletManager.begin_copy).
"""

from __future__ import annotations

import asyncio

from node.consensus import Role
from node.probes import probe
from node.protocol import Peer, StartTabletCopy, TabletCopyResult
from node.rpc import RpcClient, RpcError
from node.server.daemon import PeerBook
from node.tablet.superblock import OpId
from node.tserver.tablet_manager import TabletManager

# The receiver answers once the copy is installed, however large. It gives up by itself when
# the transfer stalls (node.tserver.copy_client), so this only ends the wait on a receiver that
# hangs outright; until then the tablet is not copied there again.
COPY_TIMEOUT_S = 3600.0


class CopyTrigger:
    def __init__(self, tablets: TabletManager, book: PeerBook, rpc_client: RpcClient, me: Peer):
        self.tablets, self.book, self.rpc_client, self.me = tablets, book, rpc_client, me
        # (tablet, peer) that refused our Raft -> the state it said its replica is in
        self._wanted: dict[tuple[str, str], str] = {}
        self._sent: set[tuple[str, str]] = set()  # StartTabletCopy calls in flight

    def on_refused(self, tablet_id: str, peer_uuid: str, reason: str = "missing") -> None:
        """The Outbox's callback: a peer answered our Raft messages with its replica's state."""
        probe("copy.trigger.peer_refused_raft")
        self._wanted[(tablet_id, peer_uuid)] = reason.upper()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.round()

    def round(self) -> None:
        wanted: dict[tuple[str, str], str] = {}
        for tid, r in self.tablets.replicas.items():
            if r.role == Role.LEADER and not r.failed:
                wanted |= {(tid, peer): "RUNNING" for peer, p in r.status()["peers"].items()
                           if p["needs_tablet_copy"]}
        # a peer's own answer (no replica, a tombstone) is fresher than our progress
        refused, self._wanted = self._wanted, {}
        wanted |= refused
        for (tid, peer_uuid), state in wanted.items():
            if (tid, peer_uuid) in self._sent:
                continue
            r = self.tablets.replicas.get(tid)
            peer = self.book.get(peer_uuid)
            if (r is None or r.role != Role.LEADER or peer is None
                    or peer_uuid not in r.active_members()):
                continue
            (start_term, start), _ = r.log_bounds()
            req = StartTabletCopy(tid, self.me, r.term, state, OpId(start_term, start),
                                  r.peer_match(peer_uuid))
            self._sent.add((tid, peer_uuid))
            task = asyncio.create_task(self.send(req, peer))
            task.add_done_callback(lambda _t, k=(tid, peer_uuid): self._sent.discard(k))

    async def send(self, req: StartTabletCopy, peer: Peer) -> None:
        tablet_id, term = req.tablet_id, req.caller_term
        tlog = self.tablets.log(tablet_id)
        probe("copy.trigger.sent")
        tlog.info("starting tablet copy to %s (term %d, expecting its replica %s, our log from "
                  "(%d, %d))", peer.uuid, term, req.current_state, req.retained_from.term,
                  req.retained_from.index)
        try:
            res = await self.rpc_client.call(peer.addr, "ts.start_tablet_copy", req,
                                             TabletCopyResult, to_uuid=peer.uuid,
                                             timeout=COPY_TIMEOUT_S)
        except RpcError as e:
            probe("copy.trigger.failed")
            tlog.info("tablet copy to %s failed: %s", peer.uuid, e)
            return
        tlog.info("tablet copy to %s finished: %d bytes in %.1fs, snapshot at (%d, %d), log to "
                  "(%d, %d)", peer.uuid, res.bytes, res.seconds, res.installed.term,
                  res.installed.index, res.last_logged.term, res.last_logged.index)
        r = self.tablets.replicas.get(tablet_id)
        if r is not None and not r.failed:
            r.copy_installed(peer.uuid, res.installed, res.last_logged, term)
