"""A development cluster of real daemons on 127.0.0.1: masters and tablet servers as separate
processes, each with its own data dir, log file and pid file under one directory. With
`own_addresses`, daemon N listens on and sends from 127.0.0.(10+N) instead, so a test in a
network namespace of its own can partition daemons from each other by address.

The directory's `cluster.json` records every daemon's address and pid, so `down` (or a test's
teardown) stops exactly the processes `up` started, by pid. A pid outlives its process: once a
daemon has died, the kernel may give its pid to anything else. So each daemon's start time
(field 22 of /proc/PID/stat) and command line are recorded too, and a pid is signalled only
while both still match; a record from before they were kept is checked by its command line
alone, which must be this cluster's daemon for that data dir.
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


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default range starts here


_HANDED_OUT: set[int] = set()  # this process's answers: a port free now is not yet bound


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now, for a daemon started later, chosen BELOW the kernel's
    ephemeral range: a port from bind(0) is an ephemeral one, which any process's outgoing
    connection may take as its local port before the daemon binds it ("address already in
    use" at start-up; seen with the suite's two halves side by side). Never one this process
    handed out before: a port is free until its daemon binds it, so one cluster's daemons
    could otherwise draw the same one (CI saw a tablet server find its port taken)."""
    import random

    low = _ephemeral_low()
    if len(_HANDED_OUT) > 4096:  # a long-lived process: the oldest clusters are long gone
        _HANDED_OUT.clear()
    for _ in range(200):
        port = random.randrange(max(1024, low - 16384), low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            _HANDED_OUT.add(port)
            return port
    raise LocalClusterError(f"no free port on {host} below the ephemeral range ({low})")


@dataclass
class Daemon:
    name: str  # m1.. / t1..
    kind: str  # master | tserver
    port: int
    pid: int = 0
    host: str = "127.0.0.1"
    # The process's identity, beside its pid: its start time in clock ticks since boot and its
    # command line, as started. 0 / []: a cluster.json written before they were recorded.
    start_time: int = 0
    cmdline: list[str] = field(default_factory=list)

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
    # A CA of its own in root/tls, a service certificate per daemon, and daemons that require
    # TLS and certificates (README "Security"); clients then connect as `admin` or `client`.
    security: bool = False
    ca: tuple[str, str] | None = None  # the operator's CA (certificate, key) to issue from

    @classmethod
    def load(cls, root: Path) -> LocalCluster:
        path = Path(root) / "cluster.json"
        try:
            doc = json.loads(path.read_text())
            c = cls(Path(root), doc["masters"], doc["tservers"], doc["flags"],
                    own_addresses=doc.get("own_addresses", False),
                    security=doc.get("security", False),
                    ca=tuple(doc["ca"]) if doc.get("ca") else None)
            c.daemons = {d["name"]: Daemon(**d) for d in doc["daemons"]}
        except FileNotFoundError:
            raise LocalClusterError(f"no local cluster in {root} (run `tessera local-cluster up`)") from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise LocalClusterError(f"{path} is not a local cluster's record "
                                    f"({type(e).__name__}: {e})") from None
        return c

    def save(self) -> None:
        doc = {"masters": self.masters, "tservers": self.tservers, "flags": self.flags,
               "own_addresses": self.own_addresses, "security": self.security, "ca": self.ca,
               "daemons": [asdict(d) for d in self.daemons.values()]}
        tmp = self.root / "cluster.json.tmp"
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(self.root / "cluster.json")

    @property
    def master_addrs(self) -> list[tuple[str, int]]:
        return [(d.host, d.port) for d in self.daemons.values() if d.kind == "master"]

    @property
    def tls_dir(self) -> Path:
        return self.root / "tls"

    def cert(self, name: str) -> Path | None:
        """The certificate of identity `name` (`admin`, `client`, a daemon's name), issued on
        first use; None when the cluster runs without security."""
        if not self.security:
            return None
        from node.security import pki

        path = self.tls_dir / "certs" / f"{name}.pem"
        if not path.exists():
            ca_dir = self.tls_dir / "ca"
            if self.ca:
                ca = pki.CertFiles(Path(self.ca[0]), Path(self.ca[1]), Path(self.ca[0]))
            elif (ca_dir / "ca.key").exists():
                ca = pki.CertFiles(ca_dir / "ca.pem", ca_dir / "ca.key", ca_dir / "ca.pem")
            else:
                ca = pki.create_ca(ca_dir)
            kind = pki.SERVICE if name in self.daemons else pki.USER
            pki.issue(ca, self.tls_dir / "certs", name, kind)
        return path

    def tls(self, name: str = "admin"):
        """The client TLS context of identity `name` (None without security)."""
        from node.security.tls import client_tls

        return client_tls(self.cert(name))

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
                                                                   kind, free_port(host), host=host)
        started = []
        try:
            for name in self.daemons:
                if not self.alive(name):
                    self.start(name)
                    started.append(name)
            self.save()
            for attempt in range(3):
                try:
                    self.wait_ready(timeout)
                    break
                except LocalClusterError:
                    if attempt == 2 or not self._restart_on_taken_ports(started):
                        raise
        except BaseException:
            for name in started:  # an up that failed leaves none of the daemons it started
                self.kill(name)
            raise

    def _restart_on_taken_ports(self, started: list[str]) -> bool:
        """Start again, each on a port of its own, the tablet servers in `started` that exited
        because another process bound their port first (a port is free when chosen, until
        its daemon binds it; another process's daemon may take it between). A tablet server's
        address reaches the masters by its heartbeat, so nothing else knows the old one; a
        master's is in every daemon's flags, so a master that lost its port is not restarted.
        Whether any was."""
        lost = [name for name in started if self.daemons[name].kind == "tserver"
                and not self.alive(name) and "address already in use"
                in (self.root / f"{name}.log").read_text(errors="replace")[-2000:]]
        for name in lost:
            d = self.daemons[name]
            d.port = free_port(d.host)
            self.start(name)
        return bool(lost)

    def add_daemon(self, kind: str) -> str:
        """Start one more master or tablet server (a new master waits to be added to the
        masters); its name."""
        prefix = "m" if kind == "master" else "t"
        n = 1 + max((int(name[1:]) for name in self.daemons if name[0] == prefix), default=0)
        host = f"127.0.0.{10 + len(self.daemons) + 1}" if self.own_addresses else "127.0.0.1"
        name = f"{prefix}{n}"
        self.daemons[name] = Daemon(name, kind, free_port(host), host=host)
        self.start(name)
        return name

    def _argv(self, d: Daemon) -> list[str]:
        masters = ",".join(m.addr for m in self.daemons.values() if m.kind == "master")
        own = ["--rpc-outbound-host", d.host] if self.own_addresses else []
        return [sys.executable, "-m", "harness.cli", d.kind, "--data-dir", str(self.root / d.name),
                "--rpc-addr", d.addr, "--masters", masters, *own, *self._security_flags(d),
                *self.flags]

    def _security_flags(self, d: Daemon) -> list[str]:
        from node.security import pki
        from node.security.tls import identity_files

        if not self.security:
            return []
        files = identity_files(self.cert(d.name))
        return ["--rpc-authentication=required", "--rpc-encryption=required",
                f"--rpc-certificate-file={files.cert}", f"--rpc-private-key-file={files.key}",
                f"--rpc-ca-certificate-file={files.ca}", f"--superuser-acl={pki.ADMIN}"]

    def start(self, name: str) -> None:
        d = self.daemons[name]
        argv = self._argv(d)
        log = open(self.root / f"{name}.log", "ab")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
        log.close()
        _wait_exec_done(proc, argv)
        # The start time is read before anything can reap our child, so it is this process's;
        # the command line is the argv exec'd, which /proc/PID/cmdline shows unchanged.
        stat = _proc_stat(proc.pid)
        d.pid, d.start_time, d.cmdline = proc.pid, (stat[1] if stat else 0), argv
        (self.root / f"{name}.pid").write_text(f"{proc.pid}\n")
        self.save()

    def alive(self, name: str) -> bool:
        """Whether daemon `name` runs: its pid has a process (a zombie child of ours counts as
        dead) and that process is the daemon, not a later one given the same pid."""
        return self._identify(name) == "ours"

    def stranger(self, name: str) -> str | None:
        """Why the process that has daemon `name`'s pid is not that daemon, if it is not."""
        found = self._identify(name)
        return found if found not in ("ours", "gone") else None

    def _identify(self, name: str) -> str:
        """"ours", "gone" (no process has the pid, or a zombie), or why the process at the pid
        is someone else's: its start time or command line is not the recorded one, or, for a
        record without them, its command line is not this cluster's daemon for its data dir."""
        d = self.daemons[name]
        stat = _proc_stat(d.pid) if d.pid else None
        if stat is None or stat[0] == "Z":
            return "gone"
        cmdline = _cmdline(d.pid)
        shown = " ".join(cmdline) if cmdline else "(command line unreadable)"
        if d.start_time:
            if stat[1] == d.start_time and cmdline == d.cmdline:
                return "ours"
            return (f"{name}: pid {d.pid} now belongs to another process, not this cluster's "
                    f"{d.kind} (its start time or command line differs): {shown}")
        if cmdline and self._runs_daemon(d, cmdline):
            return "ours"
        return (f"{name}: pid {d.pid} does not run this cluster's {d.kind} for "
                f"{self.root / d.name} (cluster.json written before start times were "
                f"recorded, so only the command line can tell): {shown}")

    def _runs_daemon(self, d: Daemon, cmdline: list[str]) -> bool:
        """`cmdline` is `tessera <kind> --data-dir <this cluster's dir for d>`, the data dir
        resolved against the process's own working directory."""
        if "harness.cli" not in cmdline or d.kind not in cmdline or "--data-dir" not in cmdline:
            return False
        i = cmdline.index("--data-dir") + 1
        if i >= len(cmdline):
            return False
        try:
            cwd = os.readlink(f"/proc/{d.pid}/cwd")
        except OSError:
            return False
        return Path(cwd, cmdline[i]).resolve() == (self.root / d.name).resolve()

    def signal(self, name: str, sig: int) -> bool:
        """Send `sig` to daemon `name` if it runs; whether it was sent. The identity is checked
        through a pidfd opened first, so the signal cannot reach a process that took the pid
        between the check and the kill."""
        d = self.daemons[name]
        if not d.pid:
            return False
        try:
            fd = os.pidfd_open(d.pid)
        except ProcessLookupError:
            return False
        except OSError:  # no pidfds here (an old kernel, a seccomp filter): check, then kill
            fd = None
        try:
            if not self.alive(name):
                return False
            if fd is None:
                os.kill(d.pid, sig)
            else:
                signal.pidfd_send_signal(fd, sig)
        except ProcessLookupError:
            return False
        finally:
            if fd is not None:
                os.close(fd)
        if sig == signal.SIGKILL:
            _wait_gone(d.pid)
        return True

    def kill(self, name: str) -> None:
        self.signal(name, signal.SIGKILL)

    def down(self, timeout: float = 10.0) -> list[str]:
        """Stop every daemon still running; a pid that another process has now is left alone.
        Returns one line per pid left alone, saying why."""
        notes = [note for name in self.daemons if (note := self.stranger(name))]
        signalled = []
        for name in self.daemons:
            if self.signal(name, signal.SIGTERM):
                signalled.append(name)
                self.signal(name, signal.SIGCONT)  # a paused daemon acts on the SIGTERM only now
        deadline = time.monotonic() + timeout
        for name in signalled:
            pid = self.daemons[name].pid
            while self.alive(name) and time.monotonic() < deadline:
                _reap(pid)
                time.sleep(0.05)
            if self.alive(name):
                self.kill(name)
            _reap(pid)
        return notes

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
            c = TesseraClient(self.master_addrs, timeout=2.0, tls=self.tls())
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


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of process `pid` from /proc/PID/stat
    (fields 3 and 22; the command name, field 2, may hold spaces and parentheses); None if
    there is no such process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[19])


def _wait_exec_done(proc: subprocess.Popen, argv: list[str], timeout: float = 10.0) -> None:
    """Block until the child's /proc/PID/cmdline shows `argv` (or it has died). Popen returns
    once the close-on-exec pipe closes, which the kernel does before it lays out the new
    program's arguments: a read in that window sees an empty command line, and `alive` would
    call a daemon that is still starting someone else (a suite run under load hit it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if _cmdline(proc.pid) == argv:
            return
        time.sleep(0.005)


def _cmdline(pid: int) -> list[str]:
    """The argv of process `pid` ([] for a zombie, or if it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="surrogateescape").split("\0")[:-1]


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
