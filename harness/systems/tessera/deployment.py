"""Tessera under test: its masters and tablet servers on every host, their configuration and
credentials, its clients, its end checks (replica convergence, the masters' agreement), and what
its faults need of it (leaders, membership, disk layout, the session intruder)."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from harness.cluster import ClusterError, Host
from harness.deployment import DATA, ROOT, Deployment
from reports.checkers.logs import TESSERA_RULES

MASTER_PORT, TSERVER_PORT = 7051, 7050  # Kudu's RPC ports
HTTP_PORTS = {"master": 8051, "tserver": 8050}  # Kudu's web UI ports: /status and /metrics


@dataclass
class TesseraDB(Deployment):
    masters: int = 3
    # hosts given a master during the run (the master-membership nemesis), in order added
    added_masters: list[str] = field(default_factory=list)
    _master_uuids: dict[str, str] = field(default_factory=dict)  # added masters' UUIDs

    name: ClassVar[str] = "tessera"
    data_daemon: ClassVar[str] = "tserver"
    all_daemons: ClassVar[tuple[str, ...]] = ("master", "tserver")
    offers: ClassVar[frozenset[str]] = frozenset({"tablets", "masters", "disk", "membership",
                                                   "leaders", "faketime", "sessions", "fsync",
                                                   "transfers"})
    workloads: ClassVar[tuple[str, ...]] = ("register", "list-append", "rw-register", "bank", "set")
    client_modes: ClassVar[tuple[str, ...]] = ("node-bound", "smart")
    log_rules: ClassVar[tuple[dict, ...]] = TESSERA_RULES
    RPC_PORTS: ClassVar[dict[str, int]] = {"master": MASTER_PORT, "tserver": TSERVER_PORT}

    # Config keys the deployment writes for each host: a --flag may not override them.
    OWN_KEYS: ClassVar[frozenset[str]] = frozenset({
        "data_dir", "rpc_addr", "masters", "http_port", "rpc_certificate_file",
        "rpc_private_key_file", "rpc_ca_certificate_file", "config", "probes_file"})

    @classmethod
    def check_workload(cls, workload) -> None:
        """A batch size the tablets' session bound cannot keep (the results a tablet keeps per
        client session) is refused here, as the session would refuse it at the run's start."""
        from harness.systems.tessera.clients import session_options

        session_options(workload)

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
        port = self.RPC_PORTS[daemon]
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
            self.remotes[h.name].write(f"{ROOT}/{d}.toml", self._config(h, d).encode())

    async def open_clients(self, workload, names: dict[str, str], binds: list[str] | None,
                           op_timeout: float):
        """The test table created and writable, then the workload's clients over one
        TesseraClient (closed with them; with Workload.fresh_clients, one more per renewed
        session)."""
        from harness.systems.tessera.clients import (
            accept_test_table,
            client_mode,
            workload_clients,
        )
        from node.client import TesseraClient

        mode = client_mode(workload.external_consistency)  # checked by harness.validate

        def new_client():
            """The run's TesseraClient, or one more (Workload.fresh_clients)."""
            return TesseraClient(self.master_addrs, timeout=min(op_timeout, 10.0 * self.time_scale),
                                 tls=self.tls("client"), time_scale=self.time_scale,
                                 external_consistency=mode)

        client = new_client()
        self.log("waiting for the cluster to accept the test table")
        try:
            locs = await accept_test_table(client, workload.tablets, self.replication_factor)
        except BaseException:
            await client.close()
            raise
        clients, close_sessions = workload_clients(client, "test", names, binds, workload,
                                                   new_client)

        async def close():
            try:
                return await close_sessions()
            finally:
                await client.close()

        return clients, close, {t.partition.bucket: t.tablet_id for t in locs.tablets}

    @property
    def replication_factor(self) -> int:
        """The test table's: 3, or every host on a smaller cluster."""
        return min(3, len(self.hosts))

    def end_checks(self) -> list[tuple[str, object]]:
        from harness.systems.tessera.masters_check import check_masters
        from node.tools.convergence import check_convergence

        return [("convergence", lambda: check_convergence(
                    self, replication_factor=self.replication_factor)),
                ("masters", lambda: check_masters(self))]

    def add_master(self, host: str, timeout: float = 60.0) -> str:
        """Start a master with an empty data dir on `host` (which has none) and add it to the
        masters (Kudu's master add, node.tools.admin.join_master); its UUID once it is a
        voter. A master that does not make it is taken out of the masters' config again (an
        operator's `master remove` after a failed add: the add may have gone through) and then
        stopped and wiped; if even that removal fails it stays running and listed, for the
        next step or the heal to remove, rather than a dead member the config counts on."""
        import asyncio

        from node.client import TesseraClient
        from node.tools.admin import join_master, started_master

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
                addr = (h.address, MASTER_PORT)
                self._master_uuids[host] = (await started_master(client, addr, timeout)).uuid
                return (await join_master(client, addr, timeout=timeout)).uuid
            finally:
                await client.close()

        try:
            return asyncio.run(join())
        except BaseException:
            if host in self._master_uuids:
                self._leave(host)  # raises (the master kept) if the removal fails too
            self._drop_master(host)
            raise

    def remove_master(self, host: str) -> str:
        """Remove the master `add_master` put on `host` (Kudu's master remove), then stop it
        and wipe its data dir; its UUID. A removal the leader master refuses as unsafe now
        (other faults hold too many masters down) raises nemeses.membership.Refused and
        changes nothing."""
        from harness.systems.tessera.members import refused_as_unsafe
        from nemeses.membership import Refused

        if host not in self.added_masters:
            raise ClusterError(f"{host} has no added master to remove")
        try:
            uuid = self._leave(host)
        except Exception as e:
            if refused_as_unsafe(e):
                raise Refused(str(e)) from None
            raise
        self._drop_master(host)
        return uuid

    def _leave(self, host: str) -> str:
        """Take `host`'s added master out of the masters' config, by the UUID it answered
        with (its process may be down), unless it never became a member."""
        import asyncio

        from node.client import TesseraClient
        from node.tools.admin import leave_master

        async def leave() -> str:
            client = TesseraClient(self.master_addrs, timeout=10.0 * self.time_scale,
                                   tls=self.tls(), time_scale=self.time_scale)
            try:
                return await leave_master(client, self._master_uuids[host], missing_ok=True)
            finally:
                await client.close()
        return asyncio.run(leave())

    def _drop_master(self, host: str) -> None:
        with self._locks[host]:
            self.kill(host, "master")
            self._wipe_master(host)
            if host in self.added_masters:
                self.added_masters.remove(host)
            self._master_uuids.pop(host, None)

    def _wipe_master(self, host: str) -> None:
        self.remotes[host].run(["rm", "-rf", f"{DATA}/master", self.pid_file("master"),
                                f"{self.pid_file('master')}.start"])

    def ask_each(self, hosts: list[Host], daemon: str, method: str, reply: type,
                 request: object = None, timeout: float = 1.0) -> dict:
        """Call `method` (with `request`, by default none) on `daemon` of every host at once,
        from a harness thread (which has no event loop of its own): host name -> reply, for
        the hosts that answered. At once: a paused host costs its call's whole timeout, and
        asked one after another, two of them made a membership start's every look at the
        tablets seconds long, longer than the window the plan gave it."""
        import asyncio

        from node.protocol import Empty
        from node.rpc import RpcClient, RpcError

        port = self.RPC_PORTS[daemon]

        async def ask() -> dict:
            rpc = RpcClient(connect_timeout=1.0, tls=self.tls())

            async def one(h: Host) -> object:
                try:
                    return await rpc.call((h.address, port), method,
                                          Empty() if request is None else request, reply,
                                          to_uuid="", timeout=timeout)
                except RpcError:
                    return None
            try:
                replies = await asyncio.gather(*(one(h) for h in hosts))
                return {h.name: r for h, r in zip(hosts, replies, strict=True) if r is not None}
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

    def committed_configs(self) -> tuple[dict[str, str], dict[str, tuple[int, list[str]]]]:
        """(host -> its tablet server's uuid, tablet id -> (index, voters) of the newest
        committed config a running replica reports), from every tablet server that answers."""
        from node.protocol import ServerStatus

        uuids: dict[str, str] = {}
        newest: dict[str, tuple[int, list[str]]] = {}
        for host, st in self.ask_each(self.hosts, "tserver", "ts.status", ServerStatus).items():
            uuids[host] = st.uuid
            for t in st.tablets:
                if t.state == "RUNNING" and t.committed_config_index >= newest.get(
                        t.tablet_id, (-1, []))[0]:
                    newest[t.tablet_id] = (t.committed_config_index, sorted(
                        u for u, kind in t.committed_config if kind == "VOTER"))
        return uuids, newest

    INTRUDER_ROWS: ClassVar[int] = 128  # a session's result bound (Limits): one full window
    INTRUDER_S: ClassVar[float] = 15.0  # one start's attack, at most (a stalled leader waits)
    CLOCK_PUSH_US: ClassVar[int] = 2 * 3600 * 1_000_000  # past the servers' one-hour bound

    def intrude_sessions(self, step: str, groups: list[str], sessions: int) -> dict:
        """As another user (README "Security": a client holding a user's credentials), at the
        leader of each tablet in `groups`, against session ids 1..`sessions` (a session's id is
        its OpenSession's log index, so the workloads' are small; for a flood, how many to
        open):
        - poison: into each session, a one-write probe at seq 1, then, if the answer (STALE_SEQ)
          names the seq below which the owner's results are forgotten, INTRUDER_ROWS writes to
          the intruder's own keys from there: seqs the owner has not used yet would keep the
          intruder's ok, and the owner's writes at those seqs would be answered from it, never
          applied;
        - close: CloseSession into each session;
        - flood: `sessions` OpenSessions of its own, which must evict no one else's.
        The flood is made as `flooder`, the others as `intruder`, which never opens a session:
        a session its write lands in can only be another identity's, even one whose
        OpenSession's answer was lost and which committed later (pki.FLOODER).
        Every step also makes, at each tablet, calls a user may not make (OVERREACH: a tablet
        copy session, which would hand it the tablet's files and pin them, and a leader
        step-down), each with a body harmless if it were run; and a write carrying a propagated
        timestamp two hours ahead (CLOCK_PUSH_US), which a server must refuse before its clock
        witnesses it (else every later timestamp of that server would be out of reach of the
        others' clocks).
        What came back, counted: `foreign_applied` is the number of ops applied in a session
        the intruder did not open (anything above 0 is the engine's fault); `refused` those
        answered NOT_OWNER or NOT_AUTHORIZED; `no_session` those that named no session;
        `overreach_refused` the forbidden calls answered NOT_AUTHORIZED and `overreached` those
        a server answered otherwise (it ran them past its authorization: the engine's fault);
        `clock_push_refused` the far-ahead writes refused INVALID_ARGUMENT and `clock_pushed`
        those a server answered otherwise (its clock may have taken the timestamp)."""
        import asyncio
        import functools

        from node.clock import LOGICAL_BITS
        from node.protocol import (
            CLIENT_PROPAGATED,
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
        counts = {"calls": 0, "answered": 0, "foreign_applied": 0, "refused": 0,
                  "no_session": 0, "own_sessions": 0, "no_leader": 0, "overreach_refused": 0,
                  "overreached": 0, "clock_push_refused": 0, "clock_pushed": 0}

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

        async def refused(rpc, addrs, method, req, reply, refusal, kind, passing=()) -> None:
            """`method` at the first of `addrs` that answers (a network error, a deadline or a
            code in `passing` moves on): answered `refusal`, counted `<kind>_refused`;
            answered otherwise, `<kind>ed`: the server ran what it should have refused."""
            counts["calls"] += 1
            for addr in addrs:
                try:
                    await rpc.call(addr, method, req, reply, to_uuid="", timeout=2.0)
                except RpcError as e:
                    if e.code in (ErrorCode.NETWORK, ErrorCode.DEADLINE_EXCEEDED, *passing):
                        continue
                    counts["answered"] += 1
                    if e.code == refusal:
                        counts[f"{kind}_refused"] += 1
                    else:
                        got_past(kind, e.code.name)
                    return
                counts["answered"] += 1
                got_past(kind, "OK")
                return

        def got_past(kind: str, answer: str) -> None:
            """Counted `<kind>ed`, and the server's answer kept (`<kind>ed_answers`): the
            logs check names it, so a harness that misreads an answer shows which."""
            counts[f"{kind}ed"] += 1
            answers = counts.setdefault(f"{kind}ed_answers", {})
            answers[answer] = answers.get(answer, 0) + 1

        async def overreach(rpc, addrs, tablet) -> None:
            """The calls of OVERREACH. The server checks authorization before it reads the
            body, so any answer but NOT_AUTHORIZED (a follower's NOT_LEADER too) means the call
            got past it."""
            for method, req, reply in ((
                    "ts.begin_copy_session", BeginCopySession(tablet, "intruder"), CopySession),
                    ("consensus.leader_step_down", LeaderStepDown(tablet), Ack)):
                await refused(rpc, addrs, method, req, reply, ErrorCode.NOT_AUTHORIZED,
                              "overreach")

        # A server answers these before it looks at a write's timestamp (node/tserver/service.py
        # on_write: the tablet is looked up first): no replica of the tablet there (the
        # membership nemesis moved it), one not running (copying, tombstoned), a full queue, a
        # server stopping. The push moves on to the next server, as after a NOT_LEADER.
        BEFORE_THE_TIMESTAMP = (ErrorCode.NOT_LEADER, ErrorCode.TABLET_NOT_FOUND,
                                ErrorCode.TABLET_NOT_RUNNING, ErrorCode.SERVER_BUSY,
                                ErrorCode.SHUTTING_DOWN)

        async def push_clock(rpc, addrs, tablet) -> None:
            """A write whose propagated timestamp is CLOCK_PUSH_US ahead of this machine's
            clock: INVALID_ARGUMENT is the engine's answer (an answer in BEFORE_THE_TIMESTAMP
            moves on); anything else means the server took the timestamp."""
            far = (time.time_ns() // 1000 + self.CLOCK_PUSH_US) << LOGICAL_BITS
            req = Write(tablet, Put("intruder-clock", 0), 0, 1, 0, far, CLIENT_PROPAGATED)
            await refused(rpc, addrs, "ts.write", req, OpResult, ErrorCode.INVALID_ARGUMENT,
                          "clock_push", passing=BEFORE_THE_TIMESTAMP)

        async def attack() -> None:
            user = pki.FLOODER if step == "flood" else pki.INTRUDER
            rpc = RpcClient(connect_timeout=1.0, tls=self.tls(user))
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
                addrs = [(h.address, TSERVER_PORT) for h in targets]
                await own_step(tablet, functools.partial(ask, rpc, addrs))
                # after the step's own calls: a push that waits out paused servers must not
                # use up INTRUDER_S before them (the nightly's intruder starts ended cut_short)
                await overreach(rpc, addrs, tablet)
                await push_clock(rpc, addrs, tablet)

        async def own_step(tablet, call) -> None:
            """The start's step on `tablet`: open sessions (flood), or write into (poison) or
            close (close) every session, none of them its own."""
            if step == "flood":
                for _ in range(sessions):
                    res = await call("ts.write", Write(tablet, OpenSession()), OpResult)
                    if res is not None and res.result.ok:
                        counts["own_sessions"] += 1
                return
            for sid in range(1, sessions + 1):
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
                    res = await call("ts.write", Write(tablet, CloseSession(), sid, 1), OpResult)
                    if res is not None:
                        tally(res.result)

        asyncio.run(attack())
        return counts

    def disk_layout(self):
        """A tablet server's WAL segments (a replica: its tablet's directory) and consensus
        metadata (a replica: the file, named by its tablet), with the aimed newest-flip; a
        file lost under the running server may also be its superblock or snapshot."""
        from nemeses.disk import DiskLayout

        return DiskLayout(daemon="tserver", root=self.data_dir("tserver"),
                          files=(("wals", "wal", "dir"), ("consensus-meta", "cmeta", "name")),
                          modes=("bitflip", "bitflip", "truncate", "newest-flip", "lose"),
                          log=f"{DATA}/logs/tserver.log",
                          lose_files=(("tablet-meta", "superblock", "name"),
                                      ("data", "snapshot", "dir")))

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

    def step_down_leader(self, tablet: str | None, graceful: bool, pick: int) -> dict:
        """"transfers": the leader of `tablet` (None: the masters') steps down or hands over."""
        from harness.systems.tessera.transfers import step_down_leader

        return step_down_leader(self, tablet, graceful, pick)

    def membership(self):
        from harness.systems.tessera.members import TabletMembers

        return TabletMembers(self)

    def replica_groups(self):
        """The tablets, for the replica-group races (nemeses.groups.ReplicaGroups)."""
        from harness.systems.tessera.members import TabletMembers

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

    def groups_on(self, host: str) -> set[str] | None:
        """The tablets `host`'s tablet server holds a replica of (any state but a tombstone):
        what a failing disk there fails. None when it does not answer within 3 s (a second
        was often too short under the packet fault's delays)."""
        from node.protocol import ServerStatus

        target = [h for h in self.hosts if h.name == host]
        st = self.ask_each(target, "tserver", "ts.status", ServerStatus, timeout=3.0).get(host)
        return None if st is None else {t.tablet_id for t in st.tablets
                                        if t.state != "TOMBSTONED"}

    def log_files(self, host: str) -> list[str]:
        """Every daemon's log, a master's removed during the run included."""
        kinds = ["master"] if host in self._had_master else []
        return [f"{DATA}/logs/{d}.{ext}" for d in [*kinds, "tserver"] for ext in ("log", "probes")]

    def _torn_down(self) -> None:
        self.added_masters.clear()
        self._master_uuids.clear()


def _toml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
