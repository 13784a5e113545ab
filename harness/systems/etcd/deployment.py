"""The third system under test: etcd (Debian's etcd-server, 3.4), one member per host, as
Jepsen's etcd suite runs it (jepsen-io/etcd, db.clj), and a client at etcd's own API.

The client speaks etcd's documented v3 JSON gateway (`POST /v3/kv/range`, `/v3/kv/txn`, ...)
over aiohttp, an asyncio HTTP client: the harness's workers are coroutines on one event loop,
and the gateway is the API etcd documents for clients without gRPC, so no second runtime (gRPC's
threads) sits between a worker and the wire. docs/decisions/etcd-json-gateway.md says more.

Clients are bound to nodes, thread t to member t mod n, as Jepsen binds them: each talks only
to the member on its host, which forwards to the leader. Reads are linearizable unless
`--flag serializable=true` (etcd's `serializable` range option: a member answers from its own
state).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import ClassVar

from harness.cluster import Host
from harness.deployment import DATA, Deployment, bound_clients, first_write
from harness.systems.etcd.api import GROUP, EtcdError
from harness.systems.etcd.transfers import step_down_leader
from reports.checkers.logs import rule
from workloads.outcomes import OpFailed, OpUnknown

CLIENT_PORT, PEER_PORT = 2379, 2380
DEFAULT_BINARY = "/usr/bin/etcd"
# etcd flags the harness sets itself, from the host list; a --flag may not change them.
OWN_FLAGS = frozenset({
    "name", "data-dir", "listen-client-urls", "advertise-client-urls", "listen-peer-urls",
    "initial-advertise-peer-urls", "initial-cluster", "initial-cluster-state",
    "initial-cluster-token", "logger", "log-outputs"})
# --flag keys that configure the harness's side, not the daemon.
HARNESS_FLAGS = frozenset({"serializable", "etcd_binary"})
# gRPC codes etcd documents as not applied (jepsen-io/etcd client.clj's definite errors):
# NOT_FOUND (a lease or member that is not there), INVALID_ARGUMENT (duplicate key, too many
# ops, too large), OUT_OF_RANGE (compacted), RESOURCE_EXHAUSTED (too many requests, no space),
# FAILED_PRECONDITION (membership refused). UNAVAILABLE (leader changed, request timed out)
# and UNKNOWN may have been applied.
DEFINITE_CODES = frozenset({3, 5, 8, 9, 11})


def b64(s: str | bytes) -> str:
    return base64.b64encode(s.encode() if isinstance(s, str) else s).decode()


def unb64(s: str) -> bytes:
    return base64.b64decode(s)


def known_flags(binary: str) -> set[str]:
    """The flag names `etcd --help` lists."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"^\s+--([a-z0-9-]+)", out.stdout + out.stderr, re.M))


def daemon_flags(flags: dict) -> dict[str, str]:
    """The --flag keys meant for etcd, as etcd spells them: the CLI hands keys over with
    underscores (experimental_initial_corrupt_check), etcd's flags have dashes; booleans in
    Go's spelling."""
    return {k.replace("_", "-"): str(v).lower() if isinstance(v, bool) else str(v)
            for k, v in flags.items() if k not in HARNESS_FLAGS}


