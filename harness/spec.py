"""A test is a value (Jepsen's test map): `TestSpec` holds everything needed to run a chaos test
or run it again. `tessera test` builds one from its arguments, `harness.chaos.run_test` consumes
it, test.json stores it (beside the facts of the run), and `tessera replay` reads it back.
"""

from __future__ import annotations

from typing import Any

import msgspec

CLIENT_MODES = ("node-bound", "smart")
# How a run's op starts are spread at its rate: evenly with jitter (Jepsen's stagger), or in
# bursts of several at one instant (harness.runner.Pacer)
PACINGS = ("even", "bursts")
PROVIDERS = ("netns", "hosts", "vagrant")
# `--fast-failure-detection`: the engine's failure detection at Raft-test speed, so a minute of
# faults holds dozens of elections (Kudu's defaults: 500 ms heartbeats, 1 s tablet server
# heartbeats), and the masters replace a silent tablet server's replicas after 5 s instead of
# Kudu's 300 s, so their re-replication (adds, tablet copies, removes) races the nemeses' kills,
# partitions and membership changes, as Jepsen's membership nemesis races a cluster's own.
# The one source of these values; daemon flags given with --flag win over them.
FAST_FAILURE_DETECTION: dict[str, Any] = {
    "raft_heartbeat_interval_ms": 100,
    "leader_failure_max_missed_heartbeat_periods": 3,
    "heartbeat_interval_ms": 200,
    "follower_unavailable_considered_failed_sec": 5.0,
}


# Tessera's daemon flags that are durations: `--time-scale` multiplies them (from the fast set,
# or else the engine's defaults) for hosts too slow for them, such as VMs under qemu's TCG.
TIMED_FLAGS = ("raft_heartbeat_interval_ms", "heartbeat_interval_ms",
               "follower_unavailable_considered_failed_sec", "catalog_manager_bg_task_wait_ms")


def scaled_timing(base: dict[str, Any], scale: float) -> dict[str, Any]:
    """The TIMED_FLAGS of `base` (the engine's default where `base` has none) times `scale`;
    the heartbeat kept a whole number of ticks."""
    from node.consensus import TICK_MS  # the heartbeat is a whole number of ticks
    from node.server.daemon_cli import FLAGS, OPTION, option_default

    out = dict(base)
    for key in TIMED_FLAGS:
        flag = key.replace("_", "-")
        default = FLAGS[flag][1]
        value = out.get(key, option_default(flag) if default is OPTION else default) * scale
        if key == "raft_heartbeat_interval_ms":
            value = max(TICK_MS, round(value / TICK_MS) * TICK_MS)
        out[key] = int(value) if key.endswith("_ms") else float(value)
    return out


def load_line(test: dict) -> str:
    """How a run's workers loaded the system, in the words of its report and progress line,
    from its test.json (or `TestSpec.to_dict()`): the rate and how its op starts were spread
    (runs recorded before --pacing were even), and how Tessera's workers wrote when not each on
    a handle of its own, since a grouping client meets grouped load only."""
    rate = test.get("rate")
    if rate is None:
        line = "not recorded"
    elif rate:
        pacing = "in bursts" if test.get("pacing") == "bursts" else "evenly paced"
        line = f"{rate:g} ops/s, {pacing}"
    else:
        line = "unpaced (each worker's next op as soon as its last ends)"
    writes = test.get("writes")
    return line + (f"; writes {writes}" if writes and writes != "own" else "")


