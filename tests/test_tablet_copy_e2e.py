"""Tablet copy at any size (Kudu's tablet-copy sessions) on real processes: a 1 GiB tablet
goes across in chunks while the source's memory stays flat, and a copy cut short (its
connection reset, the receiver killed, the source killed) resumes or starts over cleanly, the
copied replica ending identical to its source every time."""

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from waiting import until_async

from node.client import TesseraClient
from node.protocol import Empty, ServerStatus
from node.tools.local_cluster import LocalCluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20
FINISHED = re.compile(r"tablet copy finished: (\d+) bytes")
BEGUN = re.compile(r"tablet copy session \S+ for ")


def tessera(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TESSERA_MASTERS": ",".join(f"{h}:{p}" for h, p in cluster.master_addrs)}
    return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def log_of(cluster: LocalCluster, name: str) -> str:
    return (cluster.root / f"{name}.log").read_text(errors="replace")


async def status(client: TesseraClient, cluster: LocalCluster, name: str) -> ServerStatus | None:
    d = cluster.daemons[name]
    try:
        return await client.rpc.call((d.host, d.port), "ts.status", Empty(), ServerStatus,
                                     to_uuid="", timeout=5)
    except Exception:
        return None


async def fill(client: TesseraClient, cluster: LocalCluster, mib: int):
    """A one-replica table of `mib` rows of 1 MiB: (tablet, source name, receiver name, uuids)."""
    locs = await client.create_table("big", num_tablets=1, replication_factor=1)
    tablet = locs.tablets[0].tablet_id
    table = client.table("big")
    # one write at a time, each an entry of its own: the snapshot interval counts entries, and
    # concurrent writes would share group entries
    for i in range(mib):
        await table.write(f"k{i:05d}", os.urandom(MIB))
    uuids = {name: (await status(client, cluster, name)).uuid
             for name, d in cluster.daemons.items() if d.kind == "tserver"}
    src = next(n for n, u in uuids.items() if u == locs.tablets[0].replicas[0].uuid)
    dst = next(n for n in uuids if n != src)
    return tablet, src, dst, uuids


async def caught_up(client, cluster, tablet, src, dst, uuid) -> bool:
    """`dst` runs a voter replica of `tablet` that has applied all `src` has."""
    a, b = await status(client, cluster, src), await status(client, cluster, dst)
    ra = next((t for t in a.tablets if t.tablet_id == tablet), None) if a else None
    rb = next((t for t in b.tablets if t.tablet_id == tablet), None) if b else None
    return (ra is not None and rb is not None and rb.state == "RUNNING"
            and [uuid, "VOTER"] in rb.committed_config and rb.applied >= ra.applied)


def checksums_agree(cluster: LocalCluster) -> None:
    out = tessera(cluster, "cluster", "ksck", "--checksum-scan")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "checksum" in out.stdout.lower(), out.stdout


class RssSampler(threading.Thread):
    """The largest resident set of a process while it runs (from /proc, every 20 ms)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0, threading.Event()

    def rss(self) -> int:
        text = Path(f"/proc/{self.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1)) * 1024

    def settled(self, timeout: float = 60.0) -> int:
        """The resident set once it has stayed within 16 MiB for a second (what a save or a
        write left behind is freed by then): the baseline a copy's growth is measured from."""
        window: list[int] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            window = [*window[-9:], self.rss()]
            if len(window) == 10 and max(window) - min(window) < 16 * MIB:
                return max(window)
            time.sleep(0.1)
        raise AssertionError(f"the resident set of {self.pid} did not settle: {window}")

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, self.rss())


def test_a_1gib_tablet_is_copied_in_chunks_and_the_sources_memory_stays_flat(tmp_path):
    """Above the old 64 MiB single-frame limit by 16 times: a snapshot file and WAL segments
    in 4 MiB chunks. The source reads chunk by chunk, so its memory must not grow with the
    tablet (a one-message copy would hold all of it, encoded, at once)."""
    cluster = LocalCluster(tmp_path / "lc", masters=1, tservers=2,
                           flags=["--snapshot-interval-entries=512"])
    cluster.up(timeout=90)
    try:
        asyncio.run(asyncio.wait_for(_big_copy(cluster), 600))
    finally:
        cluster.down()


async def _big_copy(cluster: LocalCluster) -> None:
    client = TesseraClient(cluster.master_addrs, timeout=60)
    try:
        tablet, src, dst, uuids = await fill(client, cluster, 1024)
        data = cluster.root / src / "data" / tablet

        def snapshot_settled():  # the 1 GiB snapshot is written; no save under way
            names = os.listdir(data)
            return any(re.fullmatch(r"snapshot-\d{4,}", n) for n in names) and all(
                n.startswith("snapshot-") for n in names)
        await until_async(_sync(snapshot_settled), "the source's snapshot of the full tablet",
                          timeout=120)
        sampler = RssSampler(cluster.daemons[src].pid)
        before = sampler.settled()
        sampler.start()
        await client.change_replica(tablet, "add", uuids[dst])
        await until_async(lambda: caught_up(client, cluster, tablet, src, dst, uuids[dst]),
                          "the new replica to be copied and promoted", timeout=300)
        sampler.stop.set()
        sampler.join()
        copied = [int(n) for n in FINISHED.findall(log_of(cluster, dst))]
        assert len(copied) == 1 and copied[0] >= 1024 * MIB, copied
        session = re.search(r"tablet copy session \S+ for \S+: snapshot at index (\d+), "
                            r"(\d+) WAL segments", log_of(cluster, src))
        assert session and int(session.group(1)) >= 1024 and int(session.group(2)) >= 1
        grew = sampler.peak - before
        # A source that held the tablet to send it would grow by its size or more (a
        # one-message copy: twice). Chunked, the peak is the answers waiting in buffers and
        # what the allocator keeps of them: 31-52 MiB measured, 126 and 133 MiB with the CPU
        # contended (a concurrent test lane, busy loops), so a quarter of the tablet.
        assert grew < 256 * MIB, f"the source grew by {grew >> 20} MiB while sending 1 GiB"
    finally:
        await client.close()
    checksums_agree(cluster)