@dataclass
class EtcdDB(Deployment):
    name: ClassVar[str] = "etcd"
    data_daemon: ClassVar[str] = "etcd"
    all_daemons: ClassVar[tuple[str, ...]] = ("etcd",)
    offers: ClassVar[frozenset[str]] = frozenset({"leaders", "disk", "membership", "admin",
                                                   "transfers"})
    workloads: ClassVar[tuple[str, ...]] = ("register", "set", "list-append", "lock-set",
                                            "lock-etcd-set", "watch")
    log_rules: ClassVar[tuple[dict, ...]] = (
        # etcd-io/etcd#21966, open upstream and in Debian's 3.4.23: a member applying its own
        # removal panics in a Status call that arrives in that instant (IsLocalMemberLearner
        # finds no local member) instead of exiting cleanly. A note on a member the membership
        # nemesis removed, first so the panic rules below do not take its lines; anywhere else,
        # an error (docs/findings/etcd)
        rule("removed-member-panic", "failed to find local ID in cluster members",
             "etcd panicked answering a status call while it applied its own removal "
             "(etcd-io/etcd#21966)", severity="note", removed_only=True),
        # jepsen-io/etcd's crash pattern: a removed member restarted logs "couldn't find local
        # name", which is not a crash
        rule("fatal", r"\"level\":\"(fatal|panic)\"(?!.*couldn't find local name)",
             "etcd logged a fatal or panic line", after_damage=True),
        # a Go panic, or a runtime fatal error (a SIGBUS reading bbolt's mmap prints
        # "fatal error: fault" and "[signal SIGBUS: ...")
        rule("panic", r"^(panic: |fatal error: |\[?signal SIG)", "etcd panicked or crashed",
             after_damage=True),
        rule("start-failure", r"^etcd etcd: ", "an etcd member could not start"),
    )

    @classmethod
    def check_flags(cls, flags: dict) -> None:
        binary = str(flags.get("etcd_binary", DEFAULT_BINARY))
        if "serializable" in flags and str(flags["serializable"]).lower() not in ("true", "false"):
            raise ValueError(f"--flag serializable= takes true or false, not {flags['serializable']!r}")
        etcd_flags = daemon_flags(flags)
        if not etcd_flags:
            return
        if shutil.which(binary) is None:
            raise ValueError(f"--db etcd: no etcd binary at {binary} on this machine to check "
                             "--flag against (make setup installs etcd-server; or --flag "
                             "etcd_binary=PATH)")
        known = known_flags(binary)
        for key in etcd_flags:
            if key in OWN_FLAGS:
                raise ValueError(f"--flag {key}: set by the harness from the host list")
            if key not in known:
                raise ValueError(f"--flag {key}: not a flag `etcd --help` lists (e.g. "
                                 "snapshot-count, heartbeat-interval, election-timeout)")

    @property
    def binary(self) -> str:
        return str(self.flags.get("etcd_binary", DEFAULT_BINARY))

    @property
    def serializable(self) -> bool:
        return str(self.flags.get("serializable", "false")).lower() == "true"

    # hosts whose member the membership nemesis removed (and wiped), or is removing, and not
    # yet added back: no watchdog revives one whose removal it applied and exited on
    removed: set[str] = field(default_factory=set)
    # host -> the --initial-cluster its `member add` returned, for a member joining a running
    # cluster
    joining: dict[str, str] = field(default_factory=dict)

    def daemons(self, host: str) -> list[str]:
        return [] if host in self.removed else ["etcd"]

    def command(self, host: str, daemon: str) -> str:
        h = next(h for h in self.hosts if h.name == host)
        return " ".join([self.binary, *self.args(h, self.data_dir("etcd"))])

    def args(self, h: Host, data_dir: str) -> list[str]:
        """The member's flags: its name, data dir and URLs on its test address, the initial
        cluster from the host list (ignored by etcd once the data dir has a member), zap JSON
        logs on stderr (the log checker's rules read them), then every --flag. A member added
        during the run (`EtcdMembers.add`) joins the existing cluster its `member add` named."""
        cluster = ",".join(f"{o.name}=http://{o.address}:{PEER_PORT}" for o in self.hosts)
        state = "new"
        if h.name in self.joining:
            cluster, state = self.joining[h.name], "existing"
        return [f"--name={h.name}", f"--data-dir={data_dir}",
                f"--listen-client-urls=http://{h.address}:{CLIENT_PORT}",
                f"--advertise-client-urls=http://{h.address}:{CLIENT_PORT}",
                f"--listen-peer-urls=http://{h.address}:{PEER_PORT}",
                f"--initial-advertise-peer-urls=http://{h.address}:{PEER_PORT}",
                f"--initial-cluster={cluster}", f"--initial-cluster-state={state}",
                "--initial-cluster-token=tessera", "--logger=zap", "--log-outputs=stderr",
                *(f"--{k}={v}" for k, v in sorted(daemon_flags(self.flags).items()))]

    def _install(self, h: Host) -> None:
        """etcd is a binary of its own, not in the wheelhouse: present on the host (the netns
        hosts share this machine's), or installed from the host's Debian packages."""
        r = self.remotes[h.name]
        r.run(["mkdir", "-p", f"{DATA}/logs"])
        if self.lazyfs:  # lazyfs (nemeses.lazyfs) runs from the harness's venv on the host
            super()._install(h)
        if r.sh(f"test -x {self.binary}", check=False).exit_status == 0:
            return
        if "etcd_binary" in self.flags:
            raise RuntimeError(f"{h.name}: no etcd binary at {self.binary}")
        res = r.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server "
                   "&& systemctl disable --now etcd 2>/dev/null; test -x /usr/bin/etcd",
                   check=False, timeout=600)
        if res.exit_status != 0:
            raise RuntimeError(f"{h.name}: etcd is not installed and `apt-get install "
                               "etcd-server` failed there; install it, or --flag "
                               "etcd_binary=PATH")

    def configure(self, h: Host) -> None:
        self.remotes[h.name].run(["mkdir", "-p", self.data_dir("etcd"), f"{DATA}/logs"])

    # -- asking the members ------------------------------------------------------------------
    def _post(self, h: Host, path: str, body: dict, timeout: float = 1.0) -> dict | None:
        """The member's answer, or None when it gave none (down, slow, or an error)."""
        try:
            return self.ask(h, path, body, timeout)
        except (OSError, ValueError, EtcdError):
            return None

    def ask(self, h: Host, path: str, body: dict, timeout: float = 5.0) -> dict:
        """One gateway call to `h`'s member: its answer; EtcdError for an error etcd answered,
        OSError when none came."""
        import urllib.error
        import urllib.request

        req = urllib.request.Request(f"http://{h.address}:{CLIENT_PORT}{path}",
                                     data=json.dumps(body).encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as e:  # the gateway's errors come with a status
            data = json.loads(e.read() or b"{}")
        if "code" in data and "header" not in data:
            raise EtcdError(int(data["code"]), str(data.get("message") or data.get("error")))
        return data

    def host(self, name: str) -> Host:
        return next(h for h in self.hosts if h.name == name)

    # -- what nemeses may ask of it --------------------------------------------------------------
    def disk_layout(self):
        """The member's WAL segments and snapshots (member/wal, member/snap: the raft snapshots
        and bbolt's db), one group: etcd is one replication group."""
        from nemeses.disk import DiskLayout

        return DiskLayout(daemon="etcd", root=self.data_dir("etcd"),
                          files=(("member/wal", "etcd-wal", GROUP), ("member/snap", "etcd-snap", GROUP)),
                          log=f"{DATA}/logs/etcd.log")

    def damaged(self, host: str, done: dict, wait_s: float = 10.0) -> dict:
        """RUNNING once the member answers again within `wait_s`; REFUSED when its process
        exited on its own (etcd refused the damaged files, loudly: its last fatal line says
        why), and then it is left down for the heal's `repair`; UNKNOWN when it did neither
        (or another fault killed it meanwhile)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if self._post(self.host(host), "/v3/maintenance/status", {}) is not None:
                return {"group": GROUP, "state": "RUNNING"}
            if (host, "etcd") not in self.down and not self.running(host, "etcd"):
                self.kill(host, "etcd")
                self.removed.add(host)  # out until the repair: no fault or watchdog restarts it
                why = self.remotes[host].sh(  # its last fatal or panic line says why
                    f"grep -E '\"level\":\"(fatal|panic)\"|^panic: |^fatal error: ' "
                    f"{DATA}/logs/etcd.log "
                    f"| tail -n 1", check=False).stdout.strip()
                return {"group": GROUP, "state": "REFUSED", "error": why[-500:]}
            time.sleep(0.2)
        return {"group": GROUP, "state": "UNKNOWN", "error": "neither answered nor exited"}

    def repair(self, host: str, done: dict, by: str = "") -> dict | None:
        """A member that refused its damaged files is replaced, as etcd's docs tell an operator:
        `member remove`, a wiped data dir, `member add`, a start joining the cluster."""
        if (done.get("replica") or {}).get("state") == "RUNNING":
            return None
        members = self.membership()
        ids = {m.get("name"): m["ID"] for m in members.list() or []}
        if host in ids:
            members.remove((GROUP, ids[host], host))
        members.add((GROUP, "", host), timeout=60.0, by=by)
        return {"replaced": host}

    def membership(self) -> EtcdMembers:
        return EtcdMembers(self)

    def wipe(self, host: str) -> None:
        """Empty the member's data dir, which may be a lazyfs mount point (whose control file
        stays)."""
        d = self.data_dir("etcd")
        self.remotes[host].sh(f"mkdir -p {d}; find {d} -mindepth 1 -maxdepth 1 "
                              f"! -name .lazyfs-control -exec rm -rf {{}} +")

    ADMIN: ClassVar[tuple[str, ...]] = ("compact", "defrag")

    def admin(self, host: str, pick: int) -> dict:
        """Jepsen's admin faults: compaction to the member's current revision (physical), or
        defragmentation of its backend. What etcd answered, an error included."""
        action = self.ADMIN[pick % len(self.ADMIN)]
        h = self.host(host)
        try:
            if action == "compact":
                rev = int(self.ask(h, "/v3/kv/range", {"key": b64("_"), "count_only": True},
                                   )["header"]["revision"])
                self.ask(h, "/v3/kv/compaction", {"revision": str(rev), "physical": True},
                         timeout=30.0)
                return {"action": action, "host": host, "revision": rev}
            self.ask(h, "/v3/maintenance/defragment", {}, timeout=60.0)
            return {"action": action, "host": host}
        except (OSError, ValueError, EtcdError) as e:
            return {"action": action, "host": host, "error": f"{type(e).__name__}: {e}"}

    def step_down_leader(self, tablet: str | None, graceful: bool, pick: int) -> dict:
        """etcd's MoveLeader to a follower drawn by `pick` (harness.systems.etcd.transfers):
        etcd has no step-down without a successor, so an abrupt draw moves leadership too."""
        return step_down_leader(self, pick)

    def statuses(self, timeout: float = 1.0) -> dict[str, dict]:
        """host name -> the member's maintenance status (its view of the leader and term), for
        the members that answered within `timeout` seconds."""
        with ThreadPoolExecutor(len(self.hosts)) as pool:
            answers = pool.map(
                lambda h: (h.name, self._post(h, "/v3/maintenance/status", {}, timeout)),
                self.hosts)
            return {n: st for n, st in answers if st is not None}

    def leader_master(self) -> str | None:
        """The host of the member that the members answering in the highest term name leader."""
        statuses = self.statuses()
        if not statuses:
            return None
        ids = {st["header"]["member_id"]: host for host, st in statuses.items()}
        named = [st for st in statuses.values() if st.get("leader") not in (None, "0")]
        if not named:
            return None  # none knows a leader (etcd leaves a zero leader out)
        return ids.get(max(named, key=lambda st: int(st.get("raftTerm", 0)))["leader"])

    def tablet_leaders(self) -> dict[str, str]:
        leader = self.leader_master()
        return {GROUP: leader} if leader else {}

    # -- clients -----------------------------------------------------------------------------
    async def open_clients(self, workload, names: dict[str, str], binds: list[str] | None,
                           op_timeout: float, timeout: float = 60.0):
        """Once a write through the first member commits: one client per worker thread, bound
        to its member."""
        self.log("waiting for etcd to elect a leader and commit a write")
        await first_write(EtcdClient(self.hosts[0].address, self.hosts[0].name, op_timeout),
                          "etcd", timeout)
        clients, close = bound_clients(binds, names, lambda address, node: EtcdClient(
            address, node, op_timeout, serializable=self.serializable))
        return clients, close, {0: GROUP}

    # -- end of run --------------------------------------------------------------------------
    def end_checks(self) -> list[tuple[str, object]]:
        return [("convergence", self.converge)]

    def converge(self, timeout: float = 30.0, interval: float = 0.5) -> dict:
        """Every member's KV hash at one revision (HashKV), once all members answer at the
        same latest revision: equal, or not."""
        deadline = time.monotonic() + timeout
        while True:
            result = compare_members(self.hash_kvs(), [h.name for h in self.hosts])
            if result["verdict"] != "unknown" or time.monotonic() > deadline:
                return result
            time.sleep(interval)

    def hash_kvs(self) -> dict[str, dict]:
        """host name -> {"revision", "latest", "hash", "compact_revision"}: each answering
        member's KV hash (HashKV) up to the revision every answering member has reached (the
        lowest of their latest). HashKV is asked through etcdctl: the 3.4 JSON gateway routes
        /v3/maintenance/hash to Hash, the whole backend's hash, which is not the KV history."""
        heads = {}
        for h in self.hosts:
            st = self._post(h, "/v3/kv/range", {"key": b64("_"), "serializable": True,
                                                 "count_only": True})
            if st is not None:
                heads[h.name] = int(st["header"]["revision"])
        if not heads:
            return {}
        rev = min(heads.values())
        endpoints = ",".join(f"http://{h.address}:{CLIENT_PORT}" for h in self.hosts
                             if h.name in heads)
        try:
            out = subprocess.run(
                [self.etcdctl, f"--endpoints={endpoints}", "--command-timeout=5s",
                 "endpoint", "hashkv", f"--rev={rev}", "-w", "json"],
                capture_output=True, text=True, timeout=30).stdout
            answers = json.loads(out or "[]")
        except (OSError, subprocess.TimeoutExpired, ValueError):
            return {}
        by_url = {f"http://{h.address}:{CLIENT_PORT}": h.name for h in self.hosts}
        return {by_url[a["Endpoint"]]: {
            "revision": rev, "latest": heads[by_url[a["Endpoint"]]],
            "hash": a["HashKV"]["hash"],
            "compact_revision": a["HashKV"].get("compact_revision", 0)}
            for a in answers if a.get("Endpoint") in by_url and "HashKV" in a}

    @property
    def etcdctl(self) -> str:
        return shutil.which("etcdctl") or "/usr/bin/etcdctl"

    def _torn_down(self) -> None:
        self.removed.clear()
        self.joining.clear()


