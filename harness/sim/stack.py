"""The whole engine under deterministic simulation (`tessera sim --stack full`).

The production masters, tablet servers and client library run unchanged on a SimLoop: their
transport is SimNetwork (in-memory TCP), their disks are SimDisks (page cache, crash loses what
was not fsynced), their timers and clocks are virtual, and every random choice comes from the
seed. A seed is one run: boot 3 masters and 5 tablet servers, create the test table through the
client, run a workload through the real runner with node-bound clients while a nemesis crashes
servers (losing unfsynced data), partitions, resets connections, skews clocks within the bound,
changes membership, transfers leadership, flips bits on disk, damages files (truncated, a
sector zeroed, lost, misplaced: harness.sim.stack_damage), and gives disks ENOSPC, fsync EIO
or slow fsync for a while (then reboots the server, as an operator would); heal; final reads;
then the project's checker judges the history. Invariants are checked on the live servers every
`INVARIANT_PERIOD_S` of virtual time: Raft's (one leader per term, terms and votes never go
back, one committed entry per index, one state per applied index, one config per committed
config index), tombstones never resurrected, and the catalog agreeing with the tablets'
committed configs (also once more after the final settle, when it must have caught up).

Replay: the same seed gives the same run bit for bit, provided string hashing is fixed
(PYTHONHASHSEED; `tessera sim --stack full` sets it). Nothing here reads the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import hashlib
import itertools
import json
import logging
import random
import shutil
import sys
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.sim import (
    stack_change_retry,
    stack_config_race,
    stack_copy_behind,
    stack_copy_cut,
    stack_copy_delete,
    stack_damage,
    stack_ddl,
    stack_dying_disk,
    stack_forge,
    stack_lose,
    stack_maintenance,
    stack_master_cut,
    stack_masters,
    stack_overtake,
    stack_recopy,
    stack_reprovision,
    stack_server_cut,
    stack_tombstone_rot,
    stack_unsafe,
)
from harness.sim.disk import SimDisk
from harness.sim.loop import SYSTEM, SimLoop
from harness.sim.network import SimNetwork
from harness.sim.stack_checks import DATA_DIR, Invariants, StackViolation
from harness.sim.stack_damage import baseline_faults
from harness.sim.stack_faults import FaultChooser
from harness.sim.stack_frame import frame_options
from harness.sim.stack_masters import MASTER_PORT, TSERVER_PORT
from harness.sim.stack_masters import SKIPPED as _SKIPPED
from harness.sim.stack_replication import check_replication, newest_configs
from harness.sim.swarm import CLASSIC, Mix, runs_unpaced
from node import probes
from node.faults import Faults
from node.rpc.errors import ErrorCode
from reports.checkers.registry import checker_modules

# Virtual addresses: they exist only in SimNetwork, never on a socket. Taken from the project's
# test subnet anyway (above the netns hosts' .11-.15), so a mistake could not reach anyone else.
CLIENT_HOST = "10.77.0.200"
EPOCH_NS = 1_800_000_000 * 10**9  # virtual wall clocks start here (2027): never the real time
INVARIANT_PERIOD_S = 0.1
LEASE_CHECK_PERIOD_S = 0.01  # lease mode: the lease check alone, between the others
# Per key: a failing register history can make the linearizability search explode; a search
# that runs out says unknown, which fails the seed (never a pass).
CHECK_TIME_LIMIT_S = 5.0
SETTLE_S = 5.0  # after the last op, before the final state comparison
STATE_CHECK_EVERY = 2  # invariant rounds between state checksums (they cost O(rows))
# the replicas' bound (a mix may set another, `clock=`); skew stays within half of it either way
CLOCK_MAX_ERROR_US = 1_000
# Every server's and the client's RPC frame limit. Smaller than a daemon's (64 MiB) so wide
# values reach it cheaply; above a copy chunk (4 MiB) and an AppendEntries batch (1 MiB).
MAX_FRAME = 8 << 20
# The replicas' snapshot and retention bounds in MiB (the engine's are 1024 each, Kudu's
# flush_threshold_mb): here the disks and every replica's log are one process's memory, and
# a seed of wide values (up to MAX_FRAME each) holds gigabytes under the engine's bounds
SNAPSHOT_MB, RETAIN_MB = 32.0, 16.0
# After the heal, every tablet of the test table must take a write within this (`_probe_liveness`)
LIVENESS_S = 30.0
REPLICATION_FACTOR = 3  # the test table's (harness.sim.stack_replication checks it at the end)
# The simulated disks are memory: past this many bytes on all of them together a seed stops,
# unknown, rather than take its worker process (and with it the whole run) out of memory.
DISK_BUDGET_BYTES = 6 << 30
# A worker's address space: a seed that outgrows it anyway fails with MemoryError, unknown with
# that reason, instead of the kernel killing the worker, which a process pool never reports (the
# run then waits for ever for that seed) and which may take other processes with it.
WORKER_MEMORY_BYTES = 10 << 30
FAILED_AFTER_S = 5.0  # masters re-replicate a silent server's replicas after this (fast, as CI)
RECONCILE_MS = 2000  # masters' background task period (Kudu: 1000)


@dataclass
class StackConfig:
    seed: int
    workload: str = "register"  # or list-append
    seconds: float = 60.0  # virtual seconds of workload under faults
    masters: int = 3
    tservers: int = 5
    concurrency: int = 5
    rate: float = 50.0  # ops/s over all workers
    # Which faults fire, how often, and the read mode (harness.sim.swarm): the fixed mix by
    # default, each seed's own with swarm_mix(seed) (`tessera sim --mix swarm`)
    mix: Mix = CLASSIC
    # Replay exactly these [virtual time, kind, value] faults instead of random ones (shrinking)
    schedule: tuple | None = None
    faults: Faults = field(default_factory=Faults)  # engine fault flags (mutants)
    # How the workers' writes reach the client (Workload.writes: own, shared,
    # session-background, session-manual, session-sync); `own` leaves it to the mix
    # (harness.sim.swarm.WRITES).
    # Workers run unpaced with `shared`, whose writes share a turn only back to back.
    writes: str = "own"
    batch: int = 0  # ops per batch of the session modes (Workload.batch; 0: its default)
    value_sizes: str = "small"  # or wide, zeros: register values (workloads.values)

    def __post_init__(self) -> None:
        from workloads.base import SESSION_MODES, WRITE_MODES

        if self.writes not in WRITE_MODES:
            raise ValueError(f"writes={self.writes!r}: one of {', '.join(WRITE_MODES)}")
        if self.batch and self.writes not in SESSION_MODES:
            raise ValueError(f"batch={self.batch} sizes the batches of writes "
                             f"{' or '.join(SESSION_MODES)}, not {self.writes}")


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
    # each flipped host -> what the flip did: the server refused to start, tablets FAILED (the
    # corruption was detected), or nothing seen (the bit was in a file never read again)
    flips: dict = field(default_factory=dict)
    catalog_lag: list = field(default_factory=list)  # tablets whose catalog config lagged at the end
    mix: dict = field(default_factory=dict)  # the fault mix the seed ran (Mix.as_json)
    probes: dict = field(default_factory=dict)  # code probe -> hits in this seed (node.probes)

    def ok(self) -> bool:
        return self.violation is None and self.verdict == "valid"

    def judged(self) -> str:
        """The seed's verdict with its invariants: a broken invariant is invalid whatever the
        history's checkers said."""
        return "invalid" if self.violation is not None else self.verdict


