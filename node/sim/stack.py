"""The whole engine under deterministic simulation (`tessera sim --stack full`).

The production masters, tablet servers and client library run unchanged on a SimLoop: their
transport is SimNetwork (in-memory TCP), their disks are SimDisks (page cache, crash loses what
was not fsynced), their timers and clocks are virtual, and every random choice comes from the
seed. A seed is one run: boot 3 masters and 5 tablet servers, create the test table through the
client, run a workload through the real runner with node-bound clients while a nemesis crashes
servers (losing unfsynced data), partitions, resets connections and skews clocks within the
bound; heal; final reads; then the project's checker judges the history. Raft invariants are
checked on the live replicas every `INVARIANT_PERIOD_S` of virtual time.

Replay: the same seed gives the same run bit for bit, provided string hashing is fixed
(PYTHONHASHSEED; `tessera sim --stack full` sets it). Nothing here reads the wall clock.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from node.disk import SimDisk
from node.faults import Faults
from node.sim.loop import SYSTEM, SimLoop
from node.sim.network import SimNetwork

MASTER_PORT, TSERVER_PORT = 7051, 7050
# Virtual addresses: they exist only in SimNetwork, never on a socket. Taken from the project's
# test subnet anyway (above the netns hosts' .11-.15), so a mistake could not reach anyone else.
CLIENT_HOST = "10.77.0.200"
EPOCH_NS = 1_800_000_000 * 10**9  # virtual wall clocks start here (2027): never the real time
INVARIANT_PERIOD_S = 0.1
# Per key: a failing register history can make the linearizability search explode; a search
# that runs out says unknown, which fails the seed (never a pass).
CHECK_TIME_LIMIT_S = 5.0
SETTLE_S = 5.0  # after the last op, before the final state comparison
STATE_CHECK_EVERY = 2  # invariant rounds between state checksums (they cost O(rows))
CLOCK_MAX_ERROR_US = 1_000  # the replicas' bound; skew stays within half of it either way
MAX_FLIPS = 2  # bit flips per seed, each on another tablet server
FAILED_AFTER_S = 5.0  # masters re-replicate a silent server's replicas after this (fast, as CI)


_SKIPPED = object()  # a nemesis event that did not apply


class StackViolation(Exception):
    """A Raft invariant failed on the live replicas; the message says which and where."""


@dataclass
class StackConfig:
    seed: int
    workload: str = "register"  # or list-append
    seconds: float = 60.0  # virtual seconds of workload under faults
    masters: int = 3
    tservers: int = 5
    concurrency: int = 5
    rate: float = 50.0  # ops/s over all workers
    fault_every_s: tuple[float, float] = (1.0, 4.0)
    # Replay exactly these [virtual time, kind, value] faults instead of random ones (shrinking)
    schedule: tuple | None = None
    faults: Faults = field(default_factory=Faults)  # engine fault flags (mutants)
    batch: int = 0  # > 0: writes through batching sessions (Workload.batch)


@dataclass
class StackResult:
    seed: int
    verdict: str  # valid | invalid | unknown
    violation: str | None
    results: dict
    ops: int
    virtual_s: float
    history_sha: str
    nemesis: dict
    events: list  # the faults applied, [virtual time, kind, value]: a replayable schedule
    wall_s: float = 0.0

    def ok(self) -> bool:
        return self.violation is None and self.verdict == "valid"


def master_hosts(n: int) -> list[str]:
    return [f"10.77.0.{101 + i}" for i in range(n)]


def tserver_hosts(n: int) -> list[str]:
    return [f"10.77.0.{111 + i}" for i in range(n)]


class StackSim:
    def __init__(self, config: StackConfig, out_dir: Path):
        self.cfg = config
        self.out_dir = out_dir
        self.rng = random.Random(f"stack/{config.seed}")
        self.net = SimNetwork(self.rng.getrandbits(64), unpartitioned=[CLIENT_HOST])
        self.loop = SimLoop(self.net)
        self.masters = master_hosts(config.masters)
        self.tservers = tserver_hosts(config.tservers)
        self.disks = {h: SimDisk(random.Random(self.rng.getrandbits(64)))
                      for h in self.masters + self.tservers}
        self.skew_s = {h: 0.0 for h in self.disks}
        self.servers: dict[str, object] = {}  # host -> the running server object, if up
        self.down: set[str] = set()
        self.nemesis_counts: dict[str, int] = {}
        self._leaders: dict[tuple[str, int], str] = {}  # (tablet, term) -> leader uuid
        self._committed: dict[tuple[str, int], int] = {}  # (tablet, index) -> term
        self._checked: dict[tuple[str, str], int] = {}  # (host, tablet) -> commit checked up to
        self._state_at: dict[tuple[str, int], tuple[int, str]] = {}  # (tablet, applied) -> crc
        self._terms: dict[tuple[str, str], int] = {}  # (host, tablet) -> highest term seen
        self._votes: dict[tuple[str, str, int], str] = {}  # (host, tablet, term) -> voted for
        self._rounds = 0
        self.violation: str | None = None
        self.client = None  # the client process's TesseraClient, for the membership nemesis
        self._removed: list[tuple[str, str]] = []  # (tablet, tserver uuid) removed by the nemesis
        self.events: list[list] = []  # [virtual time, kind, value] of each fault applied
        self.flipped: set[str] = set()  # tablet servers whose disk had a bit flipped
        self.start_failures: dict[str, str] = {}  # host -> why its server refused to start

    # -- servers -----------------------------------------------------------------------------
    def _wall_ns(self, host: str):
        return lambda: EPOCH_NS + int((self.loop.time() + self.skew_s[host]) * 1e9)

    def _options(self, host: str):
        from node.replica import ReplicaOptions
        from node.tserver.server import TServerOptions
        from node.wal import LogOptions

        master = host in self.masters
        replica = ReplicaOptions(clock_max_error_us=CLOCK_MAX_ERROR_US,
                                 wall_ns=self._wall_ns(host), faults=self.cfg.faults,
                                 log=LogOptions(faults=self.cfg.faults))
        return TServerOptions(
            data_dir=Path("/data"), rpc_host=host,
            rpc_port=MASTER_PORT if master else TSERVER_PORT,
            masters=[(m, MASTER_PORT) for m in self.masters], replica=replica,
            follower_unavailable_considered_failed_sec=FAILED_AFTER_S,
            seed=self.rng.getrandbits(64), disk=self.disks[host], local_host=host)

    def _boot(self, host: str) -> None:
        from node.master.server import Master
        from node.tserver.server import TabletServer

        opts = self._options(host)
        server = Master(opts) if host in self.masters else TabletServer(opts)
        self.servers[host] = server
        self.down.discard(host)
        self.loop.spawn(host, self._start(host, server), name=f"start-{host}")

    async def _start(self, host: str, server) -> None:
        """A server that refuses to start (a corrupt instance file) fails loudly, as the daemon
        exits: it stays down, and the run says so."""
        from node.errors import CorruptionError

        try:
            await server.start()
        except CorruptionError as e:
            self.start_failures[host] = str(e)

    def _crash(self, host: str) -> None:
        """The process dies mid-step and its disk forgets what was not fsynced."""
        self.loop.crash_host(host)
        self.disks[host] = self.disks[host].crash(random.Random(self.rng.getrandbits(64)))
        self.servers.pop(host, None)
        self.down.add(host)
        for key in [k for k in self._checked if k[0] == host]:
            del self._checked[key]  # a restarted replica re-learns its commit index

    # -- invariants --------------------------------------------------------------------------
    def _check_invariants(self, states: bool = False) -> None:
        """One leader per term; a replica's term never goes back and its vote in a term never
        changes, across restarts, tombstones and copies; one committed entry per index; and
        with `states`, one state
        per applied index (a replica that applied something else than the committed log, e.g.
        an uncommitted suffix at bootstrap, holds different rows at the same index)."""
        from node.tablet.checksum import table_checksum

        for host, server in self.servers.items():
            for tablet, r in list(getattr(server, "replicas", {}).items()):
                high = self._terms.setdefault((host, tablet), r.term)
                if r.term < high:
                    raise StackViolation(f"term monotonicity: tablet {tablet} on {host} went from "
                                         f"term {high} back to {r.term}")
                self._terms[(host, tablet)] = r.term
                term, voted = r.durable_vote()
                if voted is not None:
                    promised = self._votes.setdefault((host, tablet, term), voted)
                    if promised != voted:
                        raise StackViolation(f"vote safety: tablet {tablet} on {host} voted for "
                                             f"{promised} and {voted} in term {term}")
                elif (host, tablet, term) in self._votes:
                    raise StackViolation(f"vote safety: tablet {tablet} on {host} forgot its vote "
                                         f"for {self._votes[(host, tablet, term)]} in term {term}")
                if r.role.name == "LEADER":
                    holder = self._leaders.setdefault((tablet, r.term), r.uuid)
                    if holder != r.uuid:
                        raise StackViolation(f"election safety: tablet {tablet} term {r.term} has "
                                             f"leaders {holder} and {r.uuid}")
                done = self._checked.get((host, tablet), 0)
                for index, term in r.committed_terms(done):
                    seen = self._committed.setdefault((tablet, index), term)
                    if seen != term:
                        raise StackViolation(
                            f"state machine safety: tablet {tablet} index {index} committed with "
                            f"term {term} on {host}, term {seen} elsewhere")
                    done = index
                self._checked[(host, tablet)] = max(done, r.commit_index)
                if states and not r.failed:
                    applied = r.state.last_applied_index
                    crc = table_checksum(dict(r.state.data))
                    holder, seen = self._state_at.setdefault((tablet, applied), (host, crc))
                    if seen != crc:
                        raise StackViolation(
                            f"applied state: tablet {tablet} at applied index {applied} has "
                            f"checksum {crc} on {host}, {seen} on {holder}")

    async def _invariant_loop(self) -> None:
        while True:
            await asyncio.sleep(INVARIANT_PERIOD_S)
            self._rounds += 1
            try:
                self._check_invariants(states=self._rounds % STATE_CHECK_EVERY == 0)
            except StackViolation as e:
                self.violation = str(e)
                return

    # -- nemesis -----------------------------------------------------------------------------
    def _count(self, f: str) -> None:
        self.nemesis_counts[f] = self.nemesis_counts.get(f, 0) + 1

    async def _nemesis(self, rec, deadline: float) -> None:
        """Random faults every `fault_every_s`, or, with `cfg.schedule`, exactly those events at
        their times (a shrunk schedule). Every event applied is kept in `events`, as replayable
        values, and recorded in the history."""
        rng = random.Random(self.rng.getrandbits(64))
        planned = list(self.cfg.schedule) if self.cfg.schedule is not None else None
        while self.loop.time() < deadline:
            if planned is None:
                await asyncio.sleep(rng.uniform(*self.cfg.fault_every_s))
                kind, value = self._choose(rng)
            elif planned:
                at, kind, value = planned.pop(0)
                await asyncio.sleep(max(0.0, at - self.loop.time()))
            else:
                return
            if self.loop.time() >= deadline:
                return
            if kind == "membership":
                value = await self._membership(rng, value)
            elif kind is not None:
                value = self._apply(kind, value)
            if kind is None or value is _SKIPPED:
                continue
            self.events.append([round(self.loop.time(), 6), kind, value])
            self._count(kind)
            rec.record("nemesis", "info", kind, value)

    def _choose(self, rng: random.Random) -> tuple[str | None, object]:
        """A random fault and its target; (None, None) when none applies now."""
        hosts = self.masters + self.tservers
        kind = rng.choice(["crash", "crash", "power", "restart", "restart", "partition",
                           "isolate", "heal", "reset", "skew", "membership", "membership", "flip"])
        if kind == "crash":
            # at most one master and two tablet servers down at a time: the final phase must work
            up = [h for h in hosts if h not in self.down and (
                not self.down & set(self.masters) if h in self.masters
                else len(self.down & set(self.tservers)) < 2)]
            return (kind, rng.choice(up)) if up else (None, None)
        if kind == "power":  # a rack loses power: tablet servers crash together
            return kind, sorted(rng.sample(self.tservers, rng.randrange(2, len(self.tservers) + 1)))
        if kind == "restart":
            return (kind, rng.choice(sorted(self.down))) if self.down else (None, None)
        if kind == "partition":
            shuffled = rng.sample(hosts, len(hosts))
            cut = rng.randrange(1, len(hosts))
            return kind, [sorted(shuffled[:cut]), sorted(shuffled[cut:])]
        if kind == "isolate":
            return kind, rng.choice(hosts)
        if kind == "skew":
            bound = CLOCK_MAX_ERROR_US / 2e6
            return kind, [rng.choice(hosts), rng.uniform(-bound, bound)]
        if kind == "flip":  # once per tablet server: a corrupt instance file keeps it down
            fresh = [h for h in self.tservers if h not in self.flipped]
            return (kind, [rng.choice(fresh)]) if len(self.flipped) < MAX_FLIPS else (None, None)
        return kind, None  # heal, reset; membership picks its target when it runs

    def _apply(self, kind: str, value):
        """Apply one fault; _SKIPPED if it cannot apply now (a replayed crash of a host that is
        already down). Returns the value to record."""
        if kind == "crash":
            if value in self.down:
                return _SKIPPED
            self._crash(value)
        elif kind == "power":
            for host in value:
                if host not in self.down:
                    self._crash(host)
        elif kind == "restart":
            if value not in self.down:
                return _SKIPPED
            self._boot(value)
        elif kind == "partition":
            self.net.partition(value)
        elif kind == "isolate":
            self.net.isolate(value)
        elif kind == "heal":
            self.net.heal()
        elif kind == "reset":
            pair = self.net.reset_random_connection()
            return [list(a) for a in pair] if pair else _SKIPPED
        elif kind == "skew":
            self.skew_s[value[0]] = value[1]
        elif kind == "flip":  # media corruption, then a reboot that reads it back
            host = value[0]
            at = (value[2], value[3]) if len(value) > 1 else None
            path, offset, bit = self.disks[host].flip_bit(path=value[1] if at else None, at=at)
            self.flipped.add(host)
            if host not in self.down:
                self._crash(host)
            self._boot(host)
            return [host, path, offset, bit]
        return value

    async def _membership(self, rng: random.Random, planned: list | None):
        """Remove a voter of a random tablet, or add a removed one back: the re-added replica is
        copied over its own tombstone (Jepsen's membership nemesis; Kudu's remove/add).
        `planned`: [op, tablet, uuid] to replay instead of choosing."""
        from node.rpc import RpcError

        if planned is not None:
            op, tablet, uuid = planned[:3]
        elif self._removed and rng.random() < 0.5:
            tablet, uuid = self._removed.pop(rng.randrange(len(self._removed)))
            op = "add"
        else:
            try:
                locs = await self.client.locations("test", refresh=True)
            except (RpcError, TimeoutError, OSError):
                return _SKIPPED
            t = rng.choice(locs.tablets)
            if len(t.replicas) < 3:
                return _SKIPPED
            tablet, uuid, op = t.tablet_id, rng.choice(t.replicas).uuid, "remove"
        try:
            await asyncio.wait_for(self.client.change_replica(tablet, op, uuid), 5.0)
        except (RpcError, TimeoutError, OSError) as e:
            return [op, tablet, uuid, f"failed: {e or type(e).__name__}"]
        if op == "remove" and planned is None:
            self._removed.append((tablet, uuid))
        return [op, tablet, uuid]

    async def _heal(self, rec) -> None:
        self.net.heal()
        for host in sorted(self.down):
            self._boot(host)
        rec.record("nemesis", "info", "heal-all", sorted(self.down))

    # -- the run -----------------------------------------------------------------------------
    def _workload(self):
        from workloads.list_append import ListAppend
        from workloads.register import Register

        return {"register": Register, "list-append": ListAppend}[self.cfg.workload](
            batch=self.cfg.batch)

    async def _client_main(self) -> list:
        from harness.chaos import accept_test_table, workload_clients
        from harness.recorder import Recorder
        from harness.runner import RunOptions, run
        from node.client import TesseraClient
        from node.rpc import RpcClient

        workload = self._workload()
        client = TesseraClient([(m, MASTER_PORT) for m in self.masters], timeout=5.0,
                               rpc=RpcClient(connect_timeout=1.0, local_host=CLIENT_HOST),
                               rng=random.Random(self.rng.getrandbits(64)))
        self.client = client
        await accept_test_table(client, workload.tablets, 3, timeout=120.0)
        names = {h: f"ts{i + 1}" for i, h in enumerate(self.tservers)}
        rec = Recorder(self.out_dir / "history.jsonl",
                       now_ns=lambda: int(self.loop.time() * 1e9))
        opts = RunOptions(concurrency=self.cfg.concurrency, time_limit=self.cfg.seconds,
                          rate=self.cfg.rate, seed=self.cfg.seed, op_timeout=5.0,
                          final_settle=5.0, final_timeout=60.0)

        clients, close_sessions = workload_clients(client, "test", names, self.tservers, workload)
        try:
            await run(workload, clients, rec, opts, nemesis=self._nemesis, heal=self._heal)
        finally:
            await close_sessions()
            rec.close()
            await client.close()
        return workload

    async def _main(self):
        """The client's workload (None if an invariant stopped the run first)."""
        checker = asyncio.get_running_loop().create_task(self._invariant_loop(), context=SYSTEM)
        for host in self.masters + self.tservers:
            self._boot(host)
        client = self.loop.spawn(CLIENT_HOST, self._client_main(), name="client")
        done, _ = await asyncio.wait([client, checker], return_when=asyncio.FIRST_COMPLETED)
        if checker in done:
            client.cancel()
            await asyncio.gather(client, return_exceptions=True)
            return None
        await asyncio.sleep(SETTLE_S)  # healed and idle: replicas catch up to the same index
        checker.cancel()
        try:
            self._check_invariants(states=True)
        except StackViolation as e:
            self.violation = str(e)
        return client.result()

    def run(self) -> StackResult:
        from harness.chaos import judge_ops
        from reports.history import read_jsonl

        self.out_dir.mkdir(parents=True, exist_ok=True)
        quiet = logging.getLogger("tessera")
        level, quiet.level = quiet.level, logging.CRITICAL
        node_log = logging.getLogger("node")
        node_level, node_log.level = node_log.level, logging.CRITICAL
        try:
            workload = self.loop.run_until_complete(self._main())
        finally:
            virtual_s = self.loop.time()
            self.loop.close()
            # Tasks cancelled by the teardown are collected later; nothing can read them now.
            self.loop.set_exception_handler(lambda _loop, _context: None)
            quiet.level, node_log.level = level, node_level
        history = self.out_dir / "history.jsonl"
        ops = read_jsonl(history) if history.exists() else []
        results = (judge_ops(ops, workload.checker, time_limit=CHECK_TIME_LIMIT_S)
                   if workload is not None else {"verdict": "unknown"})
        sha = hashlib.sha256(history.read_bytes()).hexdigest() if history.exists() else ""
        (self.out_dir / "schedule.json").write_text(json.dumps(self.events) + "\n")
        return StackResult(self.cfg.seed, results["verdict"], self.violation, results,
                           sum(1 for o in ops if o.type == "ok"), round(virtual_s, 3), sha,
                           dict(sorted(self.nemesis_counts.items())), self.events)


