"""The DB adapter, in the spirit of Jepsen's: how to install, start, stop, crash, pause and
inspect the system under test on a set of hosts, how the workloads' clients reach it, and what
the harness checks of it at the end of a run.

`Deployment` is the one place a system plugs in: it holds what every system shares (the install
from a wheelhouse, daemons under setsid with pid files, signals, the watchdog's revivals, log
collection, teardown), and a subclass says what is particular to its system. `TesseraDB` deploys
Tessera; `harness.pysyncobj_db.PySyncObjDB` deploys PySyncObj; harness.spec.SYSTEMS names them
for `tessera test --db`. docs/adding-a-db.md walks through writing a third.

Deployment never needs the hosts to reach a package index: the control machine builds a
wheelhouse (the project's wheel and the engine's dependencies) once, and every host installs
from its uploaded copy with `pip --no-index`. Daemons run under `setsid` with pid files, so they
outlive the SSH session that started them and every later command finds them by pid.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from harness.cluster import ClusterError, Host
from harness.control import Remote
from reports.checkers.logs import TESSERA_RULES

ROOT = "/opt/tessera"
DATA = "/var/lib/tessera"
MASTER_PORT, TSERVER_PORT = 7051, 7050  # Kudu's RPC ports
HTTP_PORTS = {"master": 8051, "tserver": 8050}  # Kudu's web UI ports: /status and /metrics
HOST_EXTRAS = "host,pysyncobj"  # what every host installs: one wheelhouse serves every system


PACKAGES = ("node", "harness", "nemeses", "workloads", "reports")  # pyproject's packages.find


def cache_dir() -> Path:
    """Where this machine keeps what it builds for the hosts: $TESSERA_CACHE_DIR, else
    $XDG_CACHE_HOME/tessera, else ~/.cache/tessera. Wheels are a function of the source and the
    Python that built them, not of a store, so every store and run shares them."""
    if os.environ.get("TESSERA_CACHE_DIR"):
        return Path(os.environ["TESSERA_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tessera"


def wheel_dir(version: str = f"{sys.version_info[0]}.{sys.version_info[1]}") -> Path:
    """The cached wheelhouse for hosts on Python `version` ("3.11"; this one's by default)."""
    return cache_dir() / f"wheels-py{version}"


def source_digest(project: Path, python: str) -> str:
    """What the project's wheel is made of: pyproject.toml and every file of its packages
    (__pycache__ aside), the interpreter that builds it and the extras it carries. Equal
    digests give equal wheels (build_wheelhouse fixes the build's timestamp)."""
    h = hashlib.sha256(f"{python}\0{HOST_EXTRAS}\0".encode())
    files = [project / "pyproject.toml"]
    for package in PACKAGES:
        for folder, dirs, names in os.walk(project / package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [Path(folder) / n for n in sorted(names)]
    for f in files:
        h.update(str(f.relative_to(project)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def build_wheelhouse(dest: Path, project: Path, log=print, python: str = sys.executable) -> list[Path]:
    """Wheels for the project and its engine dependencies, built on this machine by `python`
    (whose version and ABI the compiled ones get). A wheelhouse already built from the same
    source (its SOURCE stamp equals source_digest) is kept as it is: the build is ~5 s of every
    run otherwise. Concurrent runs take turns on a lock in `dest`."""
    import fcntl

    dest.mkdir(parents=True, exist_ok=True)
    stamp = dest / "SOURCE"
    with open(dest / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = source_digest(project, python)
        if stamp.exists() and stamp.read_text().strip() == digest:
            log(f"wheels in {dest} are current (source {digest[:12]})")
            return check_wheelhouse(dest)
        stamp.unlink(missing_ok=True)  # a build cut short leaves no stamp behind
        for old in dest.glob("tessera-*.whl"):
            old.unlink()  # the project's wheel is rebuilt each time; dependencies are reused
        shutil.rmtree(project / "build", ignore_errors=True)  # stale build/lib would leak into it
        log(f"building wheels into {dest}" + ("" if python == sys.executable else f" with {python}"))
        # A fixed timestamp makes the wheel's bytes a function of the source alone, so hosts
        # that hold the same digest (harness.db._install) keep their install instead of redoing it.
        env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
        p = subprocess.run([python, "-m", "pip", "wheel", "-q", "-w", str(dest), f"{project}[{HOST_EXTRAS}]"],
                           capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise ClusterError(f"building the wheelhouse failed: {p.stderr.strip()[-800:]}")
        wheels = check_wheelhouse(dest)
        stamp.write_text(digest + "\n")
        return wheels


PYTHON_VERSION = ["python3", "-c", "import sys; print(*sys.version_info[:2])"]


def python_version(where: str, line: str) -> str:
    """"3.11" from PYTHON_VERSION's answer ("3 11"); ClusterError when none came."""
    parts = line.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ClusterError(f"{where}: no python3 answered ({line.strip() or 'no output'}); "
                           "install python3 and python3-venv there")
    return ".".join(parts)


def wheelhouse_for(hosts_versions: dict[str, str], project: Path, log=print,
                   find=None) -> list[Path]:
    """The wheelhouse the hosts can install, in cache_dir(): built by this Python when theirs
    is the same, else by an interpreter of their version found here (`find_python`); one
    directory per Python version. `hosts_versions`: host -> `python3`'s "3 11" line there."""
    lines = {v.strip() for v in hosts_versions.values()}
    if len(lines) != 1:
        raise ClusterError("the hosts run different Pythons: " + ", ".join(
            f"{h} {v.strip() or 'none'}" for h, v in sorted(hosts_versions.items())))
    version = python_version("the hosts", lines.pop())
    if version == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return build_wheelhouse(wheel_dir(version), project, log)
    python = (find or find_python)(version)
    if python is None:
        raise ClusterError(
            f"the hosts run Python {version} and this machine has no python{version} to build "
            f"wheels for them (looked on PATH and in ~/.pyenv/versions): install one, or build a "
            f"wheelhouse on a machine with it (`python{version} -m pip wheel -w DIR "
            f"'.[{HOST_EXTRAS}]'`) and pass --wheelhouse DIR")
    log(f"the hosts run Python {version}, this machine {sys.version.split()[0]}")
    return build_wheelhouse(wheel_dir(version), project, log, python=python)


def find_python(version: str) -> str | None:
    """An interpreter of `version` ("3.12") here that runs and says so: pythonX.Y on PATH (a
    pyenv shim there may name a version pyenv will not run), else pyenv's newest."""
    pyenv = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"),
                   key=lambda p: [int(x) for x in p.parts[-3].split(".") if x.isdigit()])
    for candidate in [shutil.which(f"python{version}"), *map(str, reversed(pyenv))]:
        if candidate is None:
            continue
        try:
            said = subprocess.run([candidate, *PYTHON_VERSION[1:]], capture_output=True,
                                  text=True, timeout=30).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ".".join(said) == version:
            return candidate
    return None


def check_wheelhouse(path: Path) -> list[Path]:
    wheels = sorted(Path(path).glob("*.whl"))
    if not any(w.name.startswith("tessera-") for w in wheels):
        raise ClusterError(f"no tessera wheel in {path} (build one with `pip wheel -w {path} .`)")
    return wheels


def check_python(host: str, version_line: str, wheels: list[Path]) -> None:
    """ClusterError unless `host`'s python3 (`version_line`: "3 11") can install the compiled
    wheels (cpXY tags): a wheelhouse built by another Python fails there in pip, late and
    obscurely."""
    built = sorted({tag[2:] for w in wheels for tag in w.name.split("-")[2].split(".")
                    if tag.startswith("cp") and tag[2:].isdigit()})
    have = python_version(host, version_line)
    if built and have.replace(".", "") not in built:
        want = " or ".join(f"{v[0]}.{v[1:]}" for v in built)
        raise ClusterError(
            f"{host} has Python {have}, but the wheelhouse's compiled wheels are for Python "
            f"{want}: give the hosts python{want} (the Vagrantfile's Debian 12 boxes have 3.11), "
            f"or build the wheelhouse with that Python (`python{have} -m pip wheel -w DIR "
            f"'.[{HOST_EXTRAS}]'`, then --wheelhouse DIR)")


async def first_write(probe, system: str, timeout: float) -> None:
    """Until a write through `probe` (a client of one node) commits: the system elected a
    leader and accepts ops. RuntimeError after `timeout` seconds, with the last error. The
    probe is closed either way."""
    import asyncio

    from node.errors import OpFailed, OpUnknown

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while True:
            try:
                await probe.write("_ready", 1)
                return
            except (OpFailed, OpUnknown) as e:
                if loop.time() > deadline:
                    raise RuntimeError(f"{system} never committed a write: {e}") from e
                await asyncio.sleep(0.5)
    finally:
        await probe.close()


def bound_clients(binds: list[str], names: dict[str, str], make):
    """(clients(thread), async close()) for node-bound workers: thread t gets
    make(address, host name) of binds[t mod n], each closed by close()."""
    import asyncio

    handles = []

    def clients(thread: int):
        address = binds[thread % len(binds)]
        handles.append(make(address, names[address]))
        return handles[-1]

    async def close() -> None:
        await asyncio.gather(*(c.close() for c in handles))

    return clients, close


def _digest(wheels: list[Path]) -> str:
    h = hashlib.sha256()
    for w in sorted(wheels):
        h.update(w.name.encode() + b"\0" + w.read_bytes())
    return h.hexdigest()[:16]


class Holds:
    """Which fault package holds which daemon killed or paused (`held`: (host, daemon) ->
    package): no other fault may start, kill, pause or replace it until that package lets it
    go (once, a disk fault restarted a daemon the kill fault held down, and replaced a
    paused one with a fresh one, while the history showed the kill or pause in force). A class
    needs `held` and `_targets(host, daemon)`."""

    held: dict

    def _targets(self, host: str, daemon: str | None) -> list[str]:
        raise NotImplementedError

    _claims = threading.Lock()  # faults run in threads of their own: check and hold at once

    def hold(self, host: str, daemon: str | None, by: str) -> None:
        """`by` (a fault package) holds the host's daemon(s) killed or paused until `release`."""
        with self._claims:
            for d in self._targets(host, daemon):
                self.held[(host, d)] = by

    def claim(self, host: str, daemon: str | None, by: str) -> str | None:
        """Hold the host's daemon(s) for `by` unless another package holds one: then nothing
        is held and that package is returned. Atomic, so two faults firing together never
        both take the same daemon."""
        with self._claims:
            if holder := self.held_by(host, daemon, but=by):
                return holder
            for d in self._targets(host, daemon):
                self.held[(host, d)] = by
            return None

    def release(self, host: str, daemon: str | None, by: str) -> None:
        with self._claims:
            for d in self._targets(host, daemon):
                if self.held.get((host, d)) == by:
                    del self.held[(host, d)]

    def held_by(self, host: str, daemon: str | None = None, but: str = "") -> str | None:
        """The package other than `but` that holds one of the host's daemon(s), or None."""
        for d in self._targets(host, daemon):
            if (holder := self.held.get((host, d))) and holder != but:
                return holder
        return None


@dataclass
class Deployment(Holds):
    """A system under test on `hosts`: the shared half of every DB adapter. A subclass sets the
    class attributes and writes `daemons`, `command`, `configure`, the leader queries,
    `open_clients` and `end_checks`; everything else here works for any system whose daemons
    are processes started from the deployed venv."""

    hosts: list[Host]
    wheels: list[Path]
    remotes: dict[str, Remote]
    flags: dict[str, object] = field(default_factory=dict)  # daemon config keys (--flag)
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> env for daemons
    log: object = print
    down: set = field(default_factory=set)  # (host, daemon) killed on purpose: not for the watchdog
    held: dict = field(default_factory=dict)  # Holds: (host, daemon) -> the fault holding it
    lazyfs: bool = False  # the data daemon's data dir on lazyfs (lose-unfsynced-writes)
    # Where the control machine keeps the deployment's CA and certificates (a temporary dir if
    # None), and the operator's CA (its certificate and key files) to issue them from instead
    # of a new one. Systems without RPC security of their own ignore both.
    tls_dir: Path | None = None
    ca: tuple[str, str] | None = None
    time_scale: float = 1.0  # TestSpec.time_scale: the harness's own clients' timeouts too

    name: ClassVar[str] = ""  # what --db calls it; also the start-failure line's first word
    # The daemon that holds the replicated data: what lose-unfsynced and majority-kill stop.
    data_daemon: ClassVar[str] = ""
    all_daemons: ClassVar[tuple[str, ...]] = ()  # every kind a host may run: what teardown stops
    # What nemeses may need beyond processes, network and clocks (nemeses.registry.Package.needs):
    # "tablets" (a catalog of tablets and their replicas), "masters" (a master quorum of its own),
    # "disk" (disk_layout, damaged, repair: files the disk nemesis may damage), "membership"
    # (membership(): members it may remove and add back), "admin" (admin(): maintenance such as
    # compaction), "leaders" (a leader query), "faketime" (daemons that run under libfaketime:
    # no time.sleep, which fails with EINVAL).
    offers: ClassVar[frozenset[str]] = frozenset()
    workloads: ClassVar[tuple[str, ...]] = ()  # the workloads its client can run
    client_modes: ClassVar[tuple[str, ...]] = ("node-bound",)
    # The node-log checker's rules (reports.checkers.logs), recorded in test.json.
    log_rules: ClassVar[tuple[dict, ...]] = ()

    @classmethod
    def check_flags(cls, flags: dict) -> None:
        """ValueError for a --flag the system's daemons would not take (checked before any
        host is touched); by default every key passes to the daemons' config as it is."""

    def __post_init__(self) -> None:
        # One start, kill or watchdog check at a time per host: a nemesis restarting a daemon
        # while the watchdog finds it not yet up would start it twice, and the second, unable to
        # bind, would take over the pid file and leave the first running unseen.
        self._locks = {h.name: threading.RLock() for h in self.hosts}

    # -- what a system says ------------------------------------------------------------------
    def daemons(self, host: str) -> list[str]:
        """The daemons `host` runs now."""
        raise NotImplementedError

    def command(self, host: str, daemon: str) -> str:
        """The shell words that run `daemon` in the foreground on `host`."""
        raise NotImplementedError

    def configure(self, h: Host) -> None:
        """Write the config files of `h`'s daemons."""
        raise NotImplementedError

    def leader_master(self) -> str | None:
        """The host of the primary that `leader-master` fault targets mean, or None."""
        raise NotImplementedError

    def tablet_leaders(self) -> dict[str, str]:
        """Replication group id -> its leader's host, for `tablet-leader` fault targets."""
        raise NotImplementedError

    def intrude_sessions(self, step: str, groups: list[str], sessions: int) -> dict:
        """Offered as "sessions": another user's `step` ("poison", "close" or "flood") against
        the client sessions of `groups` (see TesseraDB)."""
        raise NotImplementedError

    async def open_clients(self, workload, names: dict[str, str], binds: list[str] | None,
                           op_timeout: float):
        """Once the system accepts the workload's ops: (clients(thread) for harness.runner.run,
        an async close returning a summary for test.json or None, the replication groups by
        hash bucket for the nemeses' tablet rules). `names`: address -> host name; `binds`:
        the addresses node-bound threads talk to, thread t to binds[t mod n]."""
        raise NotImplementedError

    def end_checks(self) -> list[tuple[str, object]]:
        """(name, call) of the checks of the healed cluster after the final ops; each call
        returns a checker result and is saved as NAME.json in the run."""
        return []

    # -- what nemeses may ask of it, each behind an offer -----------------------------------
    def disk_layout(self):
        """"disk": where the state the disk nemesis may damage lives (nemeses.disk.DiskLayout)."""
        raise NotImplementedError

    def damaged(self, host: str, done: dict) -> dict:
        """"disk": how the daemon restarted after the damage `done` (the damage script's
        record) took it; recorded in the history and read by the logs checker."""
        raise NotImplementedError

    def repair(self, host: str, done: dict) -> dict | None:
        """"disk": at the heal, mend the damage `done` as an operator would; what was done, or
        None when the damage stays for the run."""
        return None

    def membership(self):
        """"membership": the system's members as the membership nemesis changes them
        (nemeses.membership.Members)."""
        raise NotImplementedError

    def cannot_spare(self) -> set[str]:
        """"disk": the groups (as `disk_layout` names them) in which one damaged replica would
        now be a majority of the voters, so that the disk nemesis leaves them alone: a
        membership fault shrank them, or has a change in flight. None by default."""
        return set()

    def admin(self, host: str, pick: int) -> dict:
        """"admin": one of the system's maintenance operations on `host` (which one: `pick`
        modulo their number); what was done."""
        raise NotImplementedError

    def data_dir(self, daemon: str) -> str:
        return f"{DATA}/{daemon}"

    def log_files(self, host: str) -> list[str]:
        return [f"{DATA}/logs/{d}.log" for d in self.daemons(host)]

    def _each(self, fn, hosts: list[Host] | None = None) -> None:
        hosts = hosts or self.hosts
        with ThreadPoolExecutor(len(hosts)) as pool:
            for f in [pool.submit(fn, h) for h in hosts]:
                f.result()  # re-raise the first failure with its host's message

    # -- install -----------------------------------------------------------------------------
    def setup(self) -> None:
        self.log(f"installing {self.name} on {len(self.hosts)} hosts")
        self._each(self._install)
        self._each(self.configure)
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
        check_python(h.name, r.run(PYTHON_VERSION, check=False).stdout, self.wheels)
        r.run(["mkdir", "-p", f"{ROOT}/wheels", f"{DATA}/logs"])
        tessera = next(w for w in self.wheels if w.name.startswith("tessera-"))
        deps = [w for w in self.wheels if w is not tessera]
        want = {"deps": _digest(deps), "tessera": _digest([tessera])}
        # a stamp over a venv without its pip (an install cut short, a copy of one) is none
        have = dict(line.split("=", 1) for line in r.sh(
            f"[ -x {ROOT}/venv/bin/pip ] && cat {ROOT}/venv/.installed", check=False
        ).stdout.split() if "=" in line)
        if have == want:
            return
        for w in self.wheels:
            r.put(str(w), f"{ROOT}/wheels/{w.name}")
        pip = [f"{ROOT}/venv/bin/pip", "install", "-q", "--no-index", "--find-links",
               f"{ROOT}/wheels", "--force-reinstall"]
        if have.get("deps") != want["deps"]:
            r.run(["python3", "-m", "venv", "--clear", f"{ROOT}/venv"], timeout=120)
            r.run([*pip, f"{ROOT}/wheels/{tessera.name}[{HOST_EXTRAS}]"], timeout=300)
        else:
            r.run([*pip, "--no-deps", f"{ROOT}/wheels/{tessera.name}"], timeout=300)
        stamp = " ".join(f"{k}={v}" for k, v in want.items())
        r.sh(f"echo {stamp} > {ROOT}/venv/.installed")

    def _mount_lazyfs(self, h: Host) -> None:
        from nemeses.lazyfs import mount_command

        d = self.data_dir(self.data_daemon)
        self.remotes[h.name].sh(f"mkdir -p {d}; mountpoint -q {d} || "
                                + mount_command(d, d, python=f"{ROOT}/venv/bin/python"))

    # -- process control ---------------------------------------------------------------------
    def _targets(self, host: str, daemon: str | None) -> list[str]:
        return [daemon] if daemon else self.daemons(host)

    def pid_file(self, daemon: str) -> str:
        return f"{DATA}/{daemon}.pid"

    def process_states(self, host: str, daemon: str | None = None) -> dict[str, str]:
        """daemon -> its process's state on the host, read from /proc (nemeses.observe)."""
        from nemeses.observe import process_states

        files = {self.pid_file(d): d for d in self._targets(host, daemon)}
        return {files[f]: st for f, st in process_states(self.remotes[host], list(files)).items()}

    def start(self, host: str, daemon: str | None = None, by: str = "") -> dict[str, str]:
        """Start the host's daemon(s) that are not running. A daemon another package than `by`
        holds killed or paused is left alone: returned as {daemon: holder}, for the record."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.get(host, {}).items())
        deferred = {}
        with self._locks[host]:
            for d in self._targets(host, daemon):
                if d not in self.daemons(host):
                    continue  # not this host's now (a removed member): nothing to start
                if (holder := self.held.get((host, d))) and holder != by:
                    deferred[d] = holder
                    continue
                self.down.discard((host, d))
                pid, log = f"{DATA}/{d}.pid", f"{DATA}/logs/{d}.log"
                cmd = f"env {env} {self.command(host, d)} >>{log} 2>&1"
                # Already running? Leave it. Otherwise the shell records its pid, then becomes the
                # daemon (exec), in a new session so it outlives this SSH connection.
                script = (f"if [ -f {pid} ] && kill -0 $(cat {pid}) 2>/dev/null; then exit 0; fi; "
                          f"rm -f {pid}; "
                          f"setsid sh -c {shlex.quote(f'echo $$ > {pid}.new; mv {pid}.new {pid}; exec {cmd}')} "
                          f"</dev/null >/dev/null 2>&1 & "
                          f"for i in $(seq 200); do [ -s {pid} ] && exit 0; sleep 0.05; done; "
                          f"echo '{self.name} {d}: cannot start: no pid file after 10 s' | tee -a {log} >&2; "
                          f"exit 1")  # in the daemon's log too, where the log checker looks
                self.remotes[host].sh(script)
        return deferred

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

    def running(self, host: str, daemon: str) -> bool:
        pid = f"{DATA}/{daemon}.pid"
        res = self.remotes[host].sh(f"[ -f {pid} ] && kill -0 $(cat {pid})", check=False)
        return res.exit_status == 0

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

    # -- end of run --------------------------------------------------------------------------
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

            for d in self.all_daemons:  # a daemon started during the run too
                self.kill(h.name, d)
            d = self.data_dir(self.data_daemon)
            # A daemon killed inside a slow FUSE call may hold the mount a moment longer: retry,
            # then detach lazily; either way no lazyfs process may outlive the test.
            self.remotes[h.name].sh(
                f"for i in $(seq 50); do mountpoint -q {d} || break; "
                f"{{ {unmount_command(d)}; }} 2>/dev/null && break; sleep 0.2; done; "
                f"mountpoint -q {d} && fusermount3 -uz {d}; "
                f"pkill -f 'nemeses[.]lazyfs' ; for i in $(seq 50); do "
                f"pgrep -f 'nemeses[.]lazyfs' >/dev/null || break; sleep 0.1; done; "
                f"pkill -9 -f 'nemeses[.]lazyfs'; true", timeout=60)
            self.remotes[h.name].run(["rm", "-rf", f"{DATA}/logs", *(
                p for d in self.all_daemons for p in (self.data_dir(d), f"{DATA}/{d}.pid"))])
            self.remotes[h.name].run(["mkdir", "-p", f"{DATA}/logs"])
        self._each(stop)
        self._torn_down()

    def _torn_down(self) -> None:
        """What a subclass forgets once its daemons are gone."""


@dataclass
class TesseraDB(Deployment):
    masters: int = 3
    # hosts given a master during the run (the master-membership nemesis), in order added
    added_masters: list[str] = field(default_factory=list)
    # tablet -> ids of the sessions the session intruder opened itself (its floods): its own,
    # which its poison and close leave alone
    intruder_sessions: dict[str, set[int]] = field(default_factory=dict)

    name: ClassVar[str] = "tessera"
    data_daemon: ClassVar[str] = "tserver"
    all_daemons: ClassVar[tuple[str, ...]] = ("master", "tserver")
    offers: ClassVar[frozenset[str]] = frozenset({"tablets", "masters", "disk", "membership",
                                                   "leaders", "faketime", "sessions"})
    workloads: ClassVar[tuple[str, ...]] = ("register", "list-append", "bank", "set")
    client_modes: ClassVar[tuple[str, ...]] = ("node-bound", "smart")
    log_rules: ClassVar[tuple[dict, ...]] = TESSERA_RULES

    # Config keys the deployment writes for each host: a --flag may not override them.
    OWN_KEYS: ClassVar[frozenset[str]] = frozenset({
        "data_dir", "rpc_addr", "masters", "http_port", "rpc_certificate_file",
        "rpc_private_key_file", "rpc_ca_certificate_file", "config", "probes_file"})

    @classmethod
    def check_flags(cls, flags: dict) -> None:
        """Every --flag checked as the daemons will check it at start (names, types, values and
        the rules between them), before any host is touched."""
        from node.security.tls import RpcSecurity
        from node.server.daemon_cli import check_config

        for key in flags:
            if key.replace("-", "_") in cls.OWN_KEYS:
                raise ValueError(f"--flag {key}: set by the harness for each host")
        RpcSecurity(str(flags.get("rpc_authentication", "required")),
                    str(flags.get("rpc_encryption", "required"))).check_modes()
        # the certificate files are the deployment's own, made later: beyond the modes, the
        # check takes security as off
        check_config({"data_dir": f"{DATA}/tserver", **flags, "rpc_authentication": "disabled",
                      "rpc_encryption": "disabled"}, "--flag")

    def __post_init__(self) -> None:
        super().__post_init__()
        self.masters = min(self.masters, len(self.hosts))
        self._had_master = {h.name for h in self.hosts[: self.masters]}  # whose logs to collect
        self._credentials: dict | None = None
        self._credentials_lock = threading.Lock()  # hosts are configured in parallel

    # -- security: README "Security" ---------------------------------------------------------
    @property
    def secure(self) -> bool:
        """Whether the daemons speak TLS: they do unless --flag turned encryption off."""
        return str(self.flags.get("rpc_encryption", "required")) != "disabled"

    def credentials(self) -> dict:
        """Identity name -> its node.security.pki.CertFiles on the control machine: a service
        certificate per daemon of every host (`tserver@n1`), the operator's (`admin`, a
        superuser) and the workloads' (`client`), all from one CA, made on first use."""
        with self._credentials_lock:
            return self._make_credentials()

    def _make_credentials(self) -> dict:
        if self._credentials is None:
            import tempfile

            from node.security import pki

            where = self.tls_dir or Path(tempfile.mkdtemp(prefix="tessera-tls-"))
            ca = pki.CertFiles(Path(self.ca[0]), Path(self.ca[1]), Path(self.ca[0])) if self.ca else None
            names = [f"{d}@{h.name}" for h in self.hosts for d in self.all_daemons]
            self._credentials = pki.cluster_credentials(where, names, ca)
        return self._credentials

    def tls(self, name: str = "admin"):
        """The client TLS context of identity `name` (None when the daemons speak plaintext)."""
        from node.security.tls import client_context

        return client_context(self.credentials()[name]) if self.secure else None

    def _security_keys(self, h: Host, daemon: str) -> dict:
        """The daemon's security config, its certificate shipped to the host first."""
        from node.security import pki

        files = self.credentials()[f"{daemon}@{h.name}"]
        r = self.remotes[h.name]
        r.run(["mkdir", "-p", f"{ROOT}/tls"])
        remote = {"cert": f"{ROOT}/tls/{daemon}.pem", "key": f"{ROOT}/tls/{daemon}.key",
                  "ca": f"{ROOT}/tls/ca.pem"}
        for what, path in remote.items():
            r.put(str(getattr(files, what)), path)
        r.run(["chmod", "600", remote["key"]])
        return {"rpc_authentication": "required", "rpc_encryption": "required",
                "rpc_certificate_file": remote["cert"], "rpc_private_key_file": remote["key"],
                "rpc_ca_certificate_file": remote["ca"], "superuser_acl": pki.ADMIN}

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

    def command(self, host: str, daemon: str) -> str:
        return f"{ROOT}/venv/bin/tessera {daemon} --config {ROOT}/{daemon}.toml"

    def _config(self, h: Host, daemon: str) -> str:
        port = MASTER_PORT if daemon == "master" else TSERVER_PORT
        keys = {"data_dir": self.data_dir(daemon), "rpc_addr": f"{h.address}:{port}",
                "http_port": HTTP_PORTS[daemon],
                # the code probes it fires, collected with its log (node.probes)
                "probes_file": f"{DATA}/logs/{daemon}.probes",
                "masters": [f"{a}:{p}" for a, p in self.master_addrs],
                **self._security_keys(h, daemon), **self.flags}
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

    def configure(self, h: Host) -> None:
        for d in self.daemons(h.name):
            self.remotes[h.name].run(["tee", f"{ROOT}/{d}.toml"],
                                     stdin=self._config(h, d).encode())

    async def open_clients(self, workload, names: dict[str, str], binds: list[str] | None,
                           op_timeout: float):
        """The test table created and writable, then the workload's clients over one
        TesseraClient (closed with them)."""
        from harness.tessera_clients import accept_test_table, workload_clients
        from node.client import TesseraClient

        client = TesseraClient(self.master_addrs, timeout=min(op_timeout, 10.0 * self.time_scale),
                               tls=self.tls("client"), time_scale=self.time_scale)
        self.log("waiting for the cluster to accept the test table")
        try:
            locs = await accept_test_table(client, workload.tablets, min(3, len(self.hosts)))
        except BaseException:
            await client.close()
            raise
        clients, close_sessions = workload_clients(client, "test", names, binds, workload)

        async def close():
            try:
                return await close_sessions()
            finally:
                await client.close()

        return clients, close, {t.partition.bucket: t.tablet_id for t in locs.tablets}

    def end_checks(self) -> list[tuple[str, object]]:
        from harness.masters_check import check_masters
        from node.tools.convergence import check_convergence

        return [("convergence", lambda: check_convergence(self)),
                ("masters", lambda: check_masters(self))]

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
            self.configure(h)
            self.start(host, "master")

        async def join() -> str:
            client = TesseraClient(current, timeout=5.0 * self.time_scale, tls=self.tls(),
                                   time_scale=self.time_scale)
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
            client = TesseraClient(self.master_addrs, timeout=10.0 * self.time_scale,
                                   tls=self.tls(), time_scale=self.time_scale)
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
            rpc, out = RpcClient(connect_timeout=1.0, tls=self.tls()), {}
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

    def tablet_leaders(self) -> dict[str, str]:
        """tablet id -> host of its current leader, as the tablet servers report it."""
        from node.protocol import ServerStatus

        leaders, terms = {}, {}
        for host, st in self.ask_each(self.hosts, "tserver", "ts.status", ServerStatus).items():
            for t in st.tablets:
                if t.role == "LEADER" and t.term >= terms.get(t.tablet_id, -1):
                    leaders[t.tablet_id], terms[t.tablet_id] = host, t.term
        return leaders

    INTRUDER_ROWS: ClassVar[int] = 128  # a session's result bound (Limits): one full window
    INTRUDER_S: ClassVar[float] = 15.0  # one start's attack, at most (a stalled leader waits)

    def intrude_sessions(self, step: str, groups: list[str], sessions: int) -> dict:
        """As the `intruder` user (README "Security": a client holding a user's credentials),
        at the leader of each tablet in `groups`, against session ids 1..`sessions` (a
        session's id is its OpenSession's log index, so the workloads' are small; for a flood,
        how many to open):
        - poison: into each session, a one-write probe at seq 1, then, if the answer (STALE_SEQ)
          names the seq below which the owner's results are forgotten, INTRUDER_ROWS writes to
          the intruder's own keys from there: seqs the owner has not used yet would keep the
          intruder's ok, and the owner's writes at those seqs would be answered from it, never
          applied;
        - close: CloseSession into each session;
        - flood: `sessions` OpenSessions of its own, which must evict no one else's.
        Every step also makes, at each tablet, calls a user may not make (OVERREACH: a tablet
        copy session, which would hand it the tablet's files and pin them, and a leader
        step-down), each with a body harmless if it were run.
        What came back, counted: `foreign_applied` is the number of ops applied in a session
        the intruder did not open (anything above 0 is the engine's fault); `refused` those
        answered NOT_OWNER or NOT_AUTHORIZED; `no_session` those that named no session;
        `overreach_refused` the forbidden calls answered NOT_AUTHORIZED and `overreached` those
        a server answered otherwise (it ran them past its authorization: the engine's fault)."""
        import asyncio
        import functools

        from node.protocol import (
            Ack,
            BatchResult,
            BeginCopySession,
            CopySession,
            LeaderStepDown,
            OpResult,
            Write,
            WriteBatch,
        )
        from node.rpc import ErrorCode, RpcClient, RpcError
        from node.security import pki
        from node.tablet.ops import CloseSession, OpenSession, Rejection
        from node.tablet.ops import Write as Put

        leaders = self.tablet_leaders()
        by_name = {h.name: h for h in self.hosts}
        opened = self.intruder_sessions
        counts = {"calls": 0, "answered": 0, "foreign_applied": 0, "refused": 0,
                  "no_session": 0, "own_sessions": 0, "no_leader": 0, "overreach_refused": 0,
                  "overreached": 0}

        def tally(result) -> None:
            if result.ok:
                counts["foreign_applied"] += 1
            elif result.error == Rejection.NOT_OWNER:
                counts["refused"] += 1
            elif result.error == Rejection.NO_SESSION:
                counts["no_session"] += 1

        async def ask(rpc, addrs, method, req, reply):
            """At the first of `addrs` (the leader first, if one is known) that takes the call;
            a server's refusal (NOT_LEADER, NOT_AUTHORIZED) is an answer."""
            counts["calls"] += 1
            answered = False
            for addr in addrs:
                try:
                    out = await rpc.call(addr, method, req, reply, to_uuid="", timeout=2.0)
                except RpcError as e:
                    answered |= e.code not in (ErrorCode.NETWORK, ErrorCode.DEADLINE_EXCEEDED)
                    if e.code == ErrorCode.NOT_AUTHORIZED:
                        counts["refused"] += 1
                        break
                    continue
                counts["answered"] += 1
                return out
            counts["answered"] += answered
            return None

        async def overreach(rpc, addrs, tablet) -> None:
            """The calls of OVERREACH at the first of `addrs` that answers. The server checks
            authorization before it reads the body, so any answer but NOT_AUTHORIZED (a
            follower's NOT_LEADER too) means the call got past it."""
            for method, req, reply in ((
                    "ts.begin_copy_session", BeginCopySession(tablet, "intruder"), CopySession),
                    ("ts.leader_step_down", LeaderStepDown(tablet), Ack)):
                counts["calls"] += 1
                for addr in addrs:
                    try:
                        await rpc.call(addr, method, req, reply, to_uuid="", timeout=2.0)
                    except RpcError as e:
                        if e.code in (ErrorCode.NETWORK, ErrorCode.DEADLINE_EXCEEDED):
                            continue
                        counts["answered"] += 1
                        counts["overreach_refused" if e.code == ErrorCode.NOT_AUTHORIZED
                               else "overreached"] += 1
                        break
                    counts["answered"] += 1
                    counts["overreached"] += 1
                    break

        async def attack() -> None:
            rpc = RpcClient(connect_timeout=1.0, tls=self.tls(pki.INTRUDER))
            try:
                async with asyncio.timeout(self.INTRUDER_S):
                    await each_tablet(rpc)
            except TimeoutError:  # leaders that take calls and cannot commit (a partition)
                counts["cut_short"] = True
            finally:
                await rpc.close()

        async def each_tablet(rpc) -> None:
            for tablet in groups:
                host = by_name.get(leaders.get(tablet, ""))
                if host is None:
                    counts["no_leader"] += 1
                # the leader first, then the others: a leader killed since it was looked up
                # refuses the connection, and a follower's NOT_LEADER still shows the servers
                # took the intruder's call
                targets = [host, *(h for h in self.hosts if h is not host)] if host else self.hosts
                call = functools.partial(ask, rpc, [(h.address, TSERVER_PORT)
                                                    for h in targets])

                await overreach(rpc, [(h.address, TSERVER_PORT) for h in targets], tablet)
                own = opened.setdefault(tablet, set())
                if step == "flood":
                    for _ in range(sessions):
                        res = await call("ts.write", Write(tablet, OpenSession()), OpResult)
                        if res is not None and res.result.ok:
                            own.add(res.result.value)
                    counts["own_sessions"] += len(own)
                    continue
                for sid in (s for s in range(1, sessions + 1) if s not in own):
                    if step == "poison":
                        # a probe at seq 1; a STALE_SEQ answer names the owner's frontier,
                        # and the window goes there, just ahead of its next writes
                        seq = 1
                        for n in (1, self.INTRUDER_ROWS):
                            rows = [Put(f"intruder-{sid}-{seq + i}", i) for i in range(n)]
                            res = await call("ts.write_batch",
                                             WriteBatch(tablet, rows, sid, seq), BatchResult)
                            for r in res.results if res is not None else ():
                                tally(r)
                            frontier = re.search(r"< (\d+)", res.results[0].detail) if (
                                res is not None and res.results[0].error
                                == Rejection.STALE_SEQ) else None
                            if frontier is None:
                                break
                            seq = int(frontier.group(1))
                    else:
                        res = await call("ts.write", Write(tablet, CloseSession(), sid, 1),
                                         OpResult)
                        if res is not None:
                            tally(res.result)

        asyncio.run(attack())
        return counts

    def disk_layout(self):
        """A tablet server's WAL segments (a replica: its tablet's directory) and consensus
        metadata (a replica: the file, named by its tablet), with the aimed newest-flip."""
        from nemeses.disk import DiskLayout

        return DiskLayout(daemon="tserver", root=self.data_dir("tserver"),
                          files=(("wals", "wal", "dir"), ("consensus-meta", "cmeta", "name")),
                          modes=("bitflip", "bitflip", "truncate", "newest-flip"),
                          log=f"{DATA}/logs/tserver.log")

    def damaged(self, host: str, done: dict) -> dict:
        """How the restarted server treats the damaged tablet: FAILED naming the file, or
        RUNNING when the damage was a torn tail that bootstrap may legitimately cut off."""
        import time

        from node.protocol import ServerStatus

        tablet = done["group"]
        target = [h for h in self.hosts if h.name == host]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st = self.ask_each(target, "tserver", "ts.status", ServerStatus).get(host)
            rep = next((t for t in st.tablets if t.tablet_id == tablet), None) if st else None
            if rep is not None:  # the server's uuid: how its leaders' log lines name it
                return {"tablet": tablet, "state": rep.state, "error": rep.error, "uuid": st.uuid}
            time.sleep(0.2)
        return {"tablet": tablet, "state": "UNKNOWN", "error": "server did not answer"}

    def membership(self):
        from harness.tessera_members import TabletMembers

        return TabletMembers(self)

    def cannot_spare(self) -> set[str]:
        """Tablets some replica reports with fewer than three voters in its active config, or
        with a config change in flight: the membership nemesis removed one of their replicas
        (once, a WAL damaged in a tablet shrunk to two voters left it without a leader,
        which the convergence check called a bug)."""
        from node.protocol import ServerStatus

        statuses = self.ask_each(self.hosts, "tserver", "ts.status", ServerStatus)
        return {t.tablet_id for st in statuses.values() for t in st.tablets
                if t.state == "RUNNING" and (t.config != t.committed_config
                                             or sum(kind == "VOTER" for _, kind in t.config) < 3)}

    def log_files(self, host: str) -> list[str]:
        """Every daemon's log, a master's removed during the run included."""
        kinds = ["master"] if host in self._had_master else []
        return [f"{DATA}/logs/{d}.{ext}" for d in [*kinds, "tserver"] for ext in ("log", "probes")]

    def _torn_down(self) -> None:
        self.added_masters.clear()


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