def master_hosts(n: int) -> list[str]:
    return [f"10.77.0.{101 + i}" for i in range(n)]


def tserver_hosts(n: int) -> list[str]:
    return [f"10.77.0.{111 + i}" for i in range(n)]


# The timed faults whose code lives in a module of their own, each taking the StackSim first
# (the other timed ones are StackSim's methods).
MODULE_FAULTS = {
    "masters": stack_masters.masters, "master-swap": stack_masters.master_swap,
    "swap-book": stack_masters.swap_book,
    "unsafe": stack_unsafe.unsafe_change, "ddl": stack_ddl.ddl,
    "torn": stack_damage.torn_tail, "damage": stack_damage.damage,
    "copy-cut": stack_copy_cut.copy_cut, "copy-delete": stack_copy_delete.copy_delete,
    "maintenance": stack_maintenance.maintenance, "recopy": stack_recopy.recopy,
    "garble": stack_forge.garble, "copy-shrink": stack_forge.copy_shrink,
    "lose": stack_lose.lose, "lose-snapshot": stack_lose.lose_snapshot,
    "change-retry": stack_change_retry.change_retry,
    "copy-behind": stack_copy_behind.copy_behind,
    "superblock-behind": stack_copy_behind.superblock_behind,
    "failed-behind": stack_copy_behind.failed_behind, "dying-disk": stack_dying_disk.dying_disk,
    "tombstone-rot": stack_tombstone_rot.tombstone_rot, "overtake": stack_overtake.overtake,
    "config-race": stack_config_race.config_race, "master-cut": stack_master_cut.master_cut,
    "server-cut": stack_server_cut.server_cut,
}