@dataclass
class EtcdMembers:
    """etcd's members for the membership nemesis (nemeses.membership.Members), changed as
    Jepsen's member nemesis changes them: a member removed through another member, then killed
    and wiped; one added by `member add` (a voter), then started empty with
    `--initial-cluster-state=existing` and the cluster the add returned. Unlike Jepsen's, a
    removal waits for every other member to answer and keeps three, so it alone costs no
    quorum (nemeses.membership's rule for every system)."""

    db: EtcdDB
    why_none: str = ""  # what the last `removable` found lacking, when it found nothing

    def list(self) -> list[dict] | None:
        """The members, as the first answering member lists them; None if none answers."""
        for h in self.db.hosts:
            got = self.db._post(h, "/v3/cluster/member/list", {}, timeout=2.0)
            if got is not None:
                return got.get("members") or []
        return None

    def _via(self, host: str, attempt: int = 0) -> Host:
        """A member to ask that is not `host`'s (nor removed): the attempt-th, round the
        others, so a retry asks another member than the one that just left a change hanging
        (one restarted a moment ago, or cut off from the leader)."""
        others = [h for h in self.db.hosts if h.name != host and h.name not in self.db.removed]
        return others[attempt % len(others)]

    def removable(self) -> list[tuple[str, str, str]]:
        members = self.list() or []
        started = [m for m in members if m.get("name")]
        if len(started) != len(members) or len(members) <= 3:
            # a member added and not yet started, or too few to spare one
            self.why_none = (f"{len(members)} members, {len(members) - len(started)} not started"
                             if members else "no member answered")
            return []
        answering = set(self.db.statuses())
        names = [m["name"] for m in members]
        silent = sorted(set(names) - answering)
        self.why_none = f"members not answering: {', '.join(silent)}"
        return sorted((GROUP, m["ID"], m["name"]) for m in members
                      if set(names) - {m["name"]} <= answering)

    def present(self, member: tuple[str, str, str]) -> bool | None:
        """Whether the member list (as a member still in it answers) has the member; None
        when no member answers."""
        members = self.list()
        return None if members is None else any(m.get("ID") == member[1] for m in members)

    def remove(self, member: tuple[str, str, str], timeout: float = 30.0) -> dict:
        """`member remove` through another member, until the member list no longer has it (a
        lost reply is asked again, of the next member; NOT_FOUND means done); then it is killed
        and wiped."""
        _, member_id, host = member
        deadline = time.monotonic() + timeout
        self.db.removed.add(host)  # from now: a member that applied its removal exits
        for attempt in itertools.count():
            members = self.list()
            if members is not None and not any(m["ID"] == member_id for m in members):
                break
            try:
                self.db.ask(self._via(host, attempt), "/v3/cluster/member/remove",
                            {"ID": member_id}, timeout=10.0)
            except EtcdError as e:
                if e.code == 5:  # NOT_FOUND: removed already
                    break
                if time.monotonic() > deadline:
                    raise
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.5)
        self.db.kill(host, "etcd")
        self.db.joining.pop(host, None)
        self.db.wipe(host)
        return {"member_id": member_id}

    def add(self, member: tuple[str, str, str], timeout: float, by: str = "") -> dict:
        """`member add` through a member in the cluster (retried while etcd refuses, as an
        unhealthy cluster makes it), the host's data dir wiped just before it; then the member
        started, done when it answers. A member listed already is only started, never wiped:
        it is a lost reply's add (the member may have started and taken entries since), or a
        removal that raised and never applied (the member has all its data). Wiping either
        loses entries its leader knows it holds, and etcd panics at the leader's next
        heartbeat ("tocommit(N) is out of range"): a fault of the harness's, not etcd's.
        `by`: the fault holding the member's daemon while it is replaced (the disk fault's
        repair), whose own start this is."""
        host = member[2]
        h = self.db.host(host)
        peer = f"http://{h.address}:{PEER_PORT}"
        deadline = time.monotonic() + timeout
        while True:
            try:
                members = self.list()
                if members is None:
                    raise OSError("no member answered")
                if not any(peer in m.get("peerURLs", []) for m in members):
                    self.db.kill(host, "etcd")  # a removal that raised left it running
                    self.db.wipe(host)  # the removed member's data: the new one starts empty
                    members = self.db.ask(self._via(host), "/v3/cluster/member/add",
                                          {"peerURLs": [peer]}, timeout=10.0)["members"]
                break
            except (OSError, ValueError, KeyError, EtcdError) as e:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member add {host}: {e}") from e
                time.sleep(1.0)
        self.db.joining[host] = ",".join(
            f"{m.get('name') or host}={u}" for m in members for u in m.get("peerURLs", []))
        self.db.removed.discard(host)
        self.db.start(host, "etcd", by=by)
        while self.db._post(h, "/v3/maintenance/status", {}) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd member {host} added but does not answer")
            time.sleep(0.5)
        return {"peer": peer}


