"""`tessera local-replica` on a real server's data dir: refused while the server runs (the
data-dir lock, which also stops a second server on the same dir), then list, cmeta print,
delete --keep-tombstone (the restarted server holds a voting tombstone and is copied back) and
cmeta unsafe-recreate."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import until

from node.client import TesseraClient
from node.protocol import Empty, ServerStatus
from node.rpc import RpcError
from node.tools.local_cluster import LocalCluster, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent


def tessera(*args):
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ})


async def _report(cluster, name, tablet):
    d = cluster.daemons[name]
    client = TesseraClient(cluster.master_addrs)
    try:
        st = await client.rpc.call((d.host, d.port), "ts.status", Empty(), ServerStatus,
                                   to_uuid="", timeout=5)
    except RpcError:  # restarting: not listening yet
        return None
    finally:
        await client.close()
    return next((t for t in st.tablets if t.tablet_id == tablet), None)


def test_local_replica_tools_on_a_stopped_server(tmp_path):
    c = LocalCluster(tmp_path / "lc", masters=1, tservers=3)
    c.up(timeout=90)
    try:
        async def setup():
            client = TesseraClient(c.master_addrs, timeout=30)
            locs = await client.create_table("t", num_tablets=1, replication_factor=3)
            for i in range(20):
                await client.table("t").write(f"k{i}", i)
            await client.close()
            return locs.tablets[0].tablet_id
        tablet = asyncio.run(setup())
        data = c.root / "t1"

        # A running server holds its data dir: the tools and a second server are refused.
        out = tessera("local-replica", "list", "--fs-data-dir", str(data))  # Kudu's name, an alias of --data-dir
        assert out.returncode == 1 and "in use by a running server" in out.stderr
        second = subprocess.run([sys.executable, "-m", "harness.cli", "tserver", "--data-dir",
                                 str(data), "--rpc-addr", f"127.0.0.1:{free_port()}"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode == 1 and "in use by a running server" in second.stderr

        until(lambda: asyncio.run(_report(c, "t1", tablet)).applied >= 20, "t1 to apply")
        term = asyncio.run(_report(c, "t1", tablet)).term
        c.kill("t1")
        out = tessera("local-replica", "list", "--data-dir", str(data))
        assert out.returncode == 0, out.stderr
        row = next(line.split("\t") for line in out.stdout.splitlines() if line.startswith(tablet))
        assert row[1] == "t" and row[2] == "READY" and int(row[3]) == term
        assert len(row[5].split()) == 3
        out = tessera("local-replica", "cmeta", "print", tablet, "--data-dir", str(data))
        assert out.returncode == 0 and f"term {term}" in out.stdout

        # Tombstoned offline: the restarted server votes from its tombstone, and the leader
        # copies the tablet back.
        out = tessera("local-replica", "delete", tablet, "--keep-tombstone",
                      "--data-dir", str(data))
        assert out.returncode == 0 and "tombstoned" in out.stdout, out.stderr
        assert not (data / "wals" / tablet).exists() and (data / "consensus-meta" / tablet).exists()
        out = tessera("local-replica", "list", "--data-dir", str(data))
        assert f"{tablet}\tt\tTOMBSTONED\t{term}" in out.stdout
        c.start("t1")
        until(lambda: (r := asyncio.run(_report(c, "t1", tablet))) is not None
               and r.state == "RUNNING" and r.applied >= 20, "t1 to be copied back", 90)

        # unsafe-recreate rewrites the committed config and keeps the term.
        c.kill("t2")
        t2 = tessera("local-replica", "list", "--data-dir", str(c.root / "t2")).stdout
        me = next(line.split("\t") for line in t2.splitlines() if line.startswith(tablet))[5]
        me = me.split()[0].split(":")[0]
        out = tessera("local-replica", "cmeta", "unsafe-recreate", tablet, "--peers", me,
                      "--data-dir", str(c.root / "t2"))
        assert out.returncode == 0, out.stderr
        out = tessera("local-replica", "cmeta", "print", tablet, "--data-dir", str(c.root / "t2"))
        assert f"): {me}:VOTER\n" in out.stdout and "term" in out.stdout

        out = tessera("local-replica", "delete", "no-such-tablet", "--keep-tombstone",
                      "--data-dir", str(c.root / "t2"))
        assert out.returncode == 1 and "no replica of tablet" in out.stderr
        out = tessera("local-replica", "list", "--data-dir", str(tmp_path))
        assert out.returncode == 254 and "not a server's data dir" in out.stderr
    finally:
        c.down()