class StackSim:
    def __init__(self, config: StackConfig, out_dir: Path):
        self.cfg = config
        self.out_dir = out_dir
        self.rng = random.Random(f"stack/{config.seed}")
        self.net = SimNetwork(self.rng.getrandbits(64), unpartitioned=[CLIENT_HOST])
        self.loop = SimLoop(self.net)
        self.masters = master_hosts(config.masters)
        self.tservers = tserver_hosts(config.tservers)
        self.disks = {h: SimDisk(random.Random(self.rng.getrandbits(64)), self.disk_defaults())
                      for h in self.masters + self.tservers}
        self.skew_s = {h: 0.0 for h in self.disks}
        self.clock_error_us = config.mix.clock_error_us or CLOCK_MAX_ERROR_US
        self.servers: dict[str, object] = {}  # host -> the running server object, if up
        self.down: set[str] = set()
        self.nemesis_counts: dict[str, int] = {}
        # host -> the tablet (None: the server) whose damage must fail it loudly, and the damage
        self.must_fail: dict[str, tuple[str | None, str]] = {}
        self._rounds = 0
        self.violation: str | None = None
        self.client_error: str | None = None  # why the client's run stopped (setup never worked)
        self.client = None  # the client process's TesseraClient, for the membership nemesis
        self._removed: list[tuple[str, str]] = []  # (tablet, tserver uuid) removed by the nemesis
        self.events: list[list] = []  # [virtual time, kind, value] of each fault applied
        self.flipped: set[str] = set()  # servers whose disk had a bit flipped
        self.flip_outcomes: dict[str, str] = {}  # flipped host -> the first loud failure seen
        self.reprovisioned: set[str] = set()  # tablet servers wiped for a new uuid (reprovision)
        self.start_failures: dict[str, str] = {}  # host -> why its server refused to start
        self.disk_faults: dict[str, str] = {}  # host -> enospc | eio | slow, while it is on
        self.invariants = Invariants(self)  # what the checks remember of the live replicas
        self.faults = FaultChooser(self)  # which fault next, among those that apply now
        self.send_hooks: list = []  # faults shown each Raft message queued (`_observe_sent`)
        # the masters fault's fourth master: not a master until added (its disk and uuid then)
        self.spare = master_hosts(config.masters + 1)[-1]
        self.spare_uuid: str | None = None
        self.spare_removals = 0  # the masters fault's removals so far: every second is cut off
        self._spare_disks = random.Random(f"spare/{config.seed}")  # the run's stream untouched

    # -- servers -----------------------------------------------------------------------------
    def _wall_ns(self, host: str):
        return lambda: EPOCH_NS + int((self.loop.time() + self.skew_s[host]) * 1e9)

    def _options(self, host: str):
        from node.replica.replica import ReplicaOptions
        from node.server.base import ServerOptions

        master = host in self.masters
        frame, server = frame_options(self.cfg.mix)
        replica = ReplicaOptions(clock_max_error_us=self.clock_error_us,
                                 read_mode=self.cfg.mix.read_mode,
                                 wall_ns=self._wall_ns(host), faults=self.cfg.faults,
                                 log=stack_damage.log_options(self, host),
                                 rpc_max_message_size=frame or MAX_FRAME,
                                 snapshot_interval_mb=SNAPSHOT_MB, log_retain_mb=RETAIN_MB,
                                 **_mix_options(self.cfg.mix),
                                 **_timing(self.cfg.mix, sorted(self.disks), host))
        return ServerOptions(
            data_dir=DATA_DIR, rpc_host=host,
            rpc_port=MASTER_PORT if master else TSERVER_PORT,
            masters=[(m, MASTER_PORT) for m in self.masters], replica=replica,
            follower_unavailable_considered_failed_sec=FAILED_AFTER_S,
            # the reconciler's period when the recorded seeds (tests, replays) were found
            catalog_manager_bg_task_wait_ms=RECONCILE_MS,
            seed=self.rng.getrandbits(64), disk=self.disks[host], local_host=host,
            rpc_max_inflight_per_conn=self.cfg.mix.inflight or ServerOptions.rpc_max_inflight_per_conn,
            observe_outgoing=functools.partial(_observe_sent, self, host), **server,
            **stack_copy_cut.copy_options(self.cfg.mix))

    def disk_defaults(self):
        """A new SimFaults for a disk of this run when no fault is injected (each disk its own:
        a disk's faults change in place while a fault is on)."""
        return baseline_faults(self.cfg.mix)

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
        except (CorruptionError, OSError) as e:  # OSError: a full or failing disk
            self.start_failures[host] = f"{type(e).__name__}: {e}"
            if host in self.flipped and host not in self.flip_outcomes:
                self.flip_outcomes[host] = f"refused to start: {self.start_failures[host]}"

    def _crash(self, host: str, lose_unsynced: bool = False, keep_cache: bool = False) -> None:
        """The process dies mid-step and its disk forgets what was not fsynced: a seeded prefix
        of it survives, or with `lose_unsynced` none (a power loss drops the whole cache); with
        `keep_cache` (the `kill` fault: the machine stays up) all of it survives (SimDisk.kill)."""
        self.loop.crash_host(host)
        disk, rng = self.disks[host], None if keep_cache else random.Random(self.rng.getrandbits(64))
        self.disks[host] = disk.kill() if keep_cache else disk.crash(None if lose_unsynced else rng)
        self.servers.pop(host, None)
        self.down.add(host)
        self.invariants.crashed(host)

    # -- invariants --------------------------------------------------------------------------

    async def _invariant_loop(self) -> None:
        lease_checks = (round(INVARIANT_PERIOD_S / LEASE_CHECK_PERIOD_S)
                        if self.cfg.mix.read_mode == "lease" else 1)
        while True:
            try:
                for _ in range(lease_checks - 1):
                    await asyncio.sleep(INVARIANT_PERIOD_S / lease_checks)
                    self.invariants.check_leases()
                await asyncio.sleep(INVARIANT_PERIOD_S / lease_checks)
                self._rounds += 1
                self.invariants.check(states=self._rounds % STATE_CHECK_EVERY == 0)
                held = sum(d.bytes_held() for d in self.disks.values())
                if held > DISK_BUDGET_BYTES:
                    self.client_error = (
                        f"stopped at {self.loop.time():.1f} virtual s: the simulated disks hold "
                        f"{held / (1 << 30):.1f} GiB, past the simulator's budget of "
                        f"{DISK_BUDGET_BYTES / (1 << 30):g} GiB (they are memory)")
                    return
            except StackViolation as e:
                self.violation = str(e)
                return
            except MemoryError:
                self.client_error = self._out_of_memory()
                return
            except Exception as e:  # a check that cannot run must not pass quietly
                self.violation = f"invariant check crashed: {type(e).__name__}: {e}"
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
        timed = {kind: functools.partial(fault, self) for kind, fault in MODULE_FAULTS.items()}
        timed.update({"transfer": self._transfer, "tombstone": self._tombstone,
                      "copy-race": self._copy_race, "lease-race": self._lease_race,
                      "fail-copy": self._fail_copy})
        while self.loop.time() < deadline:
            if planned is None:
                await asyncio.sleep(rng.uniform(*self.cfg.mix.fault_every_s))
                kind, value = self.faults.choose(rng)
            elif planned:
                at, kind, value = planned.pop(0)
                await asyncio.sleep(max(0.0, at - self.loop.time()))
            else:
                return
            if self.loop.time() >= deadline:
                return
            if kind == "membership":
                value = await self._membership(rng, value)
            elif kind in timed:
                value = _spoken_rightly(kind, await timed[kind](value))
            elif kind is not None:
                value = self._apply(kind, value)
            if kind is None or value is _SKIPPED:
                continue
            self.events.append([round(self.loop.time(), 6), kind, value])
            self._count(kind)
            rec.record("nemesis", "info", kind, value)

    async def _tombstone(self, value: list, cas: int | None = None):
        """ts.delete_tablet (with `cas`, an eviction's) on `value[0]`'s replica on `value[3]`: a
        voter becomes a tombstone without leaving the config. Errors are recorded, not raised."""
        from node.protocol import Ack, DeleteTablet
        from node.rpc import RpcError

        tablet, host = value[0], value[3]
        server = self.servers.get(host)
        if server is None or host in self.down or getattr(server, "uuid", None) is None:
            return _SKIPPED
        try:
            await self.client.rpc.call((host, TSERVER_PORT), "ts.delete_tablet",
                                       DeleteTablet(tablet, cas), Ack, to_uuid=server.uuid,
                                       timeout=5.0)
        except (RpcError, TimeoutError, OSError) as e:
            return [*value[:8], f"failed: {e or type(e).__name__}"]
        return value[:8]

    async def _copy_race(self, value: list):
        """Cut L-F, slow R's disk (unless it has a disk fault already), then tombstone R (see
        `_choose_copy_fault`)."""
        tablet, leader, f, r, slow, cut_s, delay, after = value[:8]
        self._cut(leader, f, cut_s)
        self.net.slow(leader, r, delay)
        self.loop.call_later(cut_s, self.net.slow, leader, r, 0.0, context=SYSTEM)
        await asyncio.sleep(after)
        if r not in self.disk_faults:
            self._set_disk_fault(r, "slow", [r, "slow", round(slow / 10, 6), slow])
        done = await self._tombstone(value)
        return value[:8] if done is _SKIPPED else done

    async def _lease_race(self, value: list):
        """Cut L-F, tombstone R `after` s later, then slow R's disk (see `_choose_copy_fault`)."""
        tablet, leader, f, r, slow, cut_s, _, after = value[:8]
        self._cut(leader, f, cut_s)
        await asyncio.sleep(after)
        done = await self._tombstone(value)
        if r not in self.disk_faults:
            self._set_disk_fault(r, "slow", [r, "slow", round(slow / 10, 6), slow])
        return value[:8] if done is _SKIPPED else done

    async def _fail_copy(self, value: list):
        """Cut L-F; `lag` s later R loses power, a bit flips in a batch of its WAL for the
        tablet and R boots with the replica FAILED; R's replica is deleted, its disk made slow,
        and L crashes `after` s later, while copying the tablet back to R (see
        `_choose_copy_fault`). Recorded with the flip: [..., path, offset, bit]."""
        tablet, leader, f, r, slow, cut_s, lag, after = value[:8]
        self._cut(leader, f, cut_s)
        await asyncio.sleep(lag)
        if r in self.down or leader in self.down:
            return [*value[:8], "skipped: a host is down"]
        flip = stack_damage.flip_wal_batch(self, r, tablet)
        if flip is None:
            return [*value[:8], "skipped: no WAL batch on R"]
        await asyncio.sleep(0.2)  # R's start-up opens the replica, FAILED
        done = await self._tombstone(value)
        if done is _SKIPPED:
            return [*value[:8], "skipped: R did not start", *flip]
        if r not in self.disk_faults:
            self._set_disk_fault(r, "slow", [r, "slow", round(slow / 10, 6), slow])
        await asyncio.sleep(after)
        if leader not in self.down:
            self._crash(leader)
        return [*done, *flip]

    def _boot_if_down(self, host: str) -> None:
        if host in self.down:  # a restart fault may have booted it meanwhile
            self._boot(host)

    def _cut(self, a: str, b: str, seconds: float) -> None:
        """Cut the link a-b for `seconds` (a heal meanwhile ends it sooner)."""
        self.net.cut(a, b)
        self.loop.call_later(seconds, self.net.uncut, a, b, context=SYSTEM)

    async def _transfer(self, value: list):
        """consensus.leader_step_down on `host` for `tablet`, as an operator's tool would call it. Its
        errors (not the leader any more, an unknown voter) are recorded, not raised."""
        from node.protocol import Ack, LeaderStepDown
        from node.rpc import RpcError

        host, tablet, new = value[:3]
        server = self.servers.get(host)
        if server is None or host in self.down or getattr(server, "uuid", None) is None:
            return _SKIPPED
        port = MASTER_PORT if host in self.masters else TSERVER_PORT
        try:
            await self.client.rpc.call((host, port), "consensus.leader_step_down",
                                       LeaderStepDown(tablet, new), Ack, to_uuid=server.uuid,
                                       timeout=5.0)
        except (RpcError, TimeoutError, OSError) as e:
            return [host, tablet, new, f"failed: {e or type(e).__name__}"]
        return [host, tablet, new]

    def _set_disk_fault(self, host: str, mode: str, value: list) -> None:
        _set_disk_faults(self.disks[host], mode, value)
        self.disk_faults[host] = mode

    def _clear_disk_fault(self, host: str, reboot: bool = True) -> str | None:
        """The disk works again; a server whose disk failed is rebooted (its replicas may have
        failed, loudly, and stay so until they are opened again), unless `reboot` is False (a
        transient failure the server runs through). The fault's mode, if any."""
        mode = self.disk_faults.pop(host, None)
        if mode is None:
            return None
        faults = self.disks[host].faults  # shared by the disk's incarnations
        defaults = self.disk_defaults()
        faults.quota_bytes, faults.fsync_eio_rate = defaults.quota_bytes, defaults.fsync_eio_rate
        faults.fsync_dir_eio_rate = defaults.fsync_dir_eio_rate
        faults.fsync_latency, faults.fill = defaults.fsync_latency, defaults.fill
        if reboot and mode != "slow" and host not in self.down:
            self._crash(host)
            self._boot(host)
        return mode

    def _apply(self, kind: str, value):
        """Apply one fault; _SKIPPED if it cannot apply now (a replayed crash of a host that is
        already down). Returns the value to record."""
        if kind in ("crash", "kill"):
            if value in self.down:
                return _SKIPPED
            self._crash(value, keep_cache=kind == "kill")
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
        elif kind == "cut":
            self._cut(value[1], value[2], value[5])
        elif kind == "heal":
            self.net.heal()
        elif kind == "delay":
            _delay_host(self, *value)
        elif kind == "reset":
            pair = self.net.reset_random_connection()
            return [list(a) for a in pair] if pair else _SKIPPED
        elif kind in ("skew", "drift"):
            self.skew_s[value[0]] = value[1]
        elif kind in ("disk", "full"):
            if value[0] in self.disk_faults:
                return _SKIPPED
            self._set_disk_fault(value[0], value[1], value)
        elif kind == "disk-clear":
            mode = self._clear_disk_fault(value[0])
            return [value[0], mode] if mode else _SKIPPED
        elif kind == "flip":  # media corruption, then a reboot that reads it back
            host = value[0]
            at = (value[2], value[3]) if len(value) > 1 else None
            path, offset, bit = self.disks[host].flip_bit(path=value[1] if at else None, at=at)
            self.flipped.add(host)
            if host not in self.down:
                self._crash(host)
            self._boot(host)
            return [host, path, offset, bit]
        elif kind == "flip-newest":
            return stack_damage.flip_newest(self, value)
        elif kind == "reprovision":
            return stack_reprovision.reprovision(self, value, self.disk_defaults())
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
        cleared = {host: self._clear_disk_fault(host) for host in sorted(self.disk_faults)}
        down = sorted(self.down)
        for host in down:
            self._boot(host)
        rec.record("nemesis", "info", "heal-all", {"restarted": down, "disks": cleared})

    # -- the run -----------------------------------------------------------------------------
    @property
    def _writes(self) -> str:
        """How the workers' writes reach the client: asked for, else drawn by the mix."""
        return self.cfg.writes if self.cfg.writes != "own" else self.cfg.mix.writes

    @property
    def _value_sizes(self) -> str:
        """Drawn by the mix, else asked for."""
        return self.cfg.mix.values or self.cfg.value_sizes

    def _workload(self):
        from workloads.list_append import ListAppend
        from workloads.register import Register

        # the mix's client per unit of work, with the renewals that make its units
        fresh = self.cfg.mix.fresh_clients and bool(self._session_ops)
        if self.cfg.workload == "register":
            share = self.cfg.mix.read_share
            return Register(writes=self._writes, batch=self.cfg.batch or self.cfg.mix.batch or 0,
                            session_ops=self._session_ops, fresh_clients=fresh,
                            value_sizes=self._value_sizes, value_buffers=self.cfg.mix.buffers,
                            value_max_bytes=frame_options(self.cfg.mix)[0] or MAX_FRAME,
                            value_seed=self.cfg.seed,
                            **({} if share is None else {"read_share": share}))
        if self.cfg.value_sizes != "small":
            raise ValueError(f"value sizes {self.cfg.value_sizes!r} are for the register workload")
        return ListAppend(writes=self._writes, batch=self.cfg.batch or self.cfg.mix.batch or 0,
                          session_ops=self._session_ops, fresh_clients=fresh)

    @property
    def _session_ops(self) -> int:
        """The mix's renewal of shared sessions, for a session write mode (else none)."""
        from workloads.base import SESSION_MODES

        return (self.cfg.mix.renew or 0) if self._writes in SESSION_MODES else 0

    async def _client_main(self) -> list:
        from harness.recorder import Recorder
        from harness.runner import RunOptions, run
        from harness.systems.tessera.clients import (
            accept_test_table,
            workload_clients,
        )

        workload = self._workload()
        workload.external_consistency = self.cfg.mix.consistency
        new_client = _client_factory(self.masters, self.cfg.mix, self.rng)
        self.client = client = new_client()
        await accept_test_table(client, workload.tablets, REPLICATION_FACTOR, timeout=120.0)
        names = {h: f"ts{i + 1}" for i, h in enumerate(self.tservers)}
        rec = Recorder(self.out_dir / "history.jsonl",  # read once closed: buffered
                       now_ns=lambda: int(self.loop.time() * 1e9), flush=False)
        mix = self.cfg.mix
        unpaced = runs_unpaced(self._writes, self._value_sizes, mix.unpaced)
        rate = 0.0 if unpaced else mix.rate or self.cfg.rate
        opts = RunOptions(concurrency=mix.concurrency or self.cfg.concurrency, rate=rate,
                          time_limit=self.cfg.seconds, seed=self.cfg.seed, final_settle=5.0,
                          op_timeout=(mix.caller_timeout_ms or 5000) / 1000, final_timeout=60.0,
                          bursts=mix.bursts)
        binds = None if mix.smart else self.tservers  # smart: one client for all, to leaders
        clients, close_sessions = workload_clients(client, "test", names, binds, workload,
                                                   new_client)
        try:
            await run(workload, clients, rec, opts, nemesis=self._nemesis, heal=self._heal)
            await self._probe_liveness(client)
        finally:
            await close_sessions()
            rec.close()
            await client.close()
        return workload

    async def _probe_liveness(self, client) -> None:
        """After the heal, every tablet of the test table takes a write (a key of its own
        outside the workload's, not in the history) within LIVENESS_S. A tablet that stopped
        committing (once, an entry no follower would take) otherwise passes: its
        ops time out as info, which no checker holds against it. Excused: tablets with a
        replica FAILED or on a server whose disk had a bit flipped, whose majority a detected
        corruption may have taken for good."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LIVENESS_S
        table, stuck, locs = client.table("test"), {}, None
        while locs is None:
            try:
                locs = await client.locations("test", refresh=True)
            except Exception as e:  # masters still electing after the heal: try again
                if loop.time() > deadline:
                    self.violation = self.violation or (
                        f"liveness: no locations of the test table within {LIVENESS_S:g} s of "
                        f"the heal: {type(e).__name__}: {e}"[:500])
                    return
                await asyncio.sleep(0.5)
        for t in locs.tablets:
            key = next(k for k in (f"_live{i}" for i in range(10_000)) if t.partition.contains(k))
            while True:
                try:
                    await table.write(key, 1)
                    break
                except Exception as e:  # any error: try again until the deadline
                    if loop.time() > deadline:
                        stuck[t.tablet_id] = f"{type(e).__name__}: {e}"[:300]
                        break
                    await asyncio.sleep(0.5)
        excused = {tid for s in self.servers.values()
                   for tid, r in getattr(s, "replicas", {}).items() if r.failed}
        excused |= {t.tablet_id for t in locs.tablets
                    if {p.host for p in t.replicas} & (self.flipped | set(self.start_failures))}
        stuck = {tid: why for tid, why in stuck.items() if tid not in excused}
        if stuck and self.violation is None:
            self.violation = (f"liveness: {len(stuck)} tablet(s) took no write within "
                              f"{LIVENESS_S:g} s of the heal: {stuck}")
        judged = {t.tablet_id for t in locs.tablets} - excused
        over = await check_replication(self.servers, judged, REPLICATION_FACTOR)
        moved = stack_master_cut.moved_by_master_cut(self.cfg.mix.kinds(),
                                                     newest_configs(self.servers, judged))
        self.violation = self.violation or over or moved

    async def _main(self):
        """The client's workload; None if an invariant stopped the run first or the client
        could not run (`client_error` says why), so the seed has an outcome, never a crash."""
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
            self.invariants.check(states=True)
            self.invariants.check_catalog(final=True)
            self.invariants.check_master_lists()
        except StackViolation as e:
            self.violation = str(e)
        except MemoryError:
            self.client_error = self._out_of_memory()
            return None
        except Exception as e:
            self.violation = f"invariant check crashed: {type(e).__name__}: {e}"
        if client.exception() is not None:  # e.g. the test table never became writable
            self.client_error = self._stopped_because(client.exception())
            return None
        return client.result()

    def _out_of_memory(self) -> str:
        """Why a seed whose invariant check ran out of memory ends unknown: its worker's bound
        was reached, which says nothing of the engine (a crashed check is otherwise a
        violation, so that a check that cannot run never passes quietly)."""
        return (f"stopped at {self.loop.time():.1f} virtual s: the invariant check ran out of "
                "memory (the seed outgrew its worker's bound)")

    def _stopped_because(self, e: BaseException) -> str:
        """Why the client's run stopped, with every FAILED replica's own error: the evidence a
        setup that never worked leaves."""
        failed = [f"{host} {rep.tablet_id}: {rep.error}" for host, server in sorted(self.servers.items())
                  if getattr(server, "me", None) is not None
                  for rep in server.reports() if rep.state == "FAILED" or rep.error]
        return f"{type(e).__name__}: {e}" + (f"; FAILED replicas: {'; '.join(failed)}"
                                             if failed else "")

    def run(self) -> StackResult:
        from reports.checkers.verdict import judge
        from reports.history import read_jsonl

        _fresh_out_dir(self.out_dir)
        # setLevel, not `.level =`: it also clears the loggers' cached levels, which would
        # otherwise keep every node.* logger silent after the run.
        quiet = logging.getLogger("tessera")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        node_log = logging.getLogger("node")
        node_level = node_log.level
        node_log.setLevel(logging.CRITICAL)
        probes.enable()  # this seed's own counts: every server of the seed is in this process
        try:
            workload = self.loop.run_until_complete(self._main())
            if self.loop.unread_task_errors and self.violation is None:
                self.violation = ("a task ended with an error no one read, a failure nothing "
                                  "but a log saw: " + "; ".join(self.loop.unread_task_errors[:3]))
            if (raised := probes.alarms()) and self.violation is None:
                self.violation = "alarm: " + "; ".join(
                    f"{probes.ALARMS[name]} ({name}, {n}x)" for name, n in sorted(raised.items()))
        finally:
            hits = probes.hits()
            probes.disable()
            virtual_s = self.loop.time()
            self.loop.close()
            # Tasks cancelled by the teardown are collected later; nothing can read them now.
            self.loop.set_exception_handler(lambda _loop, _context: None)
            quiet.setLevel(level)
            node_log.setLevel(node_level)
            _bury(self.loop)
        history = self.out_dir / "history.jsonl"
        ops = read_jsonl(history) if history.exists() else []
        # A swarm mix may starve the cluster for the whole run by design, the classic one by
        # its draws; availability is judged after the heal instead (`_probe_liveness`).
        results = (judge(ops, workload.checker, self.invariants.clock_checks(ops),
                         starvation_by_design=_starved(self.cfg, ops),
                         time_limit=CHECK_TIME_LIMIT_S)
                   if workload is not None else {"verdict": "unknown"})
        if self.client_error is not None:
            results["error"] = self.client_error
        sha = hashlib.sha256(history.read_bytes()).hexdigest() if history.exists() else ""
        (self.out_dir / "schedule.json").write_text(json.dumps(self.events) + "\n")
        flips = {h: self.flip_outcomes.get(h, "no failure seen") for h in sorted(self.flipped)}
        return StackResult(self.cfg.seed, results["verdict"], self.violation, results,
                           sum(1 for o in ops if o.type == "ok"), round(virtual_s, 3), sha,
                           dict(sorted(self.nemesis_counts.items())), self.events,
                           flips=flips, catalog_lag=self.invariants.catalog_lag,
                           mix=self.cfg.mix.as_json(), probes=hits)


def _observe_sent(sim: StackSim, host: str, tablet: str, to_uuid: str, messages: list) -> None:
    """Every Raft message a server queues (ServerOptions.observe_outgoing), before it is
    written: the checks see it, then any fault watching for one (`StackSim.send_hooks`, e.g.
    harness.sim.stack_overtake, which slows a flow as a vote request enters it)."""
    sim.invariants.observe_sent(host, tablet, to_uuid, messages)
    for hook in sim.send_hooks:
        hook(host, tablet, to_uuid, messages)


def _client_factory(masters: list[str], mix, rng: random.Random):
    """What makes the client process's TesseraClients: its first, and one more per renewed
    session with the mix's fresh clients (Workload.fresh_clients), each seeded from `rng`."""
    from harness.systems.tessera.clients import client_mode
    from node.client import TesseraClient
    from node.rpc import RpcClient

    def new_client():
        return TesseraClient([(m, MASTER_PORT) for m in masters],
                             timeout=(mix.client_timeout_ms or 5000) / 1000,
                             rpc=RpcClient(connect_timeout=1.0, local_host=CLIENT_HOST,
                                           max_frame=MAX_FRAME, **_client_inflight(mix)),
                             rng=random.Random(rng.getrandbits(64)),
                             external_consistency=client_mode(mix.consistency))

    return new_client


