"""Real tablet servers on loopback for the tablet-copy guard and tombstone-vote tests: fast
ticks, no masters, each in its own data directory."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from replica_net import options

from node.protocol import CreateTablet, OpResult, Peer, Write
from node.replica.replica import Replica, ReplicaOptions, settle
from node.server.base import ServerOptions
from node.tablet.ops import OpenSession
from node.tablet.ops import Write as Put
from node.tablet.superblock import KeyRange
from node.tserver.server import TabletServer

TABLET = "t-guard"


async def start_server(root: Path, **replica_options) -> TabletServer:
    opts: ReplicaOptions = dataclasses.replace(options(), **replica_options)
    ts = TabletServer(ServerOptions(root, rpc_port=0, replica=opts))
    await ts.start()
    return ts


async def wait_for(pred, what: str, timeout: float = 10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        value = pred()
        if value:
            return value
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def create(ts: TabletServer, peers: list[Peer], tablet: str = TABLET) -> None:
    await ts.service.on_create_tablet(CreateTablet(tablet, "tbl", KeyRange(), peers))


async def create_on_all(servers: list[TabletServer], tablet: str = TABLET) -> TabletServer:
    """Create the tablet on every server, each a voter; the server whose replica leads."""
    peers = [s.me for s in servers]
    for s in servers:
        await create(s, peers, tablet)
    return await wait_for(lambda: next((s for s in servers if s.replicas[tablet].leader_ready),
                                       None), "a leader")


async def direct(handler, req):
    """A direct handler (RpcServer.register_direct) called as the RPC server calls it, awaited."""
    fut = asyncio.get_running_loop().create_future()
    slow = handler(req, lambda value, error: settle(fut, value, error))
    return await (fut if slow is None else slow)


async def ts_write(ts: TabletServer, req: Write) -> OpResult:
    return await direct(ts.service.on_write, req)


async def write_rows(ts: TabletServer, n: int, tablet: str = TABLET, prefix: str = "k") -> None:
    session = (await ts_write(ts, Write(tablet, OpenSession()))).result.value
    for i in range(n):
        res = await ts_write(ts, Write(tablet, Put(f"{prefix}{i}", i), session=session, seq=i + 1))
        assert res.result.ok, res


async def sole_leader(ts: TabletServer, tablet: str = TABLET) -> Replica:
    """A config of one elects itself."""
    return await wait_for(lambda: ts.replicas[tablet].leader_ready and ts.replicas[tablet],
                          "the replica to lead")


async def sole_replica_with_rows(root: Path, rows: int = 3) -> tuple[TabletServer, Replica]:
    """A server whose tablet has one replica, its leader, holding `rows` rows."""
    ts = await start_server(root)
    try:
        await create(ts, [ts.me])
        r = await sole_leader(ts)
        await write_rows(ts, rows)
    except BaseException:
        await ts.stop()
        raise
    return ts, r
