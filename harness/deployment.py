"""The DB adapter, in the spirit of Jepsen's: how to install, start, stop, crash, pause and
inspect a system under test on a set of hosts, how the workloads' clients reach it, and what
the harness checks of it at the end of a run.

`Deployment` is the one place a system plugs in: it holds what every system shares (the install
from a wheelhouse, daemons under setsid with pid files, signals, the watchdog's revivals, log
collection, teardown), and a subclass in the system's own package (harness/systems/<name>/)
says what is particular to its system; harness/systems/__init__.py registers it for
`tessera test --db`. docs/adding-a-db.md walks through writing one.

Daemons run under `setsid` with pid files, so they outlive the SSH session that started them and
every later command finds them by pid.
"""

from __future__ import annotations

import shlex
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from harness import pidfile
from harness.cluster import Host
from harness.control import Remote
from harness.wheelhouse import HOST_EXTRAS, PYTHON_VERSION, check_python, wheels_digest

ROOT = "/opt/tessera"  # where a host's install lives, whatever the system
DATA = "/var/lib/tessera"  # where its daemons keep their data


async def first_write(probe, system: str, timeout: float) -> None:
    """Until a write through `probe` (a client of one node) commits: the system elected a
    leader and accepts ops. RuntimeError after `timeout` seconds, with the last error. The
    probe is closed either way."""
    import asyncio

    from workloads.outcomes import OpFailed, OpUnknown

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