def _fresh_out_dir(out_dir: Path) -> None:
    """A seed's directory, with no history of an earlier run in it: the history file is
    appended to, and a failed seed's directory is kept, so a replay into it would judge both
    runs' operations as one history."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "history.jsonl").unlink(missing_ok=True)


def _starved(cfg: StackConfig, ops: list) -> bool:
    """Whether Jepsen's rule (an op type that never succeeded makes the run invalid) is lifted
    for this seed: always for a swarm mix, whose faults may starve the cluster for the whole
    run by design; for the classic mix when its draws did, no op succeeding for half the
    workload's time or more (it drew a power loss of every tablet server, and no restart
    until the heal: one seed of the nightly matrix's 90, whose 15 compare-and-sets in its
    first second all failed on values that had moved, was judged invalid for it). A classic
    seed in which the cluster answered throughout keeps the rule, so an engine that failed
    every compare-and-set of a seed is still caught there."""
    if cfg.mix.name != "classic":
        return True
    client = [o.time for o in ops if o.process != "nemesis" and o.time is not None]
    if not client:
        return True
    marks = [min(client), *sorted(o.time for o in ops if o.type == "ok" and o.time is not None
                                  and o.process != "nemesis"), max(client)]
    return max(b - a for a, b in itertools.pairwise(marks)) >= cfg.seconds * 1e9 / 2


def replay_command(cfg: StackConfig, faults: list[str] = (), schedule: Path | None = None) -> str:
    flags = "".join(f" --fault {f}" for f in faults)
    if schedule is not None:
        flags += f" --schedule {schedule}"
    if cfg.writes != "own":
        flags += f" --writes {cfg.writes}"
    if cfg.batch:
        flags += f" --batch {cfg.batch}"
    flags += f" --mix {cfg.mix.name if cfg.mix.name in ('swarm', 'classic') else repr(cfg.mix.spec())}"
    if cfg.value_sizes != "small":
        flags += f" --value-sizes {cfg.value_sizes}"
    from node.client import faults as client_faults

    mutants = client_faults.FAULTS.enabled()  # a mutant run replays with its mutants on
    env = f"{client_faults.ENV}={','.join(mutants)} " if mutants else ""
    return (f"{env}tessera sim --stack full --seeds 1 --seed {cfg.seed} --workload "
            f"{cfg.workload} --seconds {cfg.seconds:g}{flags}")


def _quiet_fenced(unraisable) -> None:
    """sys.unraisablehook without abandoned coroutines' leftovers: a coroutine of a crashed
    host, or one still suspended when its seed's loop closed, is closed when collected, maybe
    during a later seed of the same worker, and its `finally` (a copy's cleanup, a lock's
    release) touches the host's fenced disk, a lock of the closed loop, or awaits and is
    refused. A real crash runs none of that code; nothing of it is evidence. Only abandoned
    coroutines are closed so: the live ones finish or are cancelled before the loop closes."""
    import inspect

    if not inspect.iscoroutine(unraisable.object):
        sys.__unraisablehook__(unraisable)


def _mix_options(mix: Mix) -> dict:
    """The replicas' options the mix sets: its snapshot interval (swarm SNAPSHOTS), the log
    keeping as many entries behind each, and the sessions a tablet keeps (SESSIONS); none
    for the engine's defaults."""
    from node.tablet.state import Limits

    n = mix.snapshot_every
    out = {"snapshot_interval_entries": n, "log_retain_entries": n} if n else {}
    bounds = {"max_sessions": mix.max_sessions, "max_results_per_session": mix.max_results}
    if any(bounds.values()):  # RESULTS: the results a session keeps
        out["session_limits"] = Limits(**{k: n for k, n in bounds.items() if n})
    return out


