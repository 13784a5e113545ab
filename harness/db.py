"""The DB adapter, in the spirit of Jepsen's: how to install, start, stop, crash, pause and
inspect the system under test on a set of hosts. `TesseraDB` deploys Tessera; testing another
system means writing another class with the same methods.

Deployment never needs the hosts to reach a package index: the control machine builds a
wheelhouse (the project's wheel and the engine's dependencies) once, and every host installs
from its uploaded copy with `pip --no-index`. Daemons run under `setsid` with pid files, so they
outlive the SSH session that started them and every later command finds them by pid.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.cluster import ClusterError, Host
from harness.control import Remote

ROOT = "/opt/tessera"
DATA = "/var/lib/tessera"
MASTER_PORT, TSERVER_PORT = 7051, 7050  # Kudu's RPC ports
HTTP_PORTS = {"master": 8051, "tserver": 8050}  # Kudu's web UI ports: /status and /metrics


class DB(Protocol):
    def setup(self) -> None: ...
    def teardown(self) -> None: ...
    def start(self, host: str, daemon: str | None = None) -> None: ...
    def kill(self, host: str, daemon: str | None = None) -> None: ...
    def pause(self, host: str, daemon: str | None = None) -> None: ...
    def resume(self, host: str, daemon: str | None = None) -> None: ...
    def log_files(self, host: str) -> list[str]: ...
    def collect(self, host: str, dest: Path) -> None: ...
    def leader_master(self) -> str | None: ...  # primaries, when the system has them
    def tablet_leaders(self) -> dict[str, str]: ...


def build_wheelhouse(dest: Path, project: Path, log=print) -> list[Path]:
    """Wheels for the project and its engine dependencies, built on this machine."""
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("tessera-*.whl"):
        old.unlink()  # the project's wheel is rebuilt each time; dependencies are reused
    shutil.rmtree(project / "build", ignore_errors=True)  # stale build/lib would leak into it
    log(f"building wheels into {dest}")
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(dest), f"{project}[host]"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise ClusterError(f"building the wheelhouse failed: {p.stderr.strip()[-800:]}")
    return check_wheelhouse(dest)


def check_wheelhouse(path: Path) -> list[Path]:
    wheels = sorted(Path(path).glob("*.whl"))
    if not any(w.name.startswith("tessera-") for w in wheels):
        raise ClusterError(f"no tessera wheel in {path} (build one with `pip wheel -w {path} .`)")
    return wheels


def _digest(wheels: list[Path]) -> str:
    h = hashlib.sha256()
    for w in sorted(wheels):
        h.update(w.name.encode() + b"\0" + w.read_bytes())
    return h.hexdigest()[:16]


@dataclass
class TesseraDB:
    hosts: list[Host]
    wheels: list[Path]
    remotes: dict[str, Remote]
    masters: int = 3
    flags: dict[str, object] = field(default_factory=dict)  # extra daemon config keys
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> env for daemons
    log: object = print
    down: set = field(default_factory=set)  # (host, daemon) killed on purpose: not for the watchdog
    lazyfs: bool = False  # tablet servers' data dirs on lazyfs (lose-unfsynced-writes)
    # hosts given a master during the run (the master-membership nemesis), in order added
    added_masters: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # One start, kill or watchdog check at a time per host: a nemesis restarting a daemon
        # while the watchdog finds it not yet up would start it twice, and the second, unable to
        # bind, would take over the pid file and leave the first running unseen.
        self._locks = {h.name: threading.RLock() for h in self.hosts}
        self._had_master = {h.name for h in self.hosts[: self.masters]}  # whose logs to collect

    @property
    def master_hosts(self) -> list[Host]:
        """The first `masters` hosts, then those a master was added to, in order."""
        by_name = {h.name: h for h in self.hosts}
        return self.hosts[: self.masters] + [by_name[n] for n in self.added_masters]

    @property
    def master_addrs(self) -> list[tuple[str, int]]:
        return [(h.address, MASTER_PORT) for h in self.master_hosts]

    def daemons(self, host: str) -> list[str]:
        is_master = any(h.name == host for h in self.master_hosts)
        return (["master"] if is_master else []) + ["tserver"]

    def _each(self, fn, hosts: list[Host] | None = None) -> None:
        hosts = hosts or self.hosts
        with ThreadPoolExecutor(len(hosts)) as pool:
            for f in [pool.submit(fn, h) for h in hosts]:
                f.result()  # re-raise the first failure with its host's message

    # -- install -----------------------------------------------------------------------------
    def setup(self) -> None:
        self.log(f"installing Tessera on {len(self.hosts)} hosts")
        self._each(self._install)
        self._each(self._write_configs)
        if self.lazyfs:
            self._each(self._mount_lazyfs)
        for h in self.hosts:
            for d in self.daemons(h.name):
                self.start(h.name, d)

    def _install(self, h: Host) -> None:
        """Copy the wheels and install what changed: the dependencies only when theirs did (the
        slow part: a venv and five packages), Tessera's own wheel whenever its bytes did. Each
        half is stamped with its wheels' digest in the venv, so an unchanged host is left as is."""
        r = self.remotes[h.name]
        r.run(["mkdir", "-p", f"{ROOT}/wheels", f"{DATA}/logs"])
        tessera = next(w for w in self.wheels if w.name.startswith("tessera-"))
        deps = [w for w in self.wheels if w is not tessera]
        want = {"deps": _digest(deps), "tessera": _digest([tessera])}
        have = dict(line.split("=", 1) for line in r.run(
            ["cat", f"{ROOT}/venv/.installed"], check=False).stdout.split() if "=" in line)
        if have == want:
            return
        for w in self.wheels:
            r.put(str(w), f"{ROOT}/wheels/{w.name}")
        pip = [f"{ROOT}/venv/bin/pip", "install", "-q", "--no-index", "--find-links",
               f"{ROOT}/wheels", "--force-reinstall"]
        if have.get("deps") != want["deps"]:
            r.run(["python3", "-m", "venv", f"{ROOT}/venv"], timeout=120)
            r.run([*pip, f"{ROOT}/wheels/{tessera.name}[host]"], timeout=300)
        else:
            r.run([*pip, "--no-deps", f"{ROOT}/wheels/{tessera.name}"], timeout=300)
        stamp = " ".join(f"{k}={v}" for k, v in want.items())
        r.sh(f"echo {stamp} > {ROOT}/venv/.installed")

    def _mount_lazyfs(self, h: Host) -> None:
        from nemeses.lazyfs import mount_command

        d = f"{DATA}/tserver"
        self.remotes[h.name].sh(f"mkdir -p {d}; mountpoint -q {d} || "
                                + mount_command(d, d, python=f"{ROOT}/venv/bin/python"))

    def _config(self, h: Host, daemon: str) -> str:
        port = MASTER_PORT if daemon == "master" else TSERVER_PORT
        keys = {"data_dir": f"{DATA}/{daemon}", "rpc_addr": f"{h.address}:{port}",
                "http_port": HTTP_PORTS[daemon],
                "masters": [f"{a}:{p}" for a, p in self.master_addrs], **self.flags}
        lines = []
        for k, v in keys.items():
            if isinstance(v, bool):
                lines.append(f"{k} = {'true' if v else 'false'}")
            elif isinstance(v, (int, float)):
                lines.append(f"{k} = {v}")
            elif isinstance(v, list):
                lines.append(f"{k} = [{', '.join(_toml_str(x) for x in v)}]")
            else:
                lines.append(f"{k} = {_toml_str(str(v))}")
        return "\n".join(lines) + "\n"

    def _write_configs(self, h: Host) -> None:
        for d in self.daemons(h.name):
            self.remotes[h.name].run(["tee", f"{ROOT}/{d}.toml"],
                                     stdin=self._config(h, d).encode())

    # -- process control ---------------------------------------------------------------------
    def _targets(self, host: str, daemon: str | None) -> list[str]:
        return [daemon] if daemon else self.daemons(host)

    def start(self, host: str, daemon: str | None = None) -> None:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.get(host, {}).items())
        with self._locks[host]:
            for d in self._targets(host, daemon):
                self.down.discard((host, d))
                pid, log = f"{DATA}/{d}.pid", f"{DATA}/logs/{d}.log"
                cmd = (f"env {env} {ROOT}/venv/bin/tessera {d} --config {ROOT}/{d}.toml"
                       f" >>{log} 2>&1")
                # Already running? Leave it. Otherwise the shell records its pid, then becomes the
                # daemon (exec), in a new session so it outlives this SSH connection.
                script = (f"if [ -f {pid} ] && kill -0 $(cat {pid}) 2>/dev/null; then exit 0; fi; "
                          f"rm -f {pid}; "
                          f"setsid sh -c {shlex.quote(f'echo $$ > {pid}.new; mv {pid}.new {pid}; exec {cmd}')} "
                          f"</dev/null >/dev/null 2>&1 & "
                          f"for i in $(seq 200); do [ -s {pid} ] && exit 0; sleep 0.05; done; "
                          f"echo 'tessera {d}: cannot start: no pid file after 10 s' | tee -a {log} >&2; "
                          f"exit 1")  # in the daemon's log too, where the log checker looks
                self.remotes[host].sh(script)

    def _signal(self, host: str, daemon: str | None, sig: str) -> None:
        for d in self._targets(host, daemon):
            pid = f"{DATA}/{d}.pid"
            self.remotes[host].sh(f"[ -f {pid} ] && kill -{sig} $(cat {pid}) 2>/dev/null; true")

    def kill(self, host: str, daemon: str | None = None) -> None:
        with self._locks[host]:
            self.down.update((host, d) for d in self._targets(host, daemon))
            self._signal(host, daemon, "KILL")
            for d in self._targets(host, daemon):  # wait until gone, so a restart cannot race it
                pid = f"{DATA}/{d}.pid"
                self.remotes[host].sh(f"[ -f {pid} ] || exit 0; p=$(cat {pid}); "
                                      f"for i in $(seq 300); do kill -0 $p 2>/dev/null || exit 0; "
                                      f"sleep 0.05; done")

    def pause(self, host: str, daemon: str | None = None) -> None:
        self._signal(host, daemon, "STOP")

    def resume(self, host: str, daemon: str | None = None) -> None:
        self._signal(host, daemon, "CONT")

    def add_master(self, host: str, timeout: float = 60.0) -> str:
        """Start a master with an empty data dir on `host` (which has none) and add it to the
        masters (Kudu's master add, node.tools.admin.join_master); its UUID once it is a
        voter. A master that does not make it is stopped and wiped again."""
        import asyncio

        from node.client import TesseraClient
        from node.rpc import ErrorCode, RpcError
        from node.tools.admin import join_master

        h = next(h for h in self.hosts if h.name == host)
        if h in self.master_hosts:
            raise ClusterError(f"{host} runs a master already")
        current = self.master_addrs
        with self._locks[host]:
            self._wipe_master(host)
            self.added_masters.append(host)
            self._had_master.add(host)
            self._write_configs(h)
            self.start(host, "master")

        async def join() -> str:
            client = TesseraClient(current, timeout=5.0)
            try:
                for _ in range(int(timeout * 2)):  # until it serves master.info
                    try:
                        return (await join_master(client, (h.address, MASTER_PORT),
                                                  timeout=timeout)).uuid
                    except RpcError as e:
                        if e.code != ErrorCode.NETWORK:
                            raise
                    await asyncio.sleep(0.5)
                raise ClusterError(f"the new master on {host} never answered")
            finally:
                await client.close()

        try:
            return asyncio.run(join())
        except BaseException:
            self._drop_master(host)
            raise

    def remove_master(self, host: str) -> str:
        """Remove the master `add_master` put on `host` (Kudu's master remove), then stop it
        and wipe its data dir; its UUID."""
        import asyncio

        from node.client import TesseraClient
        from node.tools.admin import leave_master

        if host not in self.added_masters:
            raise ClusterError(f"{host} has no added master to remove")
        h = next(h for h in self.hosts if h.name == host)

        async def leave() -> str:
            client = TesseraClient(self.master_addrs, timeout=10.0)
            try:
                return await leave_master(client, f"{h.address}:{MASTER_PORT}")
            finally:
                await client.close()
        uuid = asyncio.run(leave())
        self._drop_master(host)
        return uuid

    def _drop_master(self, host: str) -> None:
        with self._locks[host]:
            self.kill(host, "master")
            self._wipe_master(host)
            if host in self.added_masters:
                self.added_masters.remove(host)

    def _wipe_master(self, host: str) -> None:
        self.remotes[host].run(["rm", "-rf", f"{DATA}/master", f"{DATA}/master.pid"])

    def ask_each(self, hosts: list[Host], daemon: str, method: str, reply: type,
                 request: object = None) -> dict:
        """Call `method` (with `request`, by default none) on `daemon` of every host, from a
        harness thread (which has no event loop of its own): host name -> reply, for the hosts
        that answered."""
        import asyncio

        from node.protocol import Empty
        from node.rpc import RpcClient, RpcError

        port = MASTER_PORT if daemon == "master" else TSERVER_PORT

        async def ask() -> dict:
            rpc, out = RpcClient(connect_timeout=1.0), {}
            try:
                for h in hosts:
                    try:
                        out[h.name] = await rpc.call((h.address, port), method,
                                                     Empty() if request is None else request, reply,
                                                     to_uuid="", timeout=1.0)
                    except RpcError:
                        pass
                return out
            finally:
                await rpc.close()

        return asyncio.run(ask())

    def leader_master(self) -> str | None:
        """The host of the leader master, asked of every master (None if none says so)."""
        from node.protocol import MasterInfo

        infos = self.ask_each(self.master_hosts, "master", "master.info", MasterInfo)
        return next((host for host, info in infos.items() if info.role == "LEADER"), None)

    def revive(self) -> list[tuple[str, str]]:
        """The watchdog's round: restart every daemon that died without being killed on purpose
        (a crash is still a finding: the caller records each restart in the history)."""
        revived = []
        for h in self.hosts:
            for d in self.daemons(h.name):
                with self._locks[h.name]:
                    if (h.name, d) not in self.down and not self.running(h.name, d):
                        self.start(h.name, d)
                        revived.append((h.name, d))
        return revived

    def tablet_leaders(self) -> dict[str, str]:
        """tablet id -> host of its current leader, as the tablet servers report it."""
        from node.protocol import ServerStatus

        leaders, terms = {}, {}
        for host, st in self.ask_each(self.hosts, "tserver", "ts.status", ServerStatus).items():
            for t in st.tablets:
                if t.role == "LEADER" and t.term >= terms.get(t.tablet_id, -1):
                    leaders[t.tablet_id], terms[t.tablet_id] = host, t.term
        return leaders

    def running(self, host: str, daemon: str) -> bool:
        pid = f"{DATA}/{daemon}.pid"
        res = self.remotes[host].sh(f"[ -f {pid} ] && kill -0 $(cat {pid})", check=False)
        return res.exit_status == 0

    # -- end of run --------------------------------------------------------------------------
    def log_files(self, host: str) -> list[str]:
        """Every daemon's log, a master's removed during the run included."""
        kinds = ["master"] if host in self._had_master else []
        return [f"{DATA}/logs/{d}.log" for d in [*kinds, "tserver"]]

    def collect(self, host: str, dest: Path) -> None:
        """Daemon logs and a listing of the data dirs, into the run's store."""
        dest.mkdir(parents=True, exist_ok=True)
        r = self.remotes[host]
        for path in self.log_files(host):
            name = path.rsplit("/", 1)[-1]
            try:
                r.get(path, str(dest / name))
            except OSError as e:
                (dest / f"{name}.missing").write_text(f"{e}\n")
        listing = r.sh(f"ls -laR {DATA} 2>&1 | head -n 2000", check=False).stdout
        (dest / "data-dir.txt").write_text(listing)

    def teardown(self) -> None:
        """Stop every daemon and remove its data, so the next run starts clean."""
        def stop(h: Host) -> None:
            from nemeses.lazyfs import unmount_command

            for d in ("master", "tserver"):  # a master added during the run too
                self.kill(h.name, d)
            d = f"{DATA}/tserver"
            # A daemon killed inside a slow FUSE call may hold the mount a moment longer: retry,
            # then detach lazily; either way no lazyfs process may outlive the test.
            self.remotes[h.name].sh(
                f"for i in $(seq 50); do mountpoint -q {d} || break; "
                f"{{ {unmount_command(d)}; }} 2>/dev/null && break; sleep 0.2; done; "
                f"mountpoint -q {d} && fusermount3 -uz {d}; "
                f"pkill -f 'nemeses[.]lazyfs' ; for i in $(seq 50); do "
                f"pgrep -f 'nemeses[.]lazyfs' >/dev/null || break; sleep 0.1; done; "
                f"pkill -9 -f 'nemeses[.]lazyfs'; true", timeout=60)
            self.remotes[h.name].run(["rm", "-rf", f"{DATA}/master", f"{DATA}/tserver",
                                      f"{DATA}/logs", f"{DATA}/master.pid", f"{DATA}/tserver.pid"])
            self.remotes[h.name].run(["mkdir", "-p", f"{DATA}/logs"])
        self._each(stop)
        self.added_masters.clear()


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
