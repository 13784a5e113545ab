"""CreateTable is not idempotent, and its attempt can outlast the client's timeout: the master
answers once the catalog holds the table and it has asked each replica's server to create it,
and a paused server makes that ask wait. The client's retry then reaches a catalog that
already has the table. Real processes on loopback: one master, three tablet servers, one paused.
"""

import asyncio
import signal

import pytest

from node.client import TesseraClient
from node.rpc import ErrorCode, RpcError
from node.tools.local_cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_create_whose_first_reply_came_too_late_returns_the_table_it_made(tmp_path):
    """Before the token, the first user's create_table raised ALREADY_EXISTS for the table it
    had itself just made. A second user's create of the same name still gets ALREADY_EXISTS."""
    hit = tmp_path / "probes"
    c = LocalCluster(tmp_path / "lc", masters=1, tservers=3, flags=[f"--probes-file={hit}"])
    c.up(timeout=60)
    try:
        async def go():
            first = TesseraClient(c.master_addrs, timeout=30)
            other = TesseraClient(c.master_addrs, timeout=30)
            assert c.signal("t3", signal.SIGSTOP)
            try:
                attempt = first.attempt_timeout * 3  # one master attempt's timeout
                started = asyncio.get_running_loop().time()
                locs = await first.create_table("t", num_tablets=1, replication_factor=3)
                took = asyncio.get_running_loop().time() - started
            finally:
                c.signal("t3", signal.SIGCONT)
            assert took > attempt, (took, attempt)  # the first attempt's reply did come late
            assert locs.name == "t" and len(locs.tablets) == 1
            with pytest.raises(RpcError) as refused:
                await other.create_table("t", num_tablets=1, replication_factor=3)
            assert refused.value.code == ErrorCode.ALREADY_EXISTS
            await first.table("t").write("k", 1)
            assert await other.table("t").read("k") == 1
            await first.close()
            await other.close()
        asyncio.run(asyncio.wait_for(go(), 90))
    finally:
        c.down()
    assert "master.create_table.retry_answered" in hit.read_text().split()