def _timing(mix: Mix, hosts: list[str], host: str) -> dict:
    """The mix's `missed` heartbeats before an election on every other server (by host order,
    masters and tablet servers alike), the rest on the engine's default."""
    if mix.missed is None or hosts.index(host) % 2 == 0:
        return {}
    return {"leader_failure_max_missed_heartbeat_periods": mix.missed}


def _set_disk_faults(disk: SimDisk, mode: str, value: list) -> None:
    """A disk fault's mode on `disk` (stack_faults `_choose_disk`, `full`)."""
    if mode == "enospc":
        disk.faults.quota_bytes = disk.usage() + value[2]
    elif mode == "full":  # as a real disk fills (SimFaults.fill): the usage counts it too
        disk.faults.fill = True
        disk.faults.quota_bytes = disk.usage() + value[2]
    elif mode == "eio":  # a failing disk fails a directory's sync as well as a file's
        disk.faults.fsync_eio_rate = disk.faults.fsync_dir_eio_rate = value[2]
    else:
        disk.faults.fsync_latency = (value[2], value[3])


def _client_inflight(mix: Mix) -> dict:
    """The client's calls in flight per connection: twice what the mix lets a server read."""
    return {"max_inflight_per_conn": 2 * mix.inflight} if mix.inflight else {}