class TestSpec(msgspec.Struct, frozen=True, kw_only=True):
    __test__ = False  # not a pytest class, whatever its name

    db: str = "tessera"  # the system under test (SYSTEMS)
    workload: str = "register"
    workload_options: dict[str, Any] = {}
    nemesis: list[str] = []  # fault package names (nemeses.registry)
    nemesis_interval: float = 10.0  # seconds between a fault's start and stop
    time_limit: float = 60.0  # seconds of workload
    concurrency: int = 0  # logical processes; 0 = 2 x hosts
    rate: float = 100.0  # ops/s over all processes; 0 = unlimited
    pacing: str = "even"  # PACINGS: how the rate's op starts are spread (harness.runner.Pacer)
    seed: int = 0  # of every process's op stream and of the fault plan
    client: str = "node-bound"  # node-bound: thread t talks to host t mod n; smart: any replica
    # How the workers' writes reach Tessera's client (workloads.base.WRITE_MODES): own, shared,
    # session-background, session-manual; given to the workload (`make_workload`)
    writes: str = "own"
    # Kudu's external consistency mode of Tessera's client (node.protocol.EXTERNAL_CONSISTENCY);
    # None: the client's default (client-propagated); given to the workload (`make_workload`)
    external_consistency: str | None = None
    flags: dict[str, Any] = {}  # daemon config keys for every node (the system's own)
    fast_failure_detection: bool = False
    op_timeout: float = 5.0
    # Every timing of the run times this: the daemons' (TIMED_FLAGS), the clients' attempts and,
    # unless given, the op timeout. For slow hosts (TCG guests): slowness is not a fault.
    time_scale: float = 1.0
    provider: str = "netns"
    hosts: int = 5  # netns: how many
    hosts_file: str | None = None  # hosts provider: TOML file of hosts
    # hosts provider, inline (Jepsen's --nodes): HOST[:PORT] items. Not "nodes": test.json
    # uses that key for the hosts the run used.
    inline_nodes: list[str] = []
    username: str = "root"  # with inline_nodes: the SSH user
    ssh_private_key: str | None = None  # with inline_nodes: the SSH key (default: ~/.ssh's)
    store: str = "store"
    wheelhouse: str | None = None  # prebuilt wheels instead of building them
    leave_db_running: bool = False  # Jepsen's: no teardown at the end, for a post-mortem
    # The operator's CA (--ca-cert/--ca-key) for the cluster's certificates; None: a new one.
    ca_cert: str | None = None
    ca_key: str | None = None

    def claiming(self) -> TestSpec:
        """This spec with a transactional workload judged by the model its system claims with
        its flags (Deployment.claimed_model), unless --consistency-model named one: MariaDB at
        REPEATABLE READ claims repeatable read, not strict serializability, and is invalid only
        for what that forbids. Recorded in test.json, so replay and Spark judge alike; the
        default model is left unwritten, as runs recorded before the option have it."""
        from harness.systems import system
        from reports.checkers.consistency import DEFAULT_MODEL
        from workloads import model_judged

        if self.workload not in model_judged() or "consistency_model" in self.workload_options:
            return self
        claim = system(self.db).claimed_model(dict(self.flags))
        if claim == DEFAULT_MODEL:
            return self
        return msgspec.structs.replace(
            self, workload_options={**self.workload_options, "consistency_model": claim})

    def make_workload(self):
        """The run's workload: --workload with its --workload-option values, --writes and
        --external-consistency."""
        from workloads import make

        return make(self.workload, writes=self.writes,
                    external_consistency=self.external_consistency, **self.workload_options)

    def daemon_flags(self) -> dict[str, Any]:
        """What every daemon's config gets: the fast failure-detection set (Tessera's timings
        scaled by time_scale), then --flag."""
        base = dict(FAST_FAILURE_DETECTION) if self.fast_failure_detection else {}
        if self.time_scale != 1 and self.db == "tessera":
            base = scaled_timing(base, self.time_scale)
        return {**base, **self.flags}

    def to_dict(self) -> dict:
        return msgspec.to_builtins(self)

    @classmethod
    def from_dict(cls, d: dict) -> TestSpec:
        """The spec within a test.json (which also holds facts of the run, ignored here)."""
        fields = set(cls.__struct_fields__)
        return msgspec.convert({k: v for k, v in d.items() if k in fields}, cls)
