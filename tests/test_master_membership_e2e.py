"""The masters' own membership on real processes (Kudu's `kudu master add | remove`): a 3-master
cluster grows to 5 and shrinks back to 3 while tables are created and read; tablet servers and
clients follow the new master set without a restart; a master whose disk was wiped is replaced."""

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import until

from node.client import TesseraClient
from node.protocol import Empty, MasterInfo
from node.rpc import RpcError
from node.tools.local_cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent


def tessera(masters, *args):
    env = {**os.environ, "TESSERA_MASTERS": ",".join(masters)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=400, stdin=subprocess.DEVNULL)


def _remove(masters, member):
    """`tessera master remove`, asked again while the leader refuses it as unsafe because too few
    of the remaining masters answered within the last election timeouts: on a loaded machine
    (this suite shares two cores with chaos runs) a heartbeat's answer can come that late, and
    the refusal is then the right answer, as Kudu's SafeToEvict gives it. Any other failure
    fails at once."""
    def attempt():
        out = tessera(masters, "master", "remove", member)
        if out.returncode != 0 and "answered lately" not in out.stdout + out.stderr:
            raise AssertionError(out.stdout + out.stderr)
        return out if out.returncode == 0 else None
    return until(attempt, f"the masters to accept removing {member}", timeout=120, period=1)


def _info(cluster, name):
    async def go():
        client = TesseraClient([])
        try:
            d = cluster.daemons[name]
            return await client.rpc.call((d.host, d.port), "master.info", Empty(), MasterInfo,
                                         to_uuid="", timeout=3)
        except RpcError:
            return None
        finally:
            await client.close()
    return asyncio.run(go())


def _roles(cluster, names):
    return sorted(i.role if (i := _info(cluster, n)) else "DOWN" for n in names)


def _use(masters, create=None, read_from=()):
    """With a client that knows only `masters`: create table `create` (one write) and read the
    key of each table in `read_from`."""
    async def go():
        addrs = [(h, int(p)) for h, p in (m.split(":") for m in masters)]
        client = TesseraClient(addrs, timeout=30)
        try:
            if create:
                await client.create_table(create, num_tablets=1, replication_factor=3)
                await client.table(create).write("k", create)
            return [await client.table(t).read("k") for t in read_from]
        finally:
            await client.close()
    return asyncio.run(go())


def test_masters_grow_to_five_shrink_to_three_and_a_wiped_master_is_replaced(tmp_path):
    c = LocalCluster(tmp_path / "lc", masters=3, tservers=3)
    c.up(timeout=90)
    try:
        addr = {n: d.addr for n, d in c.daemons.items()}
        first = [addr[n] for n in ("m1", "m2", "m3")]
        _use(first, create="t0")

        # Grow: two new masters, each started empty, then added.
        for _ in range(2):
            name = c.add_daemon("master")
            addr[name] = c.daemons[name].addr
            until(lambda n=name: _info(c, n) is not None, f"{name} to answer")
            assert _info(c, name).role == "INITIALIZING"
            out = tessera(first, "master", "add", addr[name])
            assert out.returncode == 0, out.stdout + out.stderr
            assert "is a voter" in out.stdout
        five = [addr[n] for n in ("m1", "m2", "m3", "m4", "m5")]
        out = tessera(five, "master", "list")
        assert out.returncode == 0, out.stderr
        assert sorted(r.split("\t")[2] for r in out.stdout.splitlines()[1:]) == \
            ["FOLLOWER"] * 4 + ["LEADER"]
        assert _use(five, create="t5", read_from=["t0"]) == ["t0"]
        # a member already: the add is done (an operator's retry after a lost answer), not
        # refused, which would tell the operator to wipe a voter
        out = tessera(five, "master", "add", addr["m4"])
        assert out.returncode == 0 and "a member already" in out.stdout, out.stdout + out.stderr

        # Shrink: remove two of the original masters (the leader among them, if it is one).
        for name in ("m1", "m2"):
            _remove(five, addr[name])
        until(lambda: _roles(c, ["m1", "m2"]) == ["REMOVED", "REMOVED"], "m1, m2 to stop serving")
        out = tessera(five, "master", "add", addr["m1"])  # a catalog and no member: refused
        assert out.returncode == 1 and "is not a member" in out.stdout + out.stderr, out
        for name in ("m1", "m2"):
            c.kill(name)
        three = [addr[n] for n in ("m3", "m4", "m5")]
        until(lambda: _roles(c, ["m3", "m4", "m5"]) == ["FOLLOWER", "FOLLOWER", "LEADER"],
               "a leader among the three left")
        assert _use(three, create="t3", read_from=["t0", "t5"]) == ["t0", "t5"]
        # The tablet servers were started knowing m1..m3 only; they heartbeat to m4 and m5 now.
        until(lambda: all(len(_info(c, n).tservers) == 3 for n in ("m4", "m5")),
               "the tablet servers to heartbeat to the new masters")

        # Replace: m3 loses its disk, comes back empty with a new UUID, and takes its own place.
        old_uuid = _info(c, "m3").uuid
        c.kill("m3")
        shutil.rmtree(c.root / "m3")
        c.start("m3")
        until(lambda: (i := _info(c, "m3")) is not None and i.role == "INITIALIZING",
               "the wiped m3 to start empty")
        _remove(three, old_uuid)
        out = tessera(three, "master", "add", addr["m3"])
        assert out.returncode == 0, out.stdout + out.stderr
        assert _info(c, "m3").uuid != old_uuid
        until(lambda: _roles(c, ["m3", "m4", "m5"]) == ["FOLLOWER", "FOLLOWER", "LEADER"],
               "three voting masters again")
        assert _use(three, create="t6", read_from=["t0", "t5", "t3"]) == ["t0", "t5", "t3"]
    finally:
        c.down()