class Holds:
    """Which fault package holds which daemon killed or paused (`held`: (host, daemon) ->
    package): no other fault may start, kill, pause or replace it until that package lets it
    go (once, a disk fault restarted a daemon the kill fault held down, and replaced a
    paused one with a fresh one, while the history showed the kill or pause in force). A class
    needs `held`, `_targets(host, daemon)` and `start(host, daemon, by)`."""

    held: dict

    def _targets(self, host: str, daemon: str | None) -> list[str]:
        raise NotImplementedError

    def start(self, host: str, daemon: str | None = None, by: str = "") -> dict[str, str]:
        raise NotImplementedError

    _claims = threading.Lock()  # faults run in threads of their own: check and hold at once

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

    def give_back(self, host: str, daemon: str | None, by: str) -> dict[str, str]:
        """Start what fault `by` held killed, then release it: in this order, so no other fault
        can claim a daemon between the release and its start. One did: a pause claimed a
        tablet server the kill was about to restart, stopped no process, and the kill's restart
        then left the server to the pause, down for the rest of the run while the history said
        paused. Returns what start left alone (held by another fault)."""
        try:
            return self.start(host, daemon, by=by)
        finally:
            self.release(host, daemon, by)

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
    # no time.sleep, which fails with EINVAL), "transfers" (step_down_leader(): a leader made
    # to hand over or step down).
    offers: ClassVar[frozenset[str]] = frozenset()
    workloads: ClassVar[tuple[str, ...]] = ()  # the workloads its client can run
    client_modes: ClassVar[tuple[str, ...]] = ("node-bound",)
    # The node-log checker's rules (reports.checkers.logs), recorded in test.json.
    log_rules: ClassVar[tuple[dict, ...]] = ()

    @classmethod
    def drawn_flags(cls, workload: str) -> dict[str, tuple[object, ...]]:
        """Settings a user chooses by --flag that `tessera test-all` draws for each run of
        `workload` from its seed when the matrix was not given them, so a nightly matrix meets
        each one a user would set (MariaDB's topology and isolation level): key -> the values
        drawn among. None by default."""
        return {}

    @classmethod
    def check_flags(cls, flags: dict) -> None:
        """ValueError for a --flag the system's daemons would not take (checked before any
        host is touched); by default every key passes to the daemons' config as it is."""

    @classmethod
    def claimed_model(cls, flags: dict) -> str:
        """The consistency model the system claims when run with `flags`: what a transactional
        history (list-append, rw-register) is judged against unless the run names another
        (`--consistency-model`). Strict serializability by default: Tessera's claim, and
        etcd's."""
        from reports.checkers.consistency import DEFAULT_MODEL

        return DEFAULT_MODEL

    @classmethod
    def check_workload(cls, workload) -> None:
        """ValueError for a workload's options the system's client cannot honour (checked
        before any host is touched); by default every workload the system runs is taken."""

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

    def step_down_leader(self, tablet: str | None, graceful: bool, pick: int) -> dict:
        """Offered as "transfers": the leader of `tablet` (None: of the masters, or of the one
        group) hands over to a voter drawn by `pick` when `graceful`, else steps down; what
        was done, with "observed" (nemeses.observe) or "skipped" and why."""
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

    def repair(self, host: str, done: dict, by: str = "") -> dict | None:
        """"disk": at the heal, mend the damage `done` as an operator would; what was done, or
        None when the damage stays for the run. `by`: the fault holding the daemon meanwhile
        (Holds), whose own the restarts are."""
        return None

    def membership(self):
        """"membership": the system's members as the membership nemesis changes them
        (nemeses.membership.Members)."""
        raise NotImplementedError

    def add_master(self, host: str, timeout: float = 60.0) -> str:
        """"masters": add `host`'s master to the masters' quorum; what was done."""
        raise NotImplementedError

    def remove_master(self, host: str) -> str:
        """"masters": remove `host`'s master from the masters' quorum; what was done."""
        raise NotImplementedError

    def replica_groups(self):
        """"tablets": the system's replication groups as the replica-group races see and change
        them (nemeses.groups.ReplicaGroups)."""
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
        self.start_cluster()

    def start_cluster(self) -> None:
        """The first start of every host's daemons, once installed and configured: all at
        once by default; a system whose members must come up in an order overrides it."""
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
        want = {"deps": wheels_digest(deps), "tessera": wheels_digest([tessera])}
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
                pid, log = self.pid_file(d), f"{DATA}/logs/{d}.log"
                cmd = f"env {env} {self.command(host, d)} >>{log} 2>&1"
                # Already running? Leave it. Otherwise the shell records its pid, then becomes the
                # daemon (exec), in a new session so it outlives this SSH connection.
                script = (f"if {pidfile.live(pid)}; then exit 0; fi; "
                          f"{pidfile.remove(pid)}; "
                          f"setsid sh -c {shlex.quote(f'{pidfile.record(pid)}; exec {cmd}')} "
                          f"</dev/null >/dev/null 2>&1 & "
                          f"for i in $(seq 200); do [ -s {pid} ] && exit 0; sleep 0.05; done; "
                          f"echo '{self.name} {d}: cannot start: no pid file after 10 s' | tee -a {log} >&2; "
                          f"exit 1")  # in the daemon's log too, where the log checker looks
                self.remotes[host].sh(script)
        return deferred

    def _signal(self, host: str, daemon: str | None, sig: str) -> None:
        for d in self._targets(host, daemon):
            pid = self.pid_file(d)
            self.remotes[host].sh(pidfile.signal(pid, sig))

    def kill(self, host: str, daemon: str | None = None) -> None:
        with self._locks[host]:
            self.down.update((host, d) for d in self._targets(host, daemon))
            self._signal(host, daemon, "KILL")
            for d in self._targets(host, daemon):  # wait until gone, so a restart cannot race it
                pid = self.pid_file(d)
                self.remotes[host].sh(f"for i in $(seq 300); do {pidfile.live(pid)} || exit 0; "
                                      f"sleep 0.05; done")

    def pause(self, host: str, daemon: str | None = None) -> None:
        self._signal(host, daemon, "STOP")

    def resume(self, host: str, daemon: str | None = None) -> None:
        self._signal(host, daemon, "CONT")

    def running(self, host: str, daemon: str) -> bool:
        pid = self.pid_file(daemon)
        res = self.remotes[host].sh(pidfile.live(pid), check=False)
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
            self.remotes[h.name].run(["rm", "-rf", f"{DATA}/logs", *self.run_files(), *(
                p for d in self.all_daemons
                for p in (self.data_dir(d), self.pid_file(d), f"{self.pid_file(d)}.start"))])
            self.remotes[h.name].run(["mkdir", "-p", f"{DATA}/logs"])
        self._each(stop)
        self._torn_down()

    def run_files(self) -> list[str]:
        """Files under DATA a run writes besides its daemons' data dirs, pid files and logs
        (an init script, say): teardown removes them with those, so a run leaves nothing."""
        return []

    def _torn_down(self) -> None:
        """What a subclass forgets once its daemons are gone."""