def replay_command(cfg: StackConfig, faults: list[str] = (), schedule: Path | None = None) -> str:
    flags = "".join(f" --fault {f}" for f in faults)
    if schedule is not None:
        flags += f" --schedule {schedule}"
    if cfg.batch:
        flags += f" --batch {cfg.batch}"
    return (f"tessera sim --stack full --seeds 1 --seed {cfg.seed} --workload {cfg.workload} "
            f"--seconds {cfg.seconds:g}{flags}")


def _run_one(job: tuple[StackConfig, str]) -> StackResult:
    cfg, out = job
    import time

    out_dir = Path(out)
    t0 = time.monotonic()
    result = StackSim(cfg, out_dir).run()
    result.wall_s = time.monotonic() - t0
    if result.ok():
        shutil.rmtree(out_dir, ignore_errors=True)  # keep only what a failure needs
    result.results = {k: v for k, v in result.results.items() if k != "check"} | {
        "anomalies": _anomalies(result.results.get("check", {}))}
    return result


def _anomalies(check: dict) -> list[str]:
    """The named failures of a check, short: what a summary line needs."""
    out = []
    for r in check.get("results", []) if isinstance(check, dict) else []:
        if r.get("verdict") != "valid":
            kinds = r.get("anomaly_types") or [k["key"] for k in r.get("keys", [])
                                               if k.get("verdict") != "valid"][:3]
            out.append(f"{r.get('checker')}: {r.get('verdict')} {kinds}")
    return out


def run_seeds(configs: list[StackConfig], out_root: Path, jobs: int, on_result=None,
              names: list[str] | None = None, deadline: float | None = None
              ) -> list[StackResult]:
    """Each seed in a fresh worker process started with PYTHONHASHSEED=0, so string hashing,
    hence set iteration, is the same in every run: a seed replays bit for bit anywhere. Each
    run's directory is out_root/seed-N, or out_root/NAME with `names`. With `deadline` (a
    time.monotonic() value), stop at the first result after it; runs in flight are dropped."""
    import multiprocessing
    import os
    import time

    out_root.mkdir(parents=True, exist_ok=True)
    results = []
    saved = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"  # read by each spawned worker at its start-up
    try:
        with multiprocessing.get_context("spawn").Pool(max(1, jobs), maxtasksperchild=20) as pool:
            dirs = names or [f"seed-{c.seed}" for c in configs]
            for result in pool.imap(_run_one, [(c, str(out_root / d))
                                               for c, d in zip(configs, dirs, strict=True)]):
                results.append(result)
                if on_result is not None:
                    on_result(result)
                if deadline is not None and time.monotonic() >= deadline:
                    break  # leaving the pool's block terminates the workers
    finally:
        if saved is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = saved
    return results