def compare_members(hashes: dict[str, dict], hosts: list[str]) -> dict:
    """The convergence rule for etcd: every member answering, all at one latest revision, and
    their KV hashes at it equal. Pure."""
    result = {"checker": "convergence", "members": hashes, "errors": [],
              "unreachable": [h for h in hosts if h not in hashes]}
    if result["unreachable"]:
        return {**result, "verdict": "unknown", "reason": "some members did not answer"}
    latest = {m["latest"] for m in hashes.values()}
    if len(latest) != 1:
        return {**result, "verdict": "unknown", "reason": f"revisions differ: {sorted(latest)}"}
    by_hash: dict[object, list[str]] = {}
    for h, m in hashes.items():
        by_hash.setdefault(m["hash"], []).append(h)
    if len(by_hash) == 1:
        return {**result, "verdict": "valid"}
    return {**result, "verdict": "invalid", "errors": [{
        "type": "divergent-state", "groups": {str(k): v for k, v in by_hash.items()},
        "explanation": f"at revision {latest.pop()} the members' KV hashes differ: "
                       + "; ".join(f"{', '.join(hs)}: {k}" for k, hs in sorted(
                           by_hash.items(), key=lambda kv: str(kv[0])))}]}


class EtcdClient:
    """The workloads' client (workloads.base.KVClient) for one etcd member, over its v3 JSON
    gateway. A request that never left (no connection) is definite (OpFailed); after it left,
    a timeout or a dropped connection may still have applied (OpUnknown), as may an error etcd
    does not document as not applied (DEFINITE_CODES). Reads have no effect, so every read
    error is OpFailed. Values are JSON, base64-encoded as the gateway's bytes fields are."""

    def __init__(self, address: str, node: str, timeout: float, serializable: bool = False):
        self.address, self.node, self.timeout = address, node, timeout
        self.serializable = serializable
        self.url = f"http://{address}:{CLIENT_PORT}"
        self._session = None
        self._keepers: dict[str, asyncio.Task] = {}  # lease -> its keepalive task

    async def close(self) -> None:
        for keeper in self._keepers.values():
            keeper.cancel()
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _http(self):
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                # the lock's keepalives go beside a blocked lock request: two connections
                connector=aiohttp.TCPConnector(limit=2))
        return self._session

    async def post(self, path: str, body: dict, idempotent: bool = False) -> dict:
        """One gateway call. Raises OpFailed when it certainly did not apply (or `idempotent`:
        it changes nothing anyway), OpUnknown otherwise."""
        import aiohttp

        fail = OpFailed
        unknown = OpFailed if idempotent else OpUnknown
        try:
            async with self._http().post(self.url + path, json=body) as resp:
                data = await resp.json(content_type=None)
        except aiohttp.ClientConnectorError as e:  # never connected: nothing was sent
            raise fail(f"cannot connect to {self.node}: {e}") from None
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            await self.close()
            raise unknown(f"{self.node}: {type(e).__name__}: {e}") from None
        if isinstance(data, dict) and "code" in data and "header" not in data:
            code, message = int(data["code"]), str(data.get("message") or data.get("error"))
            raise (fail if code in DEFINITE_CODES else unknown)(
                f"{self.node}: etcd {code}: {message}")
        return data

    # -- locks (etcd's lock API on a lease, as Jepsen's lock workloads take them) ----------------
    async def acquire(self, name: str, ttl_s: float) -> tuple[str, str]:
        """(lock key, lease id): a lease of `ttl_s`, kept alive every third of it from now on,
        and etcd's lock `name` on it (which waits for earlier holders). Raises as `post`
        does; a lease granted before the failure is revoked, best effort."""
        lease = (await self.post("/v3/lease/grant", {"TTL": str(max(1, round(ttl_s)))}))["ID"]
        self._keepers[lease] = asyncio.create_task(self._keep_alive(lease, ttl_s / 3))
        try:
            got = await self.post("/v3/lock/lock", {"name": b64(name), "lease": lease})
        except BaseException:
            await self.release(None, lease)
            raise
        return got["key"], lease

    async def _keep_alive(self, lease: str, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            try:
                got = await self.post("/v3/lease/keepalive", {"ID": lease}, idempotent=True)
            except OpFailed:
                continue  # the member is down or slow: the next tick tries again
            if not (got.get("result") or {}).get("TTL"):
                return  # expired: etcd answers without a TTL

    async def release(self, key: str | None, lease: str) -> None:
        """Stop the keepalives, unlock `key` and revoke the lease, each best effort: a lease
        that cannot be revoked expires."""
        keeper = self._keepers.pop(lease, None)
        if keeper is not None:
            keeper.cancel()
        for path, body in ((("/v3/lock/unlock", {"key": key}),) if key else ()) + (
                ("/v3/lease/revoke", {"ID": lease}),):
            try:
                await self.post(path, body)
            except (OpFailed, OpUnknown):
                pass

    async def put_if_held(self, key: str, value, lock_key: str) -> bool:
        """Put `value` at `key` only if `lock_key` still exists (its version is above 0), as
        Jepsen's lock-etcd-set guards its write: whether it applied."""
        data = await self.post("/v3/kv/txn", {
            "compare": [{"target": "VERSION", "result": "GREATER", "key": lock_key,
                         "version": "0"}],
            "success": [{"request_put": {"key": b64(key), "value": b64(json.dumps(value))}}]})
        return bool(data.get("succeeded"))

    # -- watches ---------------------------------------------------------------------------------
    async def watch(self, key: str, start: int, seconds: float) -> list[list]:
        """[[revision, value], ...] of `key`'s events from revision `start` (never 0: etcd takes
        that as "now"), as etcd streams them within `seconds`. Watching changes nothing, so any
        failure is OpFailed, and a watch that fails gives no events."""
        import aiohttp

        if start < 1:
            raise ValueError("a watch starts at revision 1 or later")
        body = {"create_request": {"key": b64(key), "start_revision": str(start)}}
        events: list[list] = []
        try:
            async with self._http().post(self.url + "/v3/watch", json=body) as resp:
                try:
                    async with asyncio.timeout(seconds):
                        async for line in resp.content:
                            events += self._watch_events(line, key)
                except TimeoutError:
                    pass  # the watch's time is up: close it
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            await self.close()
            raise OpFailed(f"{self.node}: watch: {type(e).__name__}: {e}") from None
        return events

    def _watch_events(self, line: bytes, key: str) -> list[list]:
        """The events of one line of the watch stream; OpFailed for an error or a cancel."""
        if not line.strip():
            return []
        msg = json.loads(line)
        if "error" in msg:
            raise OpFailed(f"{self.node}: watch: {msg['error']}")
        result = msg.get("result") or {}
        if result.get("canceled"):
            raise OpFailed(f"{self.node}: watch canceled: {result.get('cancel_reason') or result}")
        return [[int(e["kv"]["mod_revision"]), self._value(e["kv"])]
                for e in result.get("events") or [] if e.get("type", "PUT") == "PUT"]

    async def watch_until(self, key: str, start: int, timeout: float) -> list[list]:
        """Every event of `key` from `start` up to its latest now (its mod revision): watches
        until that one arrives, OpFailed after `timeout`."""
        kv, _ = await self._range(key)
        if kv is None:
            return []
        last = int(kv["mod_revision"])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        events: list[list] = []
        while not events or events[-1][0] < last:
            if loop.time() > deadline:
                raise OpFailed(f"{self.node}: the final watch did not reach revision {last} in "
                               f"{timeout:g}s")
            events += await self.watch(key, events[-1][0] + 1 if events else start, 1.0)
        return events

    @staticmethod
    def _value(kv: dict | None):
        return None if kv is None else json.loads(unb64(kv.get("value", "")) or b"null")

    async def _range(self, key: str) -> tuple[dict | None, int]:
        """(the key's kv or None, the response's revision)."""
        body = {"key": b64(key)}
        if self.serializable:
            body["serializable"] = True
        data = await self.post("/v3/kv/range", body, idempotent=True)
        kvs = data.get("kvs") or []
        return (kvs[0] if kvs else None), int(data["header"]["revision"])

    async def read(self, key: str):
        kv, _ = await self._range(key)
        return self._value(kv)

    async def write(self, key: str, value) -> None:
        await self.post("/v3/kv/put", {"key": b64(key), "value": b64(json.dumps(value))})

    async def cas(self, key: str, expected, new) -> bool:
        data = await self.post("/v3/kv/txn", {
            "compare": [{"target": "VALUE", "result": "EQUAL", "key": b64(key),
                         "value": b64(json.dumps(expected))}],
            "success": [{"request_put": {"key": b64(key), "value": b64(json.dumps(new))}}]})
        return bool(data.get("succeeded"))

    async def append(self, key: str, element) -> None:
        """Add `element` to the list at `key`, as Jepsen's swap!: read it (linearizably), then
        put it with the element added if its mod revision is still the one read; retry after
        a short pause if not."""
        while True:
            data = await self.post("/v3/kv/range", {"key": b64(key)}, idempotent=True)
            kvs = data.get("kvs") or []
            kv = kvs[0] if kvs else None
            guard = ({"target": "MOD", "result": "EQUAL", "key": b64(key),
                      "mod_revision": kv["mod_revision"]} if kv is not None else
                     {"target": "VERSION", "result": "EQUAL", "key": b64(key), "version": "0"})
            value = (self._value(kv) or []) + [element]
            data = await self.post("/v3/kv/txn", {
                "compare": [guard],
                "success": [{"request_put": {"key": b64(key), "value": b64(json.dumps(value))}}]})
            if data.get("succeeded"):
                return
            await asyncio.sleep(0.01)

    async def txn(self, ops: list[list]) -> list[list]:
        """A list-append transaction, as Jepsen's etcd append does it: read the keys it appends
        to, then one etcd txn that puts each of them once (its whole new list) if its mod
        revision is still the one read (or, absent, it still is), and ranges the keys it only
        reads. A guard that fails means the txn did not apply: OpFailed. Reads of appended keys
        are computed from the guarded read and the appends before them in the txn."""
        appended = list(dict.fromkeys(k for f, k, _ in ops if f == "append"))
        seen: dict[str, dict | None] = {}
        if appended:
            data = await self.post("/v3/kv/txn", {"success": [
                {"request_range": {"key": b64(k)}} for k in appended]}, idempotent=True)
            for k, r in zip(appended, data.get("responses") or [], strict=True):
                kvs = r.get("response_range", {}).get("kvs") or []
                seen[k] = kvs[0] if kvs else None
        current = {k: self._value(seen[k]) or [] for k in appended}
        out: list[list] = []
        reads: list[int] = []  # positions of reads of keys the txn does not append to
        for f, k, v in ops:
            if f == "append":
                current[k] = current[k] + [v]
                out.append([f, k, v])
            elif k in current:
                out.append([f, k, list(current[k])])
            else:
                reads.append(len(out))
                out.append([f, k, None])
        compare = [{"target": "MOD", "result": "EQUAL", "key": b64(k),
                    "mod_revision": seen[k]["mod_revision"]} if seen[k] is not None else
                   {"target": "VERSION", "result": "EQUAL", "key": b64(k), "version": "0"}
                   for k in appended]
        success = [{"request_put": {"key": b64(k), "value": b64(json.dumps(current[k]))}}
                   for k in appended]
        success += [{"request_range": {"key": b64(out[i][1])}} for i in reads]
        data = await self.post("/v3/kv/txn", {"compare": compare, "success": success},
                               idempotent=not appended)
        if not data.get("succeeded"):
            raise OpFailed("a key the txn appends to changed since it was read: not applied")
        responses = (data.get("responses") or [])[len(appended):]
        for i, r in zip(reads, responses, strict=True):
            kvs = r.get("response_range", {}).get("kvs") or []
            value = self._value(kvs[0]) if kvs else None
            out[i][2] = value if value is not None else []
        return out
