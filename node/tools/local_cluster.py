"""A development cluster of real daemons on 127.0.0.1: masters and tablet servers as separate
processes, each with its own data dir, log file and pid file under one directory. With
`own_addresses`, daemon N listens on and sends from 127.0.0.(10+N) instead, so a test in a
network namespace of its own can partition daemons from each other by address.

The directory's `cluster.json` records every daemon's address and pid, so `down` (or a test's
teardown) stops exactly the processes `up` started, by pid.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from node.errors import TesseraError


class LocalClusterError(TesseraError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Daemon:
    name: str  # m1.. / t1..
    kind: str  # master | tserver
    port: int
    pid: int = 0
    host: str = "127.0.0.1"

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class LocalCluster:
    root: Path
    masters: int = 1
    tservers: int = 3
    flags: list[str] = field(default_factory=list)  # extra daemon flags, e.g. fsync off
    daemons: dict[str, Daemon] = field(default_factory=dict)
    own_addresses: bool = False

    @classmethod
    def load(cls, root: Path) -> LocalCluster:
        try:
            doc = json.loads((Path(root) / "cluster.json").read_text())
        except FileNotFoundError:
            raise LocalClusterError(f"no local cluster in {root} (run `tessera local-cluster up`)") from None
        c = cls(Path(root), doc["masters"], doc["tservers"], doc["flags"],
                own_addresses=doc.get("own_addresses", False))
        c.daemons = {d["name"]: Daemon(**d) for d in doc["daemons"]}
        return c

    def save(self) -> None:
        doc = {"masters": self.masters, "tservers": self.tservers, "flags": self.flags,
               "own_addresses": self.own_addresses,
               "daemons": [asdict(d) for d in self.daemons.values()]}
        tmp = self.root / "cluster.json.tmp"
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(self.root / "cluster.json")

    @property
    def master_addrs(self) -> list[tuple[str, int]]:
        return [(d.host, d.port) for d in self.daemons.values() if d.kind == "master"]

    def up(self, timeout: float = 30.0) -> None:
        if self.masters not in (1, 3, 5) or not 1 <= self.tservers <= 20:
            raise LocalClusterError("--num-masters must be 1, 3 or 5 and --num-tservers 1..20")
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.daemons:
            kinds = [("m", "master")] * self.masters + [("t", "tserver")] * self.tservers
            counts = {"m": 0, "t": 0}
            for n, (prefix, kind) in enumerate(kinds, start=1):
                counts[prefix] += 1
                host = f"127.0.0.{10 + n}" if self.own_addresses else "127.0.0.1"
                self.daemons[f"{prefix}{counts[prefix]}"] = Daemon(f"{prefix}{counts[prefix]}",
                                                                   kind, free_port(), host=host)
        started = []
        try:
            for name in self.daemons:
                if not self.alive(name):
                    self.start(name)
                    started.append(name)
            self.save()
            self.wait_ready(timeout)
        except BaseException:
            for name in started:  # an up that failed leaves none of the daemons it started
                self.kill(name)
            raise

    def add_daemon(self, kind: str) -> str:
        """Start one more master or tablet server (a new master waits to be added to the
        masters); its name."""
        prefix = "m" if kind == "master" else "t"
        n = 1 + max((int(name[1:]) for name in self.daemons if name[0] == prefix), default=0)
        host = f"127.0.0.{10 + len(self.daemons) + 1}" if self.own_addresses else "127.0.0.1"
        name = f"{prefix}{n}"
        self.daemons[name] = Daemon(name, kind, free_port(), host=host)
        self.start(name)
        return name

    def _argv(self, d: Daemon) -> list[str]:
        masters = ",".join(m.addr for m in self.daemons.values() if m.kind == "master")
        own = ["--rpc-outbound-host", d.host] if self.own_addresses else []
        return [sys.executable, "-m", "harness.cli", d.kind, "--data-dir", str(self.root / d.name),
                "--rpc-addr", d.addr, "--masters", masters, *own, *self.flags]

    def start(self, name: str) -> None:
        d = self.daemons[name]
        log = open(self.root / f"{name}.log", "ab")
        proc = subprocess.Popen(self._argv(d), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
        log.close()
        d.pid = proc.pid
        (self.root / f"{name}.pid").write_text(f"{proc.pid}\n")
        self.save()

    def alive(self, name: str) -> bool:
        pid = self.daemons[name].pid
        if not pid:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # a zombie child of ours counts as dead
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            return state != "Z"
        except OSError:
            return False

    def signal(self, name: str, sig: int) -> None:
        d = self.daemons[name]
        if d.pid and self.alive(name):
            os.kill(d.pid, sig)
        if sig == signal.SIGKILL:
            _wait_gone(d.pid)

    def kill(self, name: str) -> None:
        self.signal(name, signal.SIGKILL)

    def down(self, timeout: float = 10.0) -> None:
        for name in self.daemons:
            self.signal(name, signal.SIGTERM)
            self.signal(name, signal.SIGCONT)  # a paused daemon acts on the SIGTERM only now
        deadline = time.monotonic() + timeout
        for name, d in self.daemons.items():
            while self.alive(name) and time.monotonic() < deadline:
                _reap(d.pid)
                time.sleep(0.05)
            if self.alive(name):
                self.kill(name)
            _reap(d.pid)

    async def tablet_leader(self, rpc, tablet_id: str, exclude=(), timeout: float = 20.0) -> str:
        """The name of the live tablet server that reports leading `tablet_id`, waiting up to
        `timeout` for one; `rpc` is the caller's RpcClient (tests spy on it)."""
        import asyncio

        from node.protocol import Empty, ServerStatus

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while loop.time() < deadline:
            for name, d in self.daemons.items():
                if d.kind != "tserver" or name in exclude or not self.alive(name):
                    continue
                try:
                    st = await rpc.call((d.host, d.port), "ts.status", Empty(), ServerStatus,
                                        to_uuid="", timeout=1)
                except Exception:
                    continue
                if any(t.tablet_id == tablet_id and t.role == "LEADER" for t in st.tablets):
                    return name
            await asyncio.sleep(0.05)
        raise LocalClusterError(f"no leader for tablet {tablet_id} within {timeout:g}s")

    def wait_ready(self, timeout: float) -> None:
        """Until the leader master sees every tablet server."""
        import asyncio

        from node.client import TesseraClient
        from node.protocol import Empty, MasterInfo

        want = sum(1 for n, d in self.daemons.items() if d.kind == "tserver" and self.alive(n))

        async def check() -> bool:
            for name, d in self.daemons.items():
                if self.alive(name) and not _listening(d.host, d.port):
                    return False
            c = TesseraClient(self.master_addrs, timeout=2.0)
            try:
                for addr in self.master_addrs:
                    try:
                        info = await c.rpc.call(addr, "master.info", Empty(), MasterInfo,
                                                to_uuid="", timeout=1.0)
                    except Exception:
                        continue
                    if info.role == "LEADER" and len(info.tservers) >= want:
                        return True
                return False
            finally:
                await c.close()

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if asyncio.run(check()):
                return
            dead = [n for n in self.daemons if not self.alive(n)]
            if dead:
                tail = (self.root / f"{dead[0]}.log").read_text()[-800:]
                raise LocalClusterError(f"{dead[0]} exited during start-up:\n{tail}")
            time.sleep(0.2)
        raise LocalClusterError(f"cluster not ready after {timeout}s (see {self.root}/*.log)")


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Block until a killed daemon is really gone, so a restart cannot race its death."""
    try:
        os.waitpid(pid, 0)  # our child: reap it
        return
    except ChildProcessError:
        pass
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