def _sync(fn):
    async def call():
        return fn()
    return call


def test_a_copy_cut_short_resumes_or_starts_over_cleanly(tmp_path):
    """In a network namespace of its own (unshare), where tc slows loopback so a copy takes
    seconds, and iptables can reset the copy's connection without touching the host's rules.
    Three cuts, each on a fresh copy of the same tablet onto the same server:
    - the connection reset mid-copy: the receiver asks again from the offset it has, in the
      same session, and the copy finishes once (no restart);
    - the receiver killed mid-copy: it restarts with a COPYING superblock, tombstones, and
      the leader copies again;
    - the source killed mid-copy: its session dies with it, the receiver's fetches find no
      session, it tombstones, and the restarted source copies again.
    After each, the copy holds exactly what the source holds (ksck --checksum-scan)."""
    root = tmp_path / "lc"
    proc = subprocess.run(["unshare", "--net", "--", sys.executable, __file__, "cuts", str(root)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"},
                          stdin=subprocess.DEVNULL)
    if (root / "cluster.json").exists():  # the scenario died before its own clean-up
        LocalCluster.load(root).down()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "every cut copy ended identical to its source" in proc.stdout


def _cuts_scenario(root: Path) -> None:
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    cluster = LocalCluster(root, masters=1, tservers=2, own_addresses=True)
    try:
        cluster.up(timeout=90)
        asyncio.run(asyncio.wait_for(_cuts(cluster), 500))
    finally:
        cluster.down()
    print("every cut copy ended identical to its source")


async def _cuts(cluster: LocalCluster) -> None:
    client = TesseraClient(cluster.master_addrs, timeout=60)
    try:
        tablet, src, dst, uuids = await fill(client, cluster, 192)
        # ~40 MB/s on loopback: 192 MiB take about five seconds to copy
        subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "320mbit",
                        "burst", "1mb", "latency", "100ms"], check=True)
        s, d = cluster.daemons[src], cluster.daemons[dst]

        async def copy_with(cut, phase: str) -> None:
            sessions = len(BEGUN.findall(log_of(cluster, src)))
            finished = len(FINISHED.findall(log_of(cluster, dst)))
            await client.change_replica(tablet, "add", uuids[dst])
            await until_async(_sync(lambda: len(BEGUN.findall(log_of(cluster, src))) > sessions),
                              f"{phase}: a copy session to begin")
            await asyncio.sleep(1.0)  # some of the tablet is across, most is not
            assert len(FINISHED.findall(log_of(cluster, dst))) == finished, "copied too fast"
            await cut()
            await until_async(lambda: caught_up(client, cluster, tablet, src, dst, uuids[dst]),
                              f"{phase}: the copy to finish", timeout=180)
            checksums_agree(cluster)
            print(f"{phase}: copied and identical", flush=True)

        async def evict() -> None:  # the next copy lands on a tombstone again
            await client.change_replica(tablet, "remove", uuids[dst])
            await until_async(lambda: _tombstoned(client, cluster, dst, tablet),
                              "the evicted replica to be tombstoned")

        async def reset_connection() -> None:
            rule = ["INPUT", "-p", "tcp", "-s", d.host, "-d", s.host, "--dport", str(s.port),
                    "-j", "REJECT", "--reject-with", "tcp-reset"]
            subprocess.run(["iptables", "-I", *rule], check=True)
            await asyncio.sleep(1.5)
            subprocess.run(["iptables", "-D", *rule], check=True)

        await copy_with(reset_connection, "connection reset")
        dst_log = log_of(cluster, dst)
        assert "tablet copy resumed" in dst_log and len(FINISHED.findall(dst_log)) == 1
        assert "failed after" not in dst_log, "the reset copy started over instead of resuming"

        await evict()

        async def kill_receiver() -> None:
            cluster.kill(dst)
            cluster.start(dst)
        await copy_with(kill_receiver, "receiver killed")
        assert "unfinished tablet copy: tombstoning it" in log_of(cluster, dst)

        await evict()

        async def kill_source() -> None:
            cluster.kill(src)
            await asyncio.sleep(2.0)  # the receiver's fetches fail meanwhile: it retries
            cluster.start(src)
        await copy_with(kill_source, "source killed")
        assert re.search(r"tablet copy from \S+ failed after \d+ bytes: RpcError: .*no tablet "
                         r"copy session", log_of(cluster, dst)), "the receiver did not start over"
    finally:
        await client.close()


async def _tombstoned(client, cluster, name, tablet) -> bool:
    st = await status(client, cluster, name)
    rep = next((t for t in st.tablets if t.tablet_id == tablet), None) if st else None
    return rep is not None and rep.state == "TOMBSTONED"


if __name__ == "__main__" and sys.argv[1:2] == ["cuts"]:
    _cuts_scenario(Path(sys.argv[2]))