def _delay_host(sim: StackSim, host: str, delay_s: float, for_s: float) -> None:
    """Every link of `host` (to the servers and the client) slowed by `delay_s` each way for
    `for_s`, or until a heal; the end leaves a link another fault slowed since alone."""
    def end(other: str) -> None:
        if sim.net.slowed(host, other) == delay_s:
            sim.net.slow(host, other, 0.0)

    for other in [*sim.disks, CLIENT_HOST]:
        if other != host:
            sim.net.slow(host, other, delay_s)
            sim.loop.call_later(for_s, end, other, context=SYSTEM)


# The worker's garbage collector: a seed allocates tens of millions of short-lived objects
# (handles, futures, messages) over a heap that grows to hundreds of MB, and at Python's
# defaults (700, 10, 10) collecting took about 15 % of a loaded seed. Young collections every
# 50,000 allocations instead of 700 cost that much less and held no more memory (a loaded
# seed's peak RSS within 1 MB); what a collection frees is garbage either way, so a seed's
# run is the same (its history sha is). 200,000 rather than 50,000: a young collection's cost
# is its survivors, and fewer of them survive the longer wait: a loaded 60 virtual s seed spent
# 0.83 s of CPU collecting instead of 1.23 s, its peak RSS 498 MB instead of 493 MB.
GC_THRESHOLDS = (200_000, 20, 10)


