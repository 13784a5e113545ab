"""Kudu's ServerBase: what a master and a tablet server share. Each has an instance UUID, a
book of peer addresses, one RPC port, a TabletManager (a master's only tablet is its catalog),
the Raft consensus service, the leader's tablet-copy trigger, and an HTTP port with status and
metrics. TabletServer and Master add their own services on top; neither is the other."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from node.disk import REAL, Disk
from node.protocol import Peer, ServerStatus, TabletReport
from node.replica.replica import Replica, ReplicaOptions
from node.rpc import RpcClient, RpcServer
from node.security.tls import DISABLED, RpcSecurity
from node.server.daemon import Outbox, PeerBook, load_or_create_instance, lock_data_dir
from node.server.http import StatusHttp
from node.tserver.copy_service import TabletCopyService
from node.tserver.copy_trigger import CopyTrigger
from node.tserver.metrics import TabletMetrics
from node.tserver.service import ConsensusService
from node.tserver.tablet_manager import TabletManager, TabletState

log = logging.getLogger(__name__)


@dataclass
class ServerOptions:
    data_dir: Path
    rpc_host: str = "127.0.0.1"
    rpc_port: int = 7050  # Kudu's tablet server RPC port (masters: 7051)
    http_port: int = 0  # 0: pick a free port (Kudu uses 8050)
    masters: list[tuple[str, int]] = field(default_factory=list)
    heartbeat_interval_ms: int = 1000  # Kudu: heartbeat_interval_ms
    replica: ReplicaOptions = field(default_factory=ReplicaOptions)
    # masters: a tablet server silent this long has failed; its replicas are replaced
    follower_unavailable_considered_failed_sec: float = 300.0  # Kudu's default
    # masters: period of the reconciler (re-sent creations, deletes of deleted or evicted replicas)
    catalog_manager_bg_task_wait_ms: int = 1000  # Kudu's default
    tablet_copy_idle_timeout_sec: float = 600.0  # Kudu's: a copy source's idle session ends
    tablet_copy_transfer_chunk_size_bytes: int = 4 << 20  # Kudu's: bytes per fetch
    # a copy's receiver gives up once no chunk arrived for this long (node.tserver.copy_client)
    tablet_copy_stall_limit_sec: float = 60.0
    seed: int | None = None  # every random choice of the server and its replicas (simulator)
    disk: Disk = REAL  # where the data dir lives: the simulator passes a SimDisk
    # Source address of outgoing connections (None: the kernel picks). The simulator's network
    # tells hosts apart by it.
    local_host: str | None = None
    # Who may connect and call what (node.security): off unless the daemon's flags say (their
    # defaults are Kudu's optional/optional), so in-process tests and the simulator run open.
    security: RpcSecurity = DISABLED
    # Requests one connection may have in flight before the server stops reading it (back-
    # pressure: TCP then holds the sender)
    rpc_max_inflight_per_conn: int = 256
    # HTTPS for /metrics and /status: a certificate and its key (PEM); empty: plain HTTP
    webserver_certificate_file: str = ""
    webserver_private_key_file: str = ""
    # The simulator's eyes on every Raft message a replica sends (tablet, to, messages), to
    # check votes and acknowledgements on the wire; None (always, outside the simulator).
    observe_outgoing: Callable[[str, str, list], None] | None = None


def webserver_tls(opts: ServerOptions):
    """The HTTPS context of /metrics and /status, or None for plain HTTP; ssl.SSLError or
    OSError if the files cannot be loaded (the daemon's flags check that first)."""
    if not opts.webserver_certificate_file:
        return None
    import ssl

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(opts.webserver_certificate_file, opts.webserver_private_key_file)
    return ctx


class ServerBase:
    kind = "server"

    def __init__(self, opts: ServerOptions):
        self.opts = opts
        self.rng = random.Random(opts.seed)
        self.data_dir = Path(opts.data_dir)
        self._tasks: list[asyncio.Task] = []
        # the first background loop that ended while the server ran (`_keep`), and its event
        self.loop_ended: str | None = None
        self.loop_failed = asyncio.Event()

    def _keep(self, coro, name: str) -> None:
        """Run one of the server's background loops (copies, heartbeats, reconciling) until
        stop(). Each handles its own errors; one that ends anyway (an error no guard caught)
        would leave the server answering RPCs but never heartbeating or reconciling again, as
        an OSError saving the peer book once did, seen by nothing but a log line. So it is
        kept in `loop_ended`, and the daemon exits on it (node.server.daemon_cli): Kudu's
        background threads crash their process on a failed check the same way."""
        task = asyncio.create_task(coro, name=name)
        task.add_done_callback(self._loop_done)
        self._tasks.append(task)

    def _loop_done(self, task: asyncio.Task) -> None:
        if task.cancelled() or self.loop_ended is not None:
            return
        e = task.exception()
        self.loop_ended = f"{task.get_name()} loop ended: {e!r}" if e else f"{task.get_name()} loop returned"
        log.error("%s %s: %s", self.kind, getattr(self, "uuid", "?"), self.loop_ended, exc_info=e)
        self.loop_failed.set()

    def _register(self, s: RpcServer) -> None:
        """Register the server's own services (the consensus service is registered already)."""
        raise NotImplementedError

    async def _started(self) -> None:
        """Start the server's own background work, once its tablets are open."""

    async def start(self) -> None:
        self.uuid = load_or_create_instance(self.data_dir, self.kind, self.rng, self.opts.disk)
        if self.opts.disk is REAL:  # a simulated disk has no files to lock
            self._dir_lock = lock_data_dir(self.data_dir)
        self.book = PeerBook(self.data_dir / "peers", self.opts.disk)
        frame = self.opts.replica.rpc_max_message_size
        self.rpc_client = RpcClient(local_host=self.opts.local_host, max_frame=frame,
                                    tls=self.opts.security.client_context())
        # Replicas send through the outbox, which needs our address: it exists before any
        # replica starts (open_all, below).
        self.tablets = TabletManager(self.uuid, self.data_dir, self.opts.disk, self.opts.replica,
                                     self.rng, lambda tablet_id: self.outbox.sender(tablet_id))
        self.server = RpcServer(self.uuid, max_frame=frame, security=self.opts.security,
                                max_inflight_per_conn=self.opts.rpc_max_inflight_per_conn)
        self.consensus = consensus = ConsensusService(self.tablets, self.book)
        consensus.register(self.server)
        self.copy_service = TabletCopyService(
            self.tablets, self.rpc_client, idle_timeout_s=self.opts.tablet_copy_idle_timeout_sec,
            chunk_bytes=self.opts.tablet_copy_transfer_chunk_size_bytes,
            stall_limit_s=self.opts.tablet_copy_stall_limit_sec)
        self.copy_service.register(self.server)
        self._register(self.server)
        host, port = await self.server.start(self.opts.rpc_host, self.opts.rpc_port)
        self.me = Peer(self.uuid, self.opts.rpc_host, port)
        await self.book.learn([self.me])
        self.copies = CopyTrigger(self.tablets, self.book, self.rpc_client, self.me)
        self.outbox = Outbox(self.rpc_client, self.book, self.me, on_refused=self.copies.on_refused,
                             observe=self.opts.observe_outgoing, deliver=consensus.deliver)
        consensus.outbox = self.outbox
        self.tablets.open_all()
        self.registry = CollectorRegistry()
        self.registry.register(TabletMetrics(self.tablets))
        self.http = StatusHttp(self.registry, self.status_dict)
        self.http_port = await self.http.start(self.opts.rpc_host, self.opts.http_port,
                                               webserver_tls(self.opts))
        self._keep(self.copies.run(), "copy-trigger")
        self.copy_service.start()
        await self._started()
        sec = self.opts.security
        log.info("%s %s serving on %s:%d (http %d), %d tablets; rpc authentication %s, "
                 "encryption %s%s", self.kind, self.uuid, host, port, self.http_port,
                 len(self.tablets.entries), sec.authentication, sec.encryption,
                 f", certificate {sec.files.cert}" if sec.files else "")

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.stop()
        await self.consensus.close()
        await self.copy_service.stop()
        await self.tablets.stop()
        await self.outbox.close()
        await self.rpc_client.close()
        await self.http.stop()
        if getattr(self, "_dir_lock", None) is not None:
            self._dir_lock.close()  # releases the flock: a restart in this process may take it
            self._dir_lock = None

    @property
    def replicas(self) -> dict[str, Replica]:
        """Read-only view: every started replica by tablet id (it may have failed since)."""
        return self.tablets.replicas

    # -- reporting ---------------------------------------------------------------------------
    def reports(self) -> list[TabletReport]:
        out = []
        for tid, e in sorted(self.tablets.entries.items()):
            state = e.state.value
            if e.replica is None:
                out.append(TabletReport(tid, e.table, state, error=e.error))
                continue
            s = e.replica.status()
            out.append(TabletReport(tid, e.table, state, s["role"], s["term"], s["leader"],
                                    s["commit"], s["applied"], s["config"], e.replica.failed,
                                    s["committed_config"], s["committed_config_index"],
                                    {u: p["silent_s"] for u, p in s["peers"].items()}
                                    if s["role"] == "LEADER" else {}))
        return out

    def server_status(self) -> ServerStatus:
        return ServerStatus(self.uuid, self.me.host, self.me.port, self.reports())

    def status_dict(self) -> dict:
        entries = self.tablets.entries.values()
        return {"uuid": self.uuid, "kind": self.kind, "rpc": f"{self.me.host}:{self.me.port}",
                "wall_time": time.time(),  # what this process believes the time is (clock faults)
                "tablets": {tid: r.status() for tid, r in self.replicas.items()},
                "failed": {e.tablet_id: e.reason for e in entries
                           if e.state == TabletState.FAILED},
                "tombstoned": sorted(e.tablet_id for e in entries
                                     if e.state == TabletState.TOMBSTONED)}
