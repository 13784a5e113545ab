"""A tablet copy's two timeouts, the receiver's stall limit and the source's idle session timeout,
are measured on the event loop's clock: time.monotonic in a daemon, as before, and the virtual
clock under the simulator. They read time.monotonic() directly, so in a simulated seed (many
virtual seconds a wall second) neither was ever reached, and whether one was would have depended
on the machine's speed, which a replayed seed must not (harness.sim.loop: no wall-clock reads in
decisions). Both run here on a SimLoop, where a virtual minute takes no wall time."""

from __future__ import annotations

import asyncio
import logging

import pytest

from harness.sim.loop import SimLoop
from harness.sim.network import SimNetwork
from node.consensus import RaftConfig
from node.logfmt import TabletLog
from node.protocol import CopyFile, CopySession, Peer
from node.replica.copy_pins import CopySource
from node.rpc import ErrorCode, RpcError
from node.tablet.superblock import KeyRange
from node.tserver.copy_client import CopyClient
from node.tserver.copy_source import CopySourceSessions, _Session

LOG = logging.getLogger("test.copy_clock")


class Unreachable:
    """An RpcClient whose every call fails in transit, as across a cut link."""

    async def call(self, *args, **kwargs):
        raise RpcError(ErrorCode.NETWORK, "cannot connect")


def test_a_receiver_gives_up_once_the_loop_clock_passes_its_stall_limit():
    loop = SimLoop(SimNetwork(0))
    client = CopyClient(Unreachable(), Peer("src", "10.77.0.1", 7050), "t", "me",
                        TabletLog(LOG, "t", "me"), stall_limit_s=30.0)
    client.session = CopySession("s-1", "tbl", KeyRange(), 3, b"", [CopyFile("wal", "w", 100)],
                                 600.0)

    async def fetch() -> tuple[float, RpcError]:
        start = client._progress_at = asyncio.get_running_loop().time()
        with pytest.raises(RpcError) as e:
            await client._fetch(0, client.session.files[0], 0)
        return asyncio.get_running_loop().time() - start, e.value

    stalled, error = loop.run_until_complete(fetch())
    assert error.code == ErrorCode.DEADLINE_EXCEEDED and "stalled" in str(error)
    assert 30.0 < stalled < 33.0  # asked again (backing off to 2 s) until past the limit


class _Pins:
    def __init__(self):
        self.unpinned: list[str] = []

    def unpin(self, holder: str, snapshot_index: int) -> None:
        self.unpinned.append(holder)


class _Replica:
    copy_pins = _Pins()


class _Tablets:
    def log(self, tablet_id: str) -> TabletLog:
        return TabletLog(LOG, tablet_id, "src")


def test_a_source_session_idle_past_its_timeout_expires_on_the_loop_clock():
    loop = SimLoop(SimNetwork(0))
    sessions = CopySourceSessions(_Tablets(), idle_timeout_s=8.0)

    async def run() -> tuple[float | None, float | None]:
        source = CopySource(0, None, [], RaftConfig(0, ()), 1)
        sessions.sessions["s-1"] = _Session("s-1", "t", "me", _Replica(), source, [], [])
        expiry = asyncio.create_task(sessions.expire())
        await asyncio.sleep(7.0)
        alive_at_7 = "s-1" in sessions.sessions
        await asyncio.sleep(5.0)
        assert not expiry.done()  # it ended the session and goes on
        expiry.cancel()
        return alive_at_7, "s-1" in sessions.sessions

    alive_at_7, alive_at_12 = loop.run_until_complete(run())
    assert alive_at_7 and not alive_at_12
    assert _Replica.copy_pins.unpinned == ["copy:s-1"]