@contextlib.contextmanager
def _quiet_logs():
    loggers = [logging.getLogger(name) for name in ("tessera", "node")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _bury(loop: SimLoop) -> None:
    """Close a finished seed's abandoned coroutines now, quietly, with its probes off: its
    crashed hosts' (kept in the loop's graveyard) and those still suspended at the close. Left
    to the collector they were closed whenever it next ran: during a later seed, where their
    `except BaseException` blocks (a copy's) counted as its probes, or inside unrelated code of
    the same thread, where an unraisable error of a finalizer run in the middle of CPython
    3.11's ast.parse fails it ("AST constructor recursion depth mismatch", seen in a test run
    after a seed). The loop is closed by then, so a cleanup that starts a task (a copy's file
    step) fails to, and the coroutine it made for it is never awaited: quiet too, as the dead
    process's code was never meant to run again."""
    tasks = [*(t for proc in loop.graveyard for t in proc.tasks), *asyncio.all_tasks(loop)]
    hook, sys.unraisablehook = sys.unraisablehook, _quiet_fenced
    try:
        with _quiet_logs(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
            for task in tasks:
                if not task.done():
                    task._log_destroy_pending = False
                    with contextlib.suppress(BaseException):  # its cleanup awaits: refused
                        task.get_coro().close()
            loop.graveyard.clear()
            gc.collect()
    finally:
        sys.unraisablehook = hook


def _run_one(job: tuple[StackConfig, str]) -> StackResult:
    cfg, out = job
    import time

    sys.unraisablehook = _quiet_fenced  # a worker process of the simulator's own
    _bound_memory()
    gc.set_threshold(*GC_THRESHOLDS)

    out_dir = Path(out)
    t0 = time.monotonic()
    try:
        result = StackSim(cfg, out_dir).run()
    except Exception as e:  # a seed that breaks the simulator is that seed's outcome, unknown
        result = StackResult(cfg.seed, "unknown", None, {"error": _crash(e, out_dir)}, 0, 0.0,
                             "", {}, [])
    result.wall_s = time.monotonic() - t0
    if result.ok():
        shutil.rmtree(out_dir, ignore_errors=True)  # keep only what a failure needs
    check = result.results.get("check", {})
    result.results = {k: v for k, v in result.results.items() if k != "check"} | {
        "anomalies": _anomalies(check)}
    if check.get("error"):  # the checker could not judge: say why, not just "unknown"
        result.results["check_error"] = check["error"]
    return result


def _bound_memory() -> None:
    """This worker's address space at most WORKER_MEMORY_BYTES (never raised above a lower
    limit already set)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = WORKER_MEMORY_BYTES if hard == resource.RLIM_INFINITY else min(hard, WORKER_MEMORY_BYTES)
    if soft == resource.RLIM_INFINITY or soft > want:
        resource.setrlimit(resource.RLIMIT_AS, (want, hard))


def _crash(e: Exception, out_dir: Path) -> str:
    """One line for the seed's result, where it was raised included; the whole traceback in
    out_dir/crash.txt, which a failed seed keeps."""
    import traceback

    with contextlib.suppress(OSError):  # the directory itself may be what failed
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "crash.txt").write_text("".join(traceback.format_exception(e)))
    where = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
    at = f" (at {Path(where.filename).name}:{where.lineno})" if where else ""
    return f"the simulation crashed: {type(e).__name__}: {e}{at}"


def _anomalies(check: dict) -> list[str]:
    """The named failures of a check, short: what a summary line needs."""
    out = []
    for r in check.get("results", []) if isinstance(check, dict) else []:
        if r.get("verdict") != "valid":
            kinds = r.get("anomaly_types") or [k["key"] for k in r.get("keys", [])
                                               if k.get("verdict") != "valid"][:3]
            out.append(f"{r.get('checker')}: {r.get('verdict')} {kinds}")
    return out


# Answers that say the simulator, not the engine, is wrong: a method no server serves, a body
# that does not fit its schema. A fault that records one as "failed" never happened, and the
# seed would pass as if it had: the catalog's leadership transfers called a method masters did
# not serve, unnoticed, until this check. The seed ends unknown, with the fault's call named.
_MISSPOKEN = tuple(f"{c.name}:" for c in (ErrorCode.NO_SUCH_METHOD, ErrorCode.INVALID_REQUEST,
                                          ErrorCode.UNSUPPORTED_VERSION))


def _spoken_rightly(kind: str, value: object) -> object:
    """A fault's recorded value, unless a text of it carries a code of _MISSPOKEN: then the
    seed ends (RuntimeError, the seed unknown), naming the call."""
    texts = value if isinstance(value, list) else []
    wrong = next((t for t in texts if isinstance(t, str) and any(c in t for c in _MISSPOKEN)),
                 None)
    if wrong is not None:
        raise RuntimeError(f"the {kind} fault called the engine wrongly: {wrong}")
    return value


def run_seeds(configs: Iterable[StackConfig], out_root: Path, jobs: int, on_result=None,
              names: list[str] | None = None, deadline: float | None = None,
              stop=None) -> list[StackResult]:
    """Each seed in a fresh worker process with PYTHONHASHSEED=0, so string hashing, hence set
    iteration, is the same in every run: a seed replays bit for bit anywhere. Each
    run's directory is out_root/seed-N, or out_root/NAME with `names`. With `deadline` (a
    time.monotonic() value), stop there once one seed has finished, waiting for no other
    seed still running (a seed can take minutes of wall time): runs in flight are dropped.
    With `stop` (a predicate on a result), stop after the first result it holds true of. A
    seed whose worker process dies (a segfault, the OOM killer) is unknown with why, and the
    run goes on (harness.sim.seed_pool). `configs` may be a generator that chooses each next
    seed from the results before it (harness.sim.steer)."""
    from harness.sim.seed_pool import run_in_order

    out_root.mkdir(parents=True, exist_ok=True)
    if names is not None:
        jobs_args = ((c, str(out_root / d)) for c, d in zip(configs, names, strict=True))
    else:
        jobs_args = ((c, str(out_root / f"seed-{c.seed}")) for c in configs)
    return run_in_order(_run_one, jobs_args, jobs, _lost, deadline, on_result, stop, SEED_IMPORTS)


# What a seed imports as it runs (the servers, the client, the workloads' runner, every
# checker): imported once by the seed processes' fork server rather than by each seed (a
# quarter of a second a seed for the servers; the checkers, which a seed imports only when it
# judges its history, cost a matrix seed of 15 virtual s another 2 % of its CPU, most of it
# compiling their source where no bytecode cache is written)
SEED_IMPORTS = ("node.server.daemon", "node.master.server", "node.tserver.server", "node.client",
                "harness.recorder", "harness.runner", "reports.checkers.check", "reports.history",
                *checker_modules())


def _lost(job: tuple[StackConfig, str], why: str) -> StackResult:
    """A seed whose worker died: unknown, with why (harness.sim.seed_pool)."""
    return StackResult(job[0].seed, "unknown", None, {"error": why}, 0, 0.0, "", {}, [])
