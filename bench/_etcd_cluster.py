"""Three etcd members on loopback for bench/replication.py: Debian's etcd, run as its own docs
run a local cluster (Procfile: three members on 127.0.0.1, one port pair each), with its
defaults, so every write is fsynced on a majority before it is answered, as etcd always does.
Data dirs under /var/tmp, on the disk Tessera's LocalCluster uses. Started fresh for each use
and killed at the end."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MEMBERS = 3
CLIENT_PORT, PEER_PORT = 23790, 23791  # member i: + 10 * i


@dataclass
class EtcdCluster:
    endpoints: list[str]  # HOST:PORT of each member's client URL
    leader: str  # the endpoint of the member that leads
    roles: dict[str, list[int]]  # leader, follower1, follower2 -> pid (the CPU meter's roles)


def _status(endpoint: str) -> dict:
    """The member's maintenance status (etcd's JSON gateway): its id and the leader's."""
    req = urllib.request.Request(f"http://{endpoint}/v3/maintenance/status", data=b"{}",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=2) as r:
        return json.loads(r.read())


@contextlib.contextmanager
def etcd_cluster(root: Path, timeout: float = 60.0) -> Iterator[EtcdCluster]:
    binary = shutil.which("etcd")
    if binary is None:
        raise RuntimeError("no etcd binary on PATH: `apt-get install etcd-server` (make setup "
                           "installs it)")
    peers = ",".join(f"e{i}=http://127.0.0.1:{PEER_PORT + 10 * i}" for i in range(MEMBERS))
    procs: list[subprocess.Popen] = []
    endpoints = [f"127.0.0.1:{CLIENT_PORT + 10 * i}" for i in range(MEMBERS)]
    try:
        for i, endpoint in enumerate(endpoints):
            peer = f"http://127.0.0.1:{PEER_PORT + 10 * i}"
            with open(root / f"e{i}.log", "wb") as log:
                procs.append(subprocess.Popen(
                    [binary, f"--name=e{i}", f"--data-dir={root / f'e{i}'}",
                     f"--listen-client-urls=http://{endpoint}",
                     f"--advertise-client-urls=http://{endpoint}",
                     f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                     f"--initial-cluster={peers}", "--initial-cluster-state=new",
                     "--initial-cluster-token=bench", "--logger=zap", "--log-level=warn"],
                    stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL))
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = {e: _status(e) for e in endpoints}
                leader_id = next(iter(status.values()))["leader"]
                leader = next(e for e, s in status.items()
                              if s["header"]["member_id"] == leader_id)
                break
            except (OSError, ValueError, KeyError, StopIteration):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                    tail = (root / "e0.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"etcd did not elect a leader: {tail}") from None
                time.sleep(0.2)
        followers = [p.pid for e, p in zip(endpoints, procs, strict=True) if e != leader]
        roles = {"leader": [procs[endpoints.index(leader)].pid],
                 **{f"follower{i}": [pid] for i, pid in enumerate(followers, 1)}}
        yield EtcdCluster(endpoints, leader, roles)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
