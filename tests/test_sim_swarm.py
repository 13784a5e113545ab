"""Swarm fault mixes and the faults aimed at tablet copy in the whole-stack simulator,
and the seeds they found on the engine before its fixes."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest

from harness.sim.network import SimNetwork
from harness.sim.stack import StackConfig, StackSim, _quiet_fenced, baseline_faults, replay_command
from harness.sim.swarm import (
    ALL_BUNDLES,
    BUNDLED,
    CLASSIC,
    KINDS,
    LATE,
    WORKLOADS,
    WRITES,
    Mix,
    bundle_of,
    mix_for,
    parse_mix,
    swarm_mix,
    workload_for,
)

ROOT = Path(__file__).resolve().parent.parent
# The mix that found bugs 1 and 4: copy races only, at a pace of one every 0.3-1.5 s, with 20
# clients, so a leader keeps getting proposals while some of its clients wait on it.
COPY_RACE = "copy-race:4,restart:1,heal:1;every=0.3-1.5;reads=linearizable;load=20x200"
# The mix that found bug 2: lease races only, lease reads, a light read-mostly load (a tombstone
# grants a vote only to a candidate as up to date as itself, so no write may reach it between
# the cut and its tombstone).
LEASE_RACE = ("lease-race:4,restart:1,heal:1;every=0.3-1.5;reads=lease;load=5x50;"
              "read-share=0.99")
# Seed 145's swarm mix when it was found (swarm mixes drew from fewer kinds then).
SEED_145_MIX = ("restart:4,partition:2,isolate:4,heal:8,skew:1,flip:8,disk:1,transfer:2,cut:4,"
                "tombstone:1,copy-race:4;every=0.2-0.8;reads=lease;load=5x50")


def register_seed(seed: int, spec: str, seconds: float, out: Path):
    """A register seed of the whole-stack simulator under the mix `spec`, in this process."""
    return StackSim(StackConfig(seed=seed, workload="register", seconds=seconds,
                                mix=parse_mix(spec)), out).run()


def test_a_seeds_swarm_mix_is_a_pure_function_of_the_seed_and_varies_across_seeds():
    assert swarm_mix(7) == swarm_mix(7)
    assert all({"restart", "heal"} <= set(swarm_mix(s).kinds()) for s in range(200))
    assert all(set(swarm_mix(s).kinds()) <= set(KINDS) for s in range(200))
    mixes = [swarm_mix(s) for s in _unbundled(range(200))]  # bundles: tests/test_sim_swarm_reach.py
    # one kind alone, and all of them (the late kinds, each on in its own draw, aside: a seed
    # with every one of them on is too rare for 200 seeds; the bundled ones come only in a bundle)
    sizes = [len([k for k in m.kinds() if k not in LATE]) - 2 for m in mixes]
    assert min(sizes) == 1 and max(sizes) == len(KINDS) - 2 - len(LATE) - len(BUNDLED)
    assert all(any(k in m.kinds() for m in mixes) for k in LATE)
    assert {m.read_mode for m in mixes} == {"linearizable", "lease"}
    assert len({m.fault_every_s for m in mixes}) > 1 and len({m.concurrency for m in mixes}) > 1
    for kind in set(KINDS) - set(BUNDLED):  # every kind is hammered alone or nearly so by
        # some seed (the late kinds, each drawn on its own, aside)
        assert any(kind in m.kinds() and len([k for k in m.kinds() if k not in LATE]) <= 4
                   for m in mixes), kind


def test_a_mix_spec_round_trips_and_bad_specs_say_what_is_wrong():
    m = swarm_mix(3)
    again = parse_mix(m.spec())
    assert (again.weights, again.fault_every_s, again.read_mode, again.concurrency, again.rate) == (
        m.weights, m.fault_every_s, m.read_mode, m.concurrency, m.rate)
    assert m.describe() == f"swarm: {m.spec()}"
    assert mix_for("classic", 5) is CLASSIC and mix_for("swarm", 5) == swarm_mix(5)
    for bad, says in [("nope:1", "unknown fault kind"), ("crash:0", "positive integer"),
                      ("crash:1;every=4-1", "LO <= HI"), ("crash:1;speed=2", "unknown mix field"),
                      ("crash:1;reads=stale", "linearizable or lease"), ("", "at least one")]:
        with pytest.raises(ValueError, match=says):
            parse_mix(bad)


def test_a_bundle_that_sizes_values_runs_the_register_on_every_seed_unless_the_run_asks():
    """Value sizes are the register's: list-append appends integers. A bundle of wide values
    drawn by an odd seed ran list-append under it, its load for nothing; so did four bundles
    whose aims their list-append seeds never reached (the ensemble's bundle report); the lease
    bundle reads a register; the later ones keep the workload their fix or finding was measured on."""
    register = {"frame-split", "batch-refused", "forge-snapshot", "manual-fill", "shared-results",
                "late-answer", "swap-book", "superblock-behind", "config-race",
                "failed-behind", "master-cut", "server-cut"}
    for name, spec in ALL_BUNDLES.items():
        mix = parse_mix(spec)
        assert mix.workload == ("register" if name in register else None), name
        assert mix.values is None or mix.workload == "register", name
    odd = next(s for s in range(1, 1000, 2) if bundle_of(s) == "frame-split")
    assert workload_for(odd, swarm_mix(odd)) == "register"
    assert workload_for(odd, swarm_mix(odd), asked="list-append") == "list-append"
    assert [workload_for(s, CLASSIC) for s in (4, 7)] == list(WORKLOADS)
    assert parse_mix(swarm_mix(odd).spec()).workload == "register"
    with pytest.raises(ValueError, match="workload='bank'"):
        parse_mix("heal:1;workload=bank")


def test_the_classic_mix_draws_as_the_nemesis_always_did():
    """The recorded seeds (tests, the mutant table) were found with a uniform draw from this
    list: the classic mix must keep drawing exactly so."""
    import random

    old = ["crash", "crash", "power", "restart", "restart", "partition", "isolate", "heal",
           "reset", "skew", "membership", "membership", "flip", "disk", "transfer"]
    sim = StackSim(StackConfig(seed=1), Path("/nonexistent"))
    a, b = random.Random(9), random.Random(9)
    assert [sim.faults.draw_kind(a) for _ in range(300)] == [b.choice(old) for _ in range(300)]


def test_a_cut_link_and_a_slow_link_touch_that_pair_only():
    net = SimNetwork(1)
    net.cut("a", "b")
    assert not net.reachable("a", "b") and not net.reachable("b", "a")
    assert net.reachable("a", "c") and net.reachable("b", "c")
    net.uncut("a", "b")
    assert net.reachable("a", "b")
    net.slow("a", "b", 0.3)
    assert all(0.3 < net._delay("b", "a") <= 0.3 + net.latency[1] for _ in range(50))
    assert all(net._delay("a", "c") <= net.latency[1] for _ in range(50))
    net.cut("a", "b")
    net.heal()
    assert net.reachable("a", "b") and net._delay("a", "b") <= net.latency[1]


def test_replay_names_the_mix():
    assert replay_command(StackConfig(seed=3, mix=swarm_mix(3))).endswith("--mix swarm")
    assert replay_command(StackConfig(seed=3)).endswith("--mix classic")
    spec = replay_command(StackConfig(seed=3, mix=parse_mix(COPY_RACE)))
    assert spec.endswith(f"--mix '{parse_mix(COPY_RACE).spec()}'")


def test_the_cli_prints_each_seeds_mix_and_refuses_a_bad_one(tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "harness.cli", "sim", "--stack", "full",
                               *args], cwd=ROOT, capture_output=True, text=True, timeout=600)

    bad = cli("--seeds", "1", "--mix", "crash:1;every=x")
    assert bad.returncode == 254 and "--mix" in bad.stderr and "Traceback" not in bad.stderr
    named = f"{COPY_RACE};workload=register"
    clash = cli("--seeds", "1", "--mix", named, "--workload", "list-append")
    assert clash.returncode == 254 and "workload=register" in clash.stderr, clash.stderr
    assert bundle_of(2) == "copy-delete"  # a bundle's seed: the run says what it reached
    ok = cli("--seeds", "1", "--seed", "2", "--seconds", "5", "--out", str(tmp_path))
    assert ok.returncode == 0, ok.stderr
    assert f"seed 2 mix {swarm_mix(2).describe()}" in ok.stderr
    assert "bundle copy-delete: 1 seeds (register " in ok.stdout, ok.stdout


@pytest.mark.slow
@pytest.mark.parametrize("seed,before_the_fix", [
    (15, "liveness: a tablet took no write after the heal: its leader had copied the tablet to "
         "both followers, counted each copy as an acknowledgement and never committed again "
         "(bug 1's twin: the copy's end set the match without the commit rule running)"),
    (55, "state machine safety: index 801 committed in term 1 and in term 2: a DeleteTablet "
         "cancelled a copy during its install; memory said TOMBSTONED over a READY superblock "
         "and the replica voted from the wrong last OpId (bug 4)"),
])
def test_copy_race_seeds_that_failed_before_issue_32s_fixes_pass(seed, before_the_fix, tmp_path):
    """Found by the copy-race fault on the engine before the fixes (`tessera sim --stack full
    --workload register --seconds 30 --mix COPY_RACE --seed N`); each failure was traced to its
    bug by applying one fix at a time (docs/decisions/swarm-mixes-and-copy-faults.md). They pass now."""
    r = StackSim(StackConfig(seed=seed, workload="register", seconds=30.0,
                             mix=parse_mix(COPY_RACE)), tmp_path).run()
    assert r.ok(), (before_the_fix, r.violation, r.verdict, r.results.get("stats"))
    assert r.nemesis.get("copy-race", 0) >= 5


@pytest.mark.slow
def test_swarm_seed_145_no_longer_creates_a_replica_over_a_failed_ones_files(tmp_path):
    """Swarm seed 145's mix (flips, tombstones, copy races, lease reads) on the engine with bugs
    1, 2 and 4 fixed: a flipped superblock bit FAILED a freshly copied replica, the tombstone
    fault deleted it (its files are left for an operator), and the master's CreateTablet wrote a
    new superblock over them and ran the old WAL again: the tombstone invariant's "runs again
    without a tablet copy". Such a create is refused (tests/test_failed_replica_delete.py fails
    without the refusal), and since the master sends a creation again only while its tablet
    never had a leader (Kudu's CREATING; the leader copies the tablet to a member that lacks
    it), no seed of the mix reached that refusal in 150. Seed 67, which did before, now deletes
    FAILED replicas and leaves their tablets to their leaders."""
    r = StackSim(StackConfig(seed=67, workload="list-append", seconds=30.0,
                             mix=parse_mix(SEED_145_MIX)), tmp_path).run()
    assert r.ok(), (r.violation, r.verdict)
    assert r.nemesis.get("flip", 0) >= 1
    assert r.probes.get("tablet.failed.forgotten")
    assert r.probes.get("master.reconcile.creation_left_to_leader")
    assert not r.probes.get("tablet.create.refused_failed_files")


def test_a_tombstone_with_flipped_consensus_metadata_refuses_votes_without_a_handler_error(
        tmp_path):
    """Seed 123 of the same mix (`--until-probe tombstone.vote.refused_corrupt_metadata` finds
    such seeds): a bit flipped in a replica's consensus metadata, then the replica tombstoned
    by a copy race; each vote request it got
    raised CorruptionError out of the RPC handler (the simulator's `handler failed`). It now
    answers nothing and logs why (tests/test_tombstone_votes.py)."""
    r = StackSim(StackConfig(seed=123, workload="list-append", seconds=30.0,
                             mix=parse_mix(SEED_145_MIX)), tmp_path).run()
    assert r.ok(), (r.violation, r.verdict)
    assert r.probes.get("tombstone.vote.refused_corrupt_metadata")


def test_a_tombstone_that_votes_within_the_lease_is_caught_by_a_lease_race_seed(
        monkeypatch, tmp_path):
    """A bug the harness found under the LEASE_RACE mix (18 of register seeds 0-39 catch it;
    seed 5 is one). With the fix taken out (a tombstone votes at once, as before), a follower
    cut from the leader wins its election with the vote of a voter tombstoned a moment after
    it acknowledged the leader's lease: the simulator's lease check fails the seed while the
    old leader still serves lease reads. With the fix, the seed is valid."""
    from node.tserver.tablet_manager import TabletManager

    def run(out: Path):
        return register_seed(5, LEASE_RACE, 30.0, out)

    fixed = run(tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    assert fixed.nemesis.get("lease-race", 0) >= 5
    monkeypatch.setattr(TabletManager, "_within_vote_lease", lambda self, tablet_id: False)
    before = run(tmp_path / "before")
    assert (before.violation or "").startswith("lease safety: "), before.violation
    assert "still serves lease reads as leader of term" in before.violation


def _unbundled(seeds) -> list[int]:
    """The seeds whose mix is their own draws alone, with no bundle's knobs in place of some
    (harness.sim.swarm.BUNDLES and the later streams' bundles)."""
    return [s for s in seeds if bundle_of(s) is None]


def test_swarm_mixes_draw_read_mostly_loads_and_the_spec_carries_them():
    shares = {swarm_mix(s).read_share for s in _unbundled(range(100))}
    assert shares == {None, 0.9, 0.99}  # and 0.0 in a bundle (tests/test_sim_swarm_reach.py)
    m = parse_mix(LEASE_RACE)
    assert m.read_share == 0.99 and parse_mix(m.spec()) == m
    for bad in ("crash:1;read-share=2", "crash:1;read-share=most", "crash:1;clock=0",
                "crash:1;clock=soon"):
        with pytest.raises(ValueError, match="read-share|clock"):
            parse_mix(bad)
    assert parse_mix("crash:1;clock=20000").clock_error_us == 20000
    assert {swarm_mix(s, bundled=False).clock_error_us for s in range(100)} == {None, 20000}


def test_swarm_mixes_draw_how_the_workers_write_and_the_spec_carries_it():
    """Half the seeds run the workers of each node on shared client sessions, back to back
    (writes=shared: the client's coalesced path, which a paced run never reaches), or on one
    shared batching session, background or manual; the rest a handle each. One draw where the
    client (own or coalesce) was drawn before: seeds that drew coalesce then draw shared now
    unless that draw took more random bits (5, 8 and 11 among seeds 0-11; 11 runs a bundle of
    LATEST_BUNDLES now, and 5 one of SIXTEENTH_BUNDLES: its own draws are still shared)."""
    mixes = [swarm_mix(s) for s in _unbundled(range(600))]
    counts = Counter(m.writes for m in mixes)
    assert set(counts) == {*WRITES, "session-sync"}, counts
    n = len(mixes)  # own in 3/8 (half, a quarter of it sync sessions), each other mode in a sixth
    assert 0.3 * n <= counts["own"] <= 0.5 * n, counts
    assert all(n / 10 <= counts[w] <= n / 4 for w in set(WRITES) - {"own"}), counts
    assert [swarm_mix(s, bundled=False).writes for s in (5, 8)] == ["shared"] * 2
    for writes in set(WRITES) - {"own"}:
        m = next(m for m in mixes if m.writes == writes)
        assert f";writes={writes}" in m.spec() and parse_mix(m.spec()).writes == writes
        assert m.as_json()["writes"] == writes
    m = parse_mix("crash:1;every=1-2;writes=session-manual;values=wide")
    assert m.writes == "session-manual" and m.spec().endswith(";writes=session-manual;values=wide")
    assert parse_mix(m.spec()) == m
    assert parse_mix("crash:1").writes == "own" and "writes" not in swarm_mix(4).spec()
    assert swarm_mix(4).as_json()["writes"] == "own"
    with pytest.raises(ValueError, match="one of own, shared, session-background, session-manual"):
        parse_mix("crash:1;writes=coalesce")
    with pytest.raises(ValueError, match="client=coalesce is writes=shared"):
        parse_mix("crash:1;client=coalesce")


@pytest.mark.slow
def test_a_swarm_seed_that_drew_shared_writes_runs_valid_with_shared_batches(
        tmp_path, batch_sizes):
    seed = 8
    assert swarm_mix(seed).writes == "shared"
    r = StackSim(StackConfig(seed=seed, workload="register", seconds=10.0, mix=swarm_mix(seed)),
                 tmp_path).run()
    assert r.ok(), (r.violation, r.verdict)
    assert any(n > 1 for n in batch_sizes), batch_sizes


def test_copy_race_tombstones_and_cuts_as_recorded(tmp_path):
    """The copy-race fault's recorded value names the tablet, the leader, the follower cut
    from it and the tombstoned receiver, and its schedule replays."""
    r = StackSim(StackConfig(seed=15, workload="register", seconds=8.0,
                             mix=parse_mix(COPY_RACE)), tmp_path / "a").run()
    races = [e for e in r.events if e[1] == "copy-race"]
    assert races, r.events
    tablet, leader, follower, receiver = races[0][2][:4]
    assert len({leader, follower, receiver}) == 3 and tablet.endswith(("0", "1", "2", "3"))
    again = StackSim(StackConfig(seed=15, workload="register", seconds=8.0,
                                 mix=parse_mix(COPY_RACE)), tmp_path / "b").run()
    assert again.history_sha == r.history_sha and again.events == r.events


def test_mixes_are_frozen_values():
    m = Mix((("crash", 1),), (1.0, 2.0))
    with pytest.raises(AttributeError):
        m.read_mode = "lease"


MASTERS = "masters:4,restart:1,heal:1;every=0.5-2"


def test_masters_are_added_and_removed_while_servers_heartbeat_and_the_servers_follow(tmp_path):
    """The masters fault: a fourth master joins (started empty, added, copied the catalog,
    promoted) and leaves again, over and over; at the end every tablet server heartbeats the
    committed masters, and the check says so when one does not."""
    from harness.sim.stack_checks import CATALOG, StackViolation

    sim = StackSim(StackConfig(seed=0, workload="register", seconds=20.0,
                               mix=parse_mix(MASTERS)), tmp_path)
    r = sim.run()
    assert r.ok(), (r.violation, r.verdict)
    ops = [e[2] for e in r.events if e[1] == "masters"]
    assert [o[0] for o in ops[:4]] == ["add", "remove", "add-deposed", "remove-cut"], ops
    assert all(len(o) == 2 for o in ops), ops  # none failed
    added = ops[-1][0].startswith("add")
    leader = next(s for h in sim.masters if (s := sim.servers.get(h)) is not None
                  and s.replicas[CATALOG].role.name == "LEADER")
    assert len(leader.replicas[CATALOG].committed_members()) == (4 if added else 3)
    hb = sim.servers[sim.tservers[0]].heartbeater
    assert (sim.spare, 7051) in {tuple(a) for a in hb.masters} or not added
    sim.invariants.check_master_lists()
    hb.masters = hb.masters[1:]
    with pytest.raises(StackViolation, match="master list: tablet server"):
        sim.invariants.check_master_lists()


def test_a_master_removed_while_cut_off_learns_of_its_removal_and_the_old_leader_is_caught(
        monkeypatch, tmp_path):
    """Every second removal by the masters fault cuts the spare off from the other masters
    first, so the entry that removes it never reaches it; after the links return it must say
    REMOVED within TOLD_WITHIN_S. The leader forgets it while it is silent and tells it once it
    campaigns. The engine before the fix forgot a removed member when its removal committed and
    refused its campaigns like any other: the removed master stays a FOLLOWER for ever (a
    clean-clone run once saw it), and the same seed now fails on liveness."""
    from node.consensus.core import RaftCore
    from node.consensus.progress import Progress

    def run(out: Path):
        return StackSim(StackConfig(seed=0, workload="register", seconds=20.0,
                                    mix=parse_mix(MASTERS)), out).run()

    fixed = run(tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    cut = [e[2] for e in fixed.events if e[1] == "masters" and e[2][0] == "remove-cut"]
    assert cut and all(len(c) == 2 for c in cut), cut  # each told, none given up on
    for name in ("raft.leader.removed_member_silent", "raft.leader.removed_member_campaigned"):
        assert fixed.probes.get(name, 0) >= 1, name

    def forget_at_commit(self) -> None:  # before the fix: a removed member dropped at once
        members = [m.uuid for m in self.active_config.members + self.committed_config.members]
        for uuid in list(self.progress):
            if uuid not in members:
                del self.progress[uuid]
        for uuid in members:
            if uuid != self.id and uuid not in self.progress:
                self.progress[uuid] = Progress(next=self.log.last_index() + 1)

    monkeypatch.setattr(RaftCore, "_sync_progress", forget_at_commit)
    monkeypatch.setattr(RaftCore, "_tell_if_removed", lambda self, uuid: None)
    before = run(tmp_path / "before")
    assert (before.violation or "").startswith("liveness: master "), before.violation
    assert "removed while cut off" in before.violation


def test_a_killed_server_restarts_on_its_page_cache_and_a_fifth_of_the_mixes_kill(tmp_path):
    """The `kill` fault (a late kind, a fifth of the swarm mixes): a server's process dies
    with its machine up, so it restarts on what its page cache held, synced or not, and on a
    failing disk what its failed syncs left there (aimed at such a server half the time)."""
    mixes = [swarm_mix(s) for s in _unbundled(range(400))]
    assert 0.1 < sum("kill" in m.kinds() for m in mixes) / len(mixes) < 0.3
    r = register_seed(1, "kill:4,disk:4,restart:2,heal:1;every=0.5-2;reads=linearizable", 20.0,
                      tmp_path)
    assert r.ok(), (r.violation, r.verdict)
    kills = [e for e in r.events if e[1] == "kill"]
    restarted = {e[2] for e in r.events if e[1] == "restart"}
    assert kills and restarted & {e[2] for e in kills}, r.events


FAILED_ADD = "masters:5,crash:2,restart:2,partition:2,isolate:2,heal:1;every=0.5-2;reads=linearizable"


def test_a_failed_master_add_is_undone_before_the_master_is_stopped(monkeypatch, tmp_path):
    """The recorded seed adds the spare master while a partition keeps it from the others: it
    joins the config as a non-voter and is never promoted, and the add fails after 30 s. An
    operator (and the simulator, and the chaos harness) undoes that add before stopping the
    master: wiped while still a member, it leaves the masters counting a voter that is gone.
    The simulator that only stopped it (the chaos harness did the same, and a CI run's masters
    check caught it) fails the seed on the masters-config check, as over half of such seeds
    did."""
    from harness.sim import stack_masters

    def run(out: Path):
        return register_seed(15, FAILED_ADD, 30.0, out)

    fixed = run(tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    adds = [e[2] for e in fixed.events if e[1] == "masters" and e[2][0] == "add"]
    assert adds and "is not a voter after 30s" in adds[0][2], adds

    async def stop_only(sim) -> None:  # before the fix: the failed add left in the config
        stack_masters.drop_spare(sim)

    monkeypatch.setattr(stack_masters, "undo_add", stop_only)
    before = run(tmp_path / "before")
    assert (before.violation or "").startswith("masters config: "), before.violation


def test_the_masters_config_check_leaves_a_master_that_refused_to_start_alone(tmp_path):
    """A bit flipped in a master's instance file keeps it from starting (it never learns its
    uuid): it is down with its files, not wiped, so the masters config may still count it. The
    check once read that master's uuid and crashed the seed instead; the nightly matrix's
    `sim-full` cell drew this seed of the classic mix."""
    seed = 20789066990001
    r = StackSim(StackConfig(seed=seed, workload="list-append", seconds=15.0), tmp_path).run()
    assert r.ok(), (r.violation, r.verdict)
    assert any(e[1] == "flip" and e[2][0] == "10.77.0.102" and e[2][1] == "/data/instance"
               for e in r.events), r.events


DRIFT = "drift:4,transfer:4,restart:1,heal:1;every=0.5-2"


def test_clocks_drift_past_the_bound_and_hybrid_time_still_follows_the_log(monkeypatch, tmp_path):
    """The drift fault steps a clock past the configured bound (commit-wait's promise is off
    then, Raft's is not), and the simulator checks that committed timestamps increase along
    each tablet's log across leaders. A new leader that does not witness its predecessors'
    timestamps (the mutant below) is caught at seed 7 of this mix;
    skew within the bound hides it (6 seeds of skew:4,transfer:4 passed with it)."""
    from harness.sim.stack import CLOCK_MAX_ERROR_US
    from harness.sim.stack_faults import DRIFT_MAX_S
    from node.replica.replica import Replica

    def run(out: Path):
        return register_seed(7, DRIFT, 30.0, out)

    fixed = run(tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    drifts = [e[2] for e in fixed.events if e[1] == "drift"]
    assert drifts and all(CLOCK_MAX_ERROR_US / 1e6 <= abs(v[1]) <= DRIFT_MAX_S for v in drifts)
    applied = Replica._apply

    def apply_without_witnessing(self, e):
        saved, self.clock.update = self.clock.update, lambda ts: None
        try:
            return applied(self, e)
        finally:
            self.clock.update = saved
    monkeypatch.setattr(Replica, "_apply", apply_without_witnessing)
    mutant = run(tmp_path / "mutant")
    assert (mutant.violation or "").startswith("hybrid time: tablet "), mutant.violation


FLIP_NEWEST = "flip-newest:4,restart:1,heal:1;every=0.5-2;values=wide"


def test_a_flip_in_a_synced_newest_wal_batch_fails_its_replica_and_never_passes_as_torn(
        monkeypatch, tmp_path):
    """The flip-newest fault: power loss, then one bit flipped anywhere in a tablet's newest
    intact WAL batch, read back at the reboot; wide values, half of them zero-padded. The
    replica FAILs. Written without sector stamps (the version 2 writer, whose reader took zero
    sectors for unwritten space), seed 24 fails: a replica runs again with the
    synced batch cut."""
    import node.wal.format as fmt
    import node.wal.segment as segment

    def run(out: Path):
        return register_seed(24, FLIP_NEWEST, 10.0, out)

    fixed = run(tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    flips = [e[2] for e in fixed.events if e[1] == "flip-newest"]
    assert flips and all(len(v) == 5 for v in flips)
    assert all(fixed.flips[v[0]].startswith("FAILED") for v in flips if v[4]), fixed.flips
    assert fixed.probes.get("wal.scan.crc_mismatch_written_whole"), sorted(fixed.probes)
    monkeypatch.setattr(fmt, "FORMAT_VERSION", 2)
    monkeypatch.setattr(segment, "stamped", lambda batch, offset: [batch])
    before = run(tmp_path / "before")
    assert (before.violation or "").startswith("disk damage: tablet "), before.violation
    # the path the bug sat on, marked: the flipped newest batch judged torn and cut
    assert before.probes.get("wal.scan.crc_mismatch_unwritten_sector"), sorted(before.probes)
    assert before.probes.get("wal.recover.torn_tail_cut"), sorted(before.probes)


FAIL_COPY = "fail-copy:4,restart:1,heal:1;every=1-3"
FAIL_COPY_SEED = 4  # 10 of seeds 0-29 failed so at 20 s; all 30 pass with the fix


def test_a_failed_voter_deleted_and_copied_does_not_vote_from_an_unknown_log(monkeypatch, tmp_path):
    """The fail-copy fault: F lags behind a cut, R's WAL is damaged and R
    FAILs, R's replica is deleted while a voter, and L crashes while copying the tablet back.
    With R voting from an empty log while COPYING (what a FAILED replica's missing tombstone
    OpId read as), F wins without entries L and R committed, and the simulator sees another
    entry at a committed index. A copy onto such a voter is now refused outright, R FAILED
    for the masters to replace (copy.refused.last_op_unknown_voter); the run before takes
    that refusal out too, so R is copied onto and votes from what its tombstone says."""
    import node.tserver.tablet_manager as manager
    from node.tablet.superblock import OpId, Superblock

    def run(out: Path):
        return register_seed(FAIL_COPY_SEED, FAIL_COPY, 20.0, out)

    fixed = run(tmp_path / "fixed")
    assert fixed.ok(), (fixed.violation, fixed.verdict)
    assert [e for e in fixed.events if e[1] == "fail-copy" and len(e[2]) == 11]
    assert fixed.probes.get("copy.refused.last_op_unknown_voter"), sorted(fixed.probes)
    real, prepare = manager.tombstone_vote, manager.prepare_install
    monkeypatch.setattr(manager, "prepare_install",  # no server is a voter: no refusal
                        lambda paths, session, faults, known, uuid: prepare(paths, session,
                                                                           faults, known, ""))

    def as_if_empty(paths, uuid, votes):  # before the fix: an unknown last op read as (0, 0)
        sb = Superblock.load(paths.superblock, paths.disk)
        if sb.tombstone_last_opid is None:
            msgspec.structs.replace(sb, tombstone_last_opid=OpId(0, 0)).save(
                paths.superblock, paths.disk)
        return real(paths, uuid, votes)

    monkeypatch.setattr(manager, "tombstone_vote", as_if_empty)
    before = run(tmp_path / "before")
    # seen at the grant itself, before F can win and commit over L's entries (which the
    # simulator also finds, as state machine safety, when the vote check is not there)
    assert (before.violation or "").startswith("vote safety: "), before.violation
    assert "behind the" in before.violation and "no replica open" in before.violation
    # the path the bug sat on, marked: the FAILED voter deleted, and its copy's tombstone voting
    assert before.probes.get("tablet.failed.forgotten") and before.probes.get("copy.started"), \
        sorted(before.probes)


COMMIT_WAIT = "skew:8,transfer:2,restart:1,heal:1;every=0.2-0.8;load=20x200;clock=20000"
# a seed whose schedule shows the mutant below: about half do (5 of seeds 0-7 with writes
# coalesced per turn, 4 of 8 before; seed 3 in both)
COMMIT_WAIT_SEED = 3


def test_commit_wait_is_judged_across_tablets_while_clocks_stay_within_the_bound(
        monkeypatch, tmp_path):
    """A mix may widen the clocks' bound (`clock=20000`: 20 ms, skew up to 10 ms either way):
    then writes on different tablets, one invoked after the other completed, must still carry
    increasing hybrid times (the commit-wait check). A replica that answers without waiting
    fails it; with the 1 ms default the skew is too small to show that."""
    from node.replica.answers import WriteAnswers

    def run(out: Path):
        return register_seed(COMMIT_WAIT_SEED, COMMIT_WAIT, 10.0, out)

    def commit_wait(r):
        return next(c for c in r.results["check"]["results"] if c["checker"] == "commit-wait")

    fixed = run(tmp_path / "fixed")
    assert fixed.ok() and commit_wait(fixed)["verdict"] == "valid", fixed.verdict
    assert commit_wait(fixed)["writes"] > 100
    monkeypatch.setattr(WriteAnswers, "commit_waited",
                        lambda self, done, waited, result, error: done(result, error))
    mutant = run(tmp_path / "mutant")
    assert mutant.verdict == "invalid" and commit_wait(mutant)["verdict"] == "invalid"
    assert commit_wait(mutant)["anomalies"][0]["type"] == "timestamp-order"


SYNC_MIXED = COMMIT_WAIT + ";writes=session-sync;consistency=mixed"


def test_mixed_modes_judge_the_commit_wait_workers_sync_sessions_across_tablets(
        monkeypatch, tmp_path):
    """Workers writing through AUTO_FLUSH_SYNC sessions (Kudu's default flush mode), the odd
    ones' sessions COMMIT_WAIT on a CLIENT_PROPAGATED client (`consistency=mixed`): the
    commit-wait workers' writes are judged across tablets among themselves. A sync session
    that wrote in its client's mode instead of its own (a review found it; fixed, with a unit
    test, before the harness had a sync-session mode) answers them without waiting, and the
    recorded seed fails (as about a quarter of such seeds do)."""
    from node.client.session import Session, Sessions

    def run(out: Path):
        return register_seed(3, SYNC_MIXED, 10.0, out)

    def commit_wait(r):
        return next(c for c in r.results["check"]["results"] if c["checker"] == "commit-wait")

    fixed = run(tmp_path / "fixed")
    assert fixed.ok() and commit_wait(fixed)["verdict"] == "valid", fixed.verdict
    assert commit_wait(fixed)["writes"] > 100
    init = Session.__init__

    def clients_mode(self, *args, **kwargs):  # the bug: the client's mode for every write
        init(self, *args, **kwargs)
        self.sessions = Sessions(None)

    monkeypatch.setattr(Session, "__init__", clients_mode)
    mutant = run(tmp_path / "mutant")
    assert mutant.verdict == "invalid" and commit_wait(mutant)["verdict"] == "invalid"


def test_a_quarter_of_the_own_seeds_write_through_sync_sessions_and_the_spec_carries_it():
    mixes = [swarm_mix(s) for s in _unbundled(range(400))]  # a bundle keeps its spec's writes
    sync = [m for m in mixes if m.writes == "session-sync"]
    assert 0.07 < len(sync) / len(mixes) < 0.2 and all(m.batch is None for m in sync)
    assert parse_mix(sync[0].spec()) == replace(sync[0], name=parse_mix(sync[0].spec()).name)


CLIENT_PROPAGATED = ("drift:8,transfer:2,restart:1,heal:1;every=0.2-0.8;load=20x200;"
                     "consistency=client-propagated")


def test_client_propagated_writes_keep_each_clients_order_past_the_clock_bound(
        monkeypatch, tmp_path):
    """Kudu's CLIENT_PROPAGATED: writes are answered without commit-wait, and a client's writes
    must still carry rising timestamps (the client-order check) while the drift fault steps
    clocks up to half a second past the bound, since each write carries the highest timestamp
    its client saw. A client that drops it (the drop-propagated mutant) fails: its write on a
    tablet whose leader's clock is behind gets a smaller timestamp than its last."""
    from node.client import faults

    def client_order(r):
        return next(c for c in r.results["check"]["results"] if c["checker"] == "client-order")

    fixed = register_seed(1, CLIENT_PROPAGATED, 10.0, tmp_path / "fixed")
    assert fixed.ok() and client_order(fixed)["writes"] > 100, fixed.verdict
    assert fixed.probes.get("replica.write.client_propagated", 0) > 0
    assert not fixed.probes.get("replica.commit_wait.waited")
    assert not any(c["checker"] == "commit-wait" for c in fixed.results["check"]["results"])
    monkeypatch.setattr(faults, "FAULTS", faults.parse("drop-propagated"))
    mutant = register_seed(1, CLIENT_PROPAGATED, 10.0, tmp_path / "mutant")
    assert mutant.verdict == "invalid" and client_order(mutant)["verdict"] == "invalid"
    assert client_order(mutant)["anomalies"][0]["type"] == "client-order"


def test_mixed_modes_put_writes_of_both_in_one_group_each_answered_in_its_own(tmp_path):
    """A quarter of the swarm mixes have the workers alternate between the two modes (as
    different users' clients on one table may): a leader's group then holds writes of both,
    each answered in its own mode, every client's order still holds, and the commit-wait
    workers' writes are judged across tablets among themselves. A group holding both is rare
    (3 of seeds 0-39 of the mix below put one together): seed 4 does."""
    from harness.systems.tessera.clients import MIXED

    seeds = _unbundled(range(300))
    drawn = Counter(swarm_mix(s).consistency for s in seeds)
    assert len(seeds) / 8 <= drawn[MIXED] <= len(seeds) / 2.5, drawn
    assert parse_mix(swarm_mix(0).spec()).consistency == MIXED
    mixed = register_seed(4, "transfer:2,restart:1,heal:1;every=0.5-2;load=20x200;"
                          "consistency=mixed", 10.0, tmp_path)
    assert mixed.ok(), mixed.verdict
    assert mixed.probes.get("replica.write.group_modes_mixed", 0) > 0  # the mark
    assert mixed.probes.get("replica.write.client_propagated", 0) > 0
    assert mixed.probes.get("replica.commit_wait.waited", 0) > 0
    checks = {c["checker"]: c["verdict"] for c in mixed.results["check"]["results"]}
    assert checks["client-order"] == "valid" and checks["commit-wait"] == "valid", checks


def test_half_the_swarm_mixes_snapshot_often_and_the_spec_carries_it():
    """A seed of a virtual minute never reaches the engine's 20,000 entries between snapshots;
    half the swarm mixes snapshot every few hundred, so saved snapshots, collected logs and
    copies to lagging followers happen (the code probes showed none did)."""
    mixes = [swarm_mix(s, bundled=False) for s in range(200)]
    drawn = Counter(m.snapshot_every for m in mixes)
    assert set(drawn) == {None, 200, 1000} and 60 < drawn[None] < 140, drawn
    often = next(m for m in mixes if m.snapshot_every == 200)
    assert "snapshot=200" in often.spec() and parse_mix(often.spec()).snapshot_every == 200
    with pytest.raises(ValueError, match="snapshot='0'"):
        parse_mix("restart:1;snapshot=0")


def test_half_the_swarm_mixes_give_their_disks_an_fsync_latency_and_the_spec_carries_it():
    """A WAL group is durable only at the end of its sync: with syncs taking time a power loss
    can land inside one, which no seed of instantaneous syncs reaches."""
    mixes = [swarm_mix(s, bundled=False) for s in range(200)]
    drawn = Counter(m.fsync_ms for m in mixes)
    assert set(drawn) == {None, 1, 10} and 60 < drawn[None] < 140, drawn
    slow = next(m for m in mixes if m.fsync_ms == 10)
    assert "fsync=10" in slow.spec() and parse_mix(slow.spec()).fsync_ms == 10
    assert baseline_faults(slow).fsync_latency == (0.001, 0.01)
    assert baseline_faults(parse_mix("restart:1")).fsync_latency == (0.0, 0.0)
    with pytest.raises(ValueError, match="fsync='x'"):
        parse_mix("restart:1;fsync=x")
    assert sum("torn" in m.kinds() for m in mixes) > 10  # the aimed power loss is drawn too


def test_a_quarter_of_the_swarm_mixes_keep_few_sessions_so_clients_lose_theirs(tmp_path):
    """With three sessions a tablet evicts one its client still writes in: the client sees
    NO_SESSION and reopens (or says unknown after an uncertain attempt), and the seed stays
    valid. No seed with the engine's 1,024 sessions ever evicted one."""
    mixes = [swarm_mix(s, bundled=False) for s in range(200)]
    drawn = Counter(m.max_sessions for m in mixes)
    assert set(drawn) == {None, 3, 8} and 60 < drawn[None] < 160, drawn  # bundles draw none
    few = parse_mix("crash:2,restart:4,heal:1;every=1-4;sessions=3;load=20x200")
    assert few.max_sessions == 3 and "sessions=3" in few.spec()
    with pytest.raises(ValueError, match="sessions='0'"):
        parse_mix("restart:1;sessions=0")
    _valid_and_fired(StackConfig(seed=2, workload="list-append", seconds=8.0, mix=few), tmp_path,
                     "tablet.session.evicted_lru", "tablet.session.no_session",
                     "client.write.session_lost", "client.write.session_reopened")


def _valid_and_fired(cfg: StackConfig, out, *names: str) -> None:
    """The seed `cfg` is valid and fires every probe of `names`."""
    result = StackSim(cfg, out).run()
    assert result.ok(), (result.violation, result.verdict)
    for name in names:
        assert result.probes.get(name, 0) >= 1, name


def test_session_mode_mixes_draw_small_batches_and_the_spec_carries_them():
    """A node's few workers never fill the workload's 16-op batches: some session-mode mixes
    draw 2 or 4, so buffers are cut at their op count and found full."""
    mixes = [swarm_mix(s, bundled=False) for s in range(200)]
    assert {m.batch for m in mixes} == {None, 2, 4}
    assert all(m.writes in ("session-background", "session-manual") for m in mixes if m.batch)
    small = next(m for m in mixes if m.batch == 2)
    assert "batch=2" in small.spec() and parse_mix(small.spec()).batch == 2
    with pytest.raises(ValueError, match="batch=2 sizes a session write mode"):
        parse_mix("restart:1;batch=2")


def test_session_mode_mixes_draw_renewals_and_a_renewed_seed_stays_valid(tmp_path, monkeypatch):
    """Workload.session_ops in the swarm (RENEWS): a shared session closed and replaced every
    N writes, while the other workers sharing it may be in the middle of an apply."""
    from harness.systems.tessera import clients

    mixes = [swarm_mix(s, bundled=False) for s in range(200)]
    assert {m.renew for m in mixes} == {None, 1, 4, 20, 100}  # 1 and 4: FRESH_CLIENTS
    assert all(m.writes in ("session-background", "session-manual") for m in mixes if m.renew)
    with pytest.raises(ValueError, match="renew=5 renews a shared session"):
        parse_mix("restart:1;writes=shared;renew=5")
    spec = ("restart:1,heal:1;every=1-4;reads=linearizable;load=20x200;"
            "writes=session-background;batch=4;renew=20;workload=register")
    assert parse_mix(spec).spec() == spec
    renewed = []
    tick = clients.Renewals.tick

    def counted(self, key):
        before = self.renewed
        tick(self, key)
        renewed.append(self.renewed - before)

    monkeypatch.setattr(clients.Renewals, "tick", counted)
    result = StackSim(StackConfig(seed=0, workload="register", seconds=8.0, mix=parse_mix(spec)),
                      tmp_path).run()
    assert result.ok(), (result.violation, result.verdict)
    assert sum(renewed) >= 5, sum(renewed)


def test_a_quarter_of_the_mixes_bound_requests_in_flight_so_back_pressure_happens(tmp_path):
    """No seed's workers ever had 256 requests out on one connection; with 4 a server stops
    reading a connection and the client's calls wait for room, and the seed stays valid."""
    mixes = [swarm_mix(s, bundled=False) for s in range(200)]
    drawn = Counter(m.inflight for m in mixes)
    assert set(drawn) == {None, 4} and 15 < drawn[4] < 80, drawn
    tight = parse_mix("restart:1,heal:1;every=1-4;load=20x200;writes=shared;inflight=4")
    assert tight.inflight == 4 and "inflight=4" in tight.spec()
    with pytest.raises(ValueError, match="inflight='0'"):
        parse_mix("restart:1;inflight=0")
    _valid_and_fired(StackConfig(seed=2, workload="register", seconds=4.0, mix=tight), tmp_path,
                     "rpc.server.backpressure_paused", "rpc.client.waited_for_room")


def test_the_delay_fault_slows_one_hosts_links_for_a_while_and_leaves_others_alone(tmp_path):
    sim = StackSim(StackConfig(seed=1, seconds=1.0), tmp_path)
    host, other = sim.tservers[0], sim.tservers[1]
    sim._apply("delay", [host, 0.1, 2.0])
    assert sim.net.slowed(host, other) == 0.1 and sim.net.slowed(other, sim.masters[0]) == 0.0
    sim.net.slow(host, sim.masters[0], 0.5)  # another fault slows one of the links since
    sim.loop.run_until_complete(asyncio.sleep(2.5))
    assert sim.net.slowed(host, other) == 0.0  # over after its 2 s
    assert sim.net.slowed(host, sim.masters[0]) == 0.5  # not the other fault's
    assert sum("delay" in swarm_mix(s, bundled=False).kinds() for s in range(200)) > 40  # bundles draw none


def test_half_the_mixes_lower_the_servers_frame_limit_and_the_client_keeps_its_own(tmp_path):
    """`frame=N`: every server's RPC frame limit is N MiB (an operator's lowered
    --rpc-max-message-size), the client keeps its own. With wide values, which then reach up to
    the servers' limit, a write within its envelope of the limit is answered once and its
    connection closed, one just under it refused before it is proposed: paths no seed had
    reached. The seed stays valid. Counted over the seeds that run no bundle: a bundle's spec
    names its own frame."""
    mixes = [swarm_mix(s, bundled=False) for s in range(200) if bundle_of(s) is None]
    drawn = Counter(m.frame_mb for m in mixes)
    assert set(drawn) == {None, 1, 2} and 25 < drawn[None] < 70, drawn
    low = parse_mix("crash:2,restart:4,heal:1;every=1-4;reads=linearizable;load=10x100;"
                    "values=wide;frame=1")
    assert low.frame_mb == 1 and low.spec().endswith(";frame=1")
    assert parse_mix(low.spec()) == low
    with pytest.raises(ValueError, match="frame='0'.*MiB"):
        parse_mix("restart:1;frame=0")
    _valid_and_fired(StackConfig(seed=2, workload="register", seconds=15.0, mix=low), tmp_path,
                     "rpc.server.frame_too_large", "rpc.client.peer_hung_up_with_reason",
                     "raft.propose.too_large", "client.retry.too_large")


def test_a_reprovisioned_host_comes_back_as_a_new_server_and_its_replicas_are_replaced(tmp_path):
    """`reprovision` (a late kind): a tablet server's disk replaced by an empty one, so it starts
    at the same address with a new uuid. Peers and the masters still address the old uuid there
    and are refused (rpc.server.wrong_uuid); the masters replace the silent member, and no
    config names the old uuid at the end. The seed stays valid. (Drawn by more than 40 of 200
    seeds: each bundle stream takes a few seeds' own draws.)"""
    assert "reprovision" in LATE and 40 < sum("reprovision" in swarm_mix(s, bundled=False).kinds()
                                               for s in range(200)) < 140
    spec = "restart:2,heal:1,reprovision:4;every=1-4;reads=linearizable;load=10x100"
    assert parse_mix(spec).spec() == spec
    sim = StackSim(StackConfig(seed=2, workload="register", seconds=30.0, mix=parse_mix(spec)),
                   tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    (host, old), = [e[2] for e in sim.events if e[1] == "reprovision"]  # once a seed
    assert old and sim.servers[host].uuid != old
    for name in ("rpc.server.wrong_uuid", "master.rereplication.replace_silent",
                 "master.rereplication.add_chosen"):
        assert result.probes.get(name, 0) >= 1, name
    configs = [r.status()["config"] for s in sim.servers.values()
               for r in getattr(s, "replicas", {}).values() if not r.failed]
    assert configs and not any(m[0] == old for config in configs for m in config)


def test_a_disk_filled_just_past_its_files_fails_a_segments_preallocation_or_writes_short(
        tmp_path):
    """`full` (a late kind): a tablet server's disk left a few KiB of room, its preallocated
    space counted, in a seed of small segments: the next segment cannot be preallocated, or a
    WAL write comes back short and the rest fails (ENOSPC): the log fails, the replica FAILs, and
    the masters replace it. No seed had reached either; the seed stays valid."""
    assert "full" in LATE and 40 < sum("full" in swarm_mix(s, bundled=False).kinds() for s in range(200)) < 140
    spec = "restart:2,heal:1,full:4;every=1-4;reads=linearizable;load=10x100"
    assert parse_mix(spec).spec() == spec
    _valid_and_fired(StackConfig(seed=2, workload="register", seconds=30.0, mix=parse_mix(spec)),
                     tmp_path, "wal.segment.preallocate_failed", "wal.write.short_write_completed",
                     "wal.write.failed", "master.rereplication.replace_failed")


def test_a_copy_cut_mid_fetch_resumes_stalls_or_is_orphaned_and_the_copy_is_made_again(
        tmp_path, monkeypatch):
    """`copy-cut` (a late kind): a follower tombstoned, and while its leader copies the tablet
    back over a slowed link, the link to the copy's source is reset and cut, or the receiver
    crashes (harness.sim.stack_copy_cut). A short cut resumes the fetch where it was; a long one
    stalls it past the receiver's limit, and the source's session, idle, expires; a crashed
    receiver's unfinished copy is tombstoned at its start-up. No seed had reached any of these
    (the copy's clocks were the wall clock's, and no fault landed inside a copy). Valid."""
    assert "copy-cut" in LATE and 50 < sum("copy-cut" in swarm_mix(s, bundled=False).kinds()
                                           for s in range(200)) < 140
    spec = "restart:2,heal:1,copy-cut:4;every=1-4;reads=linearizable;load=10x100"
    assert parse_mix(spec).spec() == spec
    sim = StackSim(StackConfig(seed=1, workload="list-append", seconds=15.0, mix=parse_mix(spec)),
                   tmp_path)
    result = sim.run()
    outcomes = [e[2][3:] for e in sim.events if e[1] == "copy-cut"]
    # The crashed receiver's copy, abandoned mid-fetch, is closed when collected, and its
    # cleanup fails on the closed loop: a seed's worker quiets that (_quiet_fenced); here it is
    # collected now, under the same hook, not at some later compile of pytest's.
    del sim
    monkeypatch.setattr(sys, "unraisablehook", _quiet_fenced)
    gc.collect()
    assert result.ok(), (result.violation, result.verdict)
    assert sorted({o[0] for o in outcomes}) == ["crash", "cut"], outcomes
    assert any(o[0] == "crash" and o[-1] == "crashed" for o in outcomes), outcomes
    for name in ("copy.fetch.retrying", "copy.fetch.resumed", "copy.fetch.stalled_gave_up",
                 "copy.source.session_expired", "copy.source.no_session",
                 "copy.abandoned.tombstoned", "tablet.open.unfinished_copy_tombstoned",
                 "copy.trigger.failed"):
        assert result.probes.get(name, 0) >= 1, name


MASTER_SWAP = "master-swap:4,restart:1,heal:1;every=0.5-2"


def test_the_leader_master_removed_hands_over_and_refuses_once_removed(tmp_path):
    """`master-swap` (a late kind): a master added, then the LEADER master removed, as Kudu's
    master migration moves the masters: it hands leadership over first and the tool asks the
    successor again (master.membership.leader_hands_over); the successor may lead before it
    has learned the address of the master just added, and then tells the tablet servers no
    master list (master.heartbeat.masters_not_learned); the removed master runs on a while and
    a client with the old master list asked there is refused (master.removed.refused). Its
    host is the spare after: stopped, wiped, not a master. No seed reached any of the three
    before; the seed stays valid and the servers heartbeat the committed masters."""
    assert "master-swap" in LATE and 20 < sum("master-swap" in swarm_mix(s, bundled=False).kinds()
                                               for s in range(200)) < 80
    assert parse_mix(MASTER_SWAP).spec() == MASTER_SWAP + ";reads=linearizable"
    sim = StackSim(StackConfig(seed=6, workload="register", seconds=15.0,
                               mix=parse_mix(MASTER_SWAP)), tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    swaps = [e[2] for e in sim.events if e[1] == "master-swap"]
    assert swaps and all(len(s) == 5 and s[4] == ["NOT_LEADER"] for s in swaps), swaps
    assert sim.spare == swaps[-1][2] and sim.spare not in sim.masters
    for name in ("master.membership.leader_hands_over", "master.removed.refused",
                 "master.heartbeat.masters_not_learned", "tserver.masters.adopted"):
        assert result.probes.get(name, 0) >= 1, name


UNSAFE = "unsafe:4,restart:1,heal:1;every=1-3"


def test_an_operators_unsafe_config_change_recovers_a_tablet_whose_majority_lost_power(tmp_path):
    """`unsafe` (a late kind): a tablet's two followers lose power and the operator forces the
    leader's config to itself alone (Kudu's unsafe_change_config, through the admin tool): it
    is refused while the survivor still leads (raft.unsafe_change.refused_leader), appended
    once it has stepped down (raft.unsafe_change.appended), and the tablet is brought back to
    three replicas. The lost replicas were deleted before their servers ran again (tombstones),
    so the old config's majority never elects anyone; the survivor held every committed entry,
    so nothing acknowledged is lost: the seed is valid."""
    assert "unsafe" in LATE and 20 < sum("unsafe" in swarm_mix(s, bundled=False).kinds() for s in range(200)) < 80
    sim = StackSim(StackConfig(seed=0, workload="register", seconds=15.0, mix=parse_mix(UNSAFE)),
                   tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    (tablet, s, f1, f2, _, tries, added), = [e[2] for e in sim.events if e[1] == "unsafe"]
    assert tries[0].startswith("refused: leads") and tries[-1] == "appended" and len(added) == 2
    for name in ("raft.unsafe_change.refused_leader", "raft.unsafe_change.appended"):
        assert result.probes.get(name, 0) >= 1, name
    for host in (f1, f2):  # the lost replicas: tombstones, never running again
        states = {rep.tablet_id: rep.state for rep in sim.servers[host].reports()}
        assert states.get(tablet) == "TOMBSTONED", (host, states.get(tablet))
    leader = next(r for h in sim.tservers if (r := getattr(sim.servers.get(h), "replicas", {})
                                                  .get(tablet)) is not None and r.role.name == "LEADER")
    voters = {m[0] for m in leader.status()["committed_config"] if m[1] == "VOTER"}
    assert voters == {sim.servers[s].uuid, *added}



# Seed 158's swarm mix when it was found.
SEED_158_MIX = ("restart:2,heal:2,drift:1,flip-newest:8,torn:4,delay:2,damage:2,full:2,"
                "damage-file:4,unsafe:2,ddl:2,garble:4;every=0.2-0.8;reads=linearizable;"
                "load=20x200;clock=20000;writes=session-background;values=wide;batch=2;"
                "inflight=4;results=8")


def test_swarm_seed_158_no_longer_forces_a_config_beside_the_lost_replicas(tmp_path):
    """Seed 158 failed state machine safety (tablet -0003 index 4 committed in term 2 on
    10.77.0.114, term 1 elsewhere): the unsafe fault's try meant to be refused reached the
    survivor S just after it stepped down, so S appended its forced config (index 4, term 1)
    while the fault still meant to delete the lost replicas only later, and it ended without
    deleting them; their servers came back, a majority of the old config, and committed
    another entry at index 4 in term 2. The operator now deletes them before forcing
    anything: the seed is valid and the lost replicas are tombstones."""
    sim = StackSim(StackConfig(seed=158, workload="register", seconds=30.0,
                               mix=parse_mix(SEED_158_MIX)), tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    (tablet, _, f1, f2, _, tries, added), = [e[2] for e in sim.events if e[1] == "unsafe"]
    assert tries[-1] == "appended" and len(added) == 2, tries
    for host in (f1, f2):
        states = {rep.tablet_id: rep.state for rep in sim.servers[host].reports()}
        assert states.get(tablet) == "TOMBSTONED", (host, states.get(tablet))


def test_the_unsafe_fault_deletes_the_lost_replicas_before_any_try_reaches_the_survivor(
        monkeypatch):
    """The race of seed 158, narrowly: S is seen leading at every look, but the operator's
    first try reaches it just after it stepped down and is appended. The lost replicas must
    be deleted before that try is sent (and so before their servers could run again)."""
    from types import SimpleNamespace

    import node.tools.admin as admin
    import node.tools.local_replica as local_replica
    from harness.sim import stack_unsafe

    calls = []

    async def unsafe_change_config(client, tablet, voters):
        calls.append(("unsafe", tablet, tuple(voters)))  # S stepped down meanwhile: appended
        return []

    def delete_replica(data_dir, tablet, keep_tombstone, disk):
        calls.append(("delete", tablet, disk))

    async def change_replica(tablet, op, uuid):
        calls.append(("add", tablet, uuid))

    monkeypatch.setattr(admin, "unsafe_change_config", unsafe_change_config)
    monkeypatch.setattr(local_replica, "delete_replica", delete_replica)
    s = SimpleNamespace(role=SimpleNamespace(name="LEADER"), uuid="u-s", commit_index=7,
                        core=SimpleNamespace(log=SimpleNamespace(stable=7)))
    hosts = ("s", "f1", "f2", "x1", "x2")
    sim = SimpleNamespace(
        servers={h: SimpleNamespace(uuid=f"u-{h}", replicas={"t": s} if h == "s" else {})
                 for h in hosts},
        tservers=list(hosts), down=set(), disks={h: f"disk-{h}" for h in hosts},
        client=SimpleNamespace(change_replica=change_replica))
    sim._crash = sim.down.add
    out = asyncio.run(stack_unsafe.unsafe_change(sim, ["t", "s", "f1", "f2", 0.0]))
    assert out == ["t", "s", "f1", "f2", 0.0, ["appended"], ["u-x1", "u-x2"]]
    assert calls[:3] == [("delete", "t", "disk-f1"), ("delete", "t", "disk-f2"),
                         ("unsafe", "t", ("u-s",))], calls


DDL = "ddl:8,restart:1,heal:1;every=0.5-2"


def test_tables_dropped_beside_the_workload_and_a_deposed_master_keeps_what_it_never_saw(
        tmp_path):
    """`ddl` (a late kind): tables created and dropped beside the workload; the reconciler
    deletes the replicas of the dropped tablets (master.reconcile.delete_deleted_tablet). Its
    split variant creates one at a new leader master while the old one, cut off from its
    peers but not from the tablet servers, has not noticed it is deposed: its reconciler hears
    of tablets its catalog never saw and leaves them alone (master.catalog.unknown_tablet_kept).
    The seed stays valid, and no tablet server runs a replica of a dropped table at the end."""
    from harness.sim.stack_masters import leader_master
    from node.master.catalog import CATALOG, Catalog

    assert "ddl" in LATE and 20 < sum("ddl" in swarm_mix(s, bundled=False).kinds() for s in range(200)) < 80
    sim = StackSim(StackConfig(seed=7, workload="register", seconds=15.0, mix=parse_mix(DDL)),
                   tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    ddls = [e[2] for e in sim.events if e[1] == "ddl"]
    assert any(d[0] == "split" for d in ddls) and all(d[-1] == "dropped" for d in ddls), ddls
    for name in ("master.reconcile.delete_deleted_tablet", "master.catalog.unknown_tablet_kept"):
        assert result.probes.get(name, 0) >= 1, name
    catalog = Catalog(sim.servers[leader_master(sim)].replicas[CATALOG].state.data)
    assert catalog.table_names() == ["test"]
    live = {t.id for t in catalog.tablets()}
    running = {rep.tablet_id for h in sim.tservers if h in sim.servers
               for rep in sim.servers[h].reports() if rep.state == "RUNNING"}
    assert running <= live, running - live


def test_a_create_whose_reply_came_late_is_answered_with_the_table_on_its_retry(
        tmp_path, monkeypatch):
    """An isolated tablet server still counted live makes the master's CreateTable wait for it
    past the client's attempt timeout; the retry reaches a catalog with the table. Before the
    create token, the client was told ALREADY_EXISTS for its own table: `ddl` makes that a
    violation (no one else creates its name), and this recorded seed failed on it; it still
    fails with the client's `no-ddl-token` bug on."""
    from harness.sim.stack import StackConfig, StackSim
    from node.client import faults

    cfg = StackConfig(seed=7, workload="list-append", seconds=20.0,
                      mix=parse_mix("ddl:5,isolate:2,partition:2,heal:1;every=1-3;reads=lease"))
    result = StackSim(cfg, tmp_path / "fixed").run()
    assert result.ok(), (result.violation, result.verdict)
    assert result.probes.get("master.create_table.retry_answered", 0) >= 1, result.probes
    monkeypatch.setattr(faults, "FAULTS", faults.parse("no-ddl-token"))
    broken = StackSim(cfg, tmp_path / "broken").run()
    assert "ALREADY_EXISTS" in (broken.violation or ""), (broken.verdict, broken.violation)


def _late_kind_alone(kind: str, tmp_path, seed: int = 3):
    """Seed `seed` of `kind` beside restarts alone (15 s of register), which must pass; the kind
    is a late draw that about a quarter of the swarm seeds take. (config, sim, result)."""
    from harness.sim.stack import StackConfig, StackSim

    assert 20 < sum(kind in swarm_mix(s, bundled=False).kinds() for s in range(200)) < 80
    cfg = StackConfig(seed=seed, workload="register", seconds=15.0,
                      mix=parse_mix(f"{kind}:8,restart:1,heal:1;every=0.5-2"))
    sim = StackSim(cfg, tmp_path / "fixed")
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    return cfg, sim, result


def test_a_ddl_retried_after_another_users_call_is_answered_as_the_call_it_repeats(
        tmp_path, monkeypatch):
    """`ddl-retry`: a reply lost, another user's call, then the retry with its token. A drop
    retried after its name was re-created dropped the new table (the master looked at the table
    before the token), and a create retried after its table was dropped made it again (nothing
    said which call had made the dropped one). This seed failed on both. The retried drop is
    now answered ok and the new table stays; the retried create is told its table was dropped
    (master.delete_table.retry_answered, which before this kind only a test reached, and
    master.create_table.retry_found_dropped). A master without either token fails again."""
    from harness.sim.stack import StackSim
    from node.master.catalog import Catalog

    cfg, sim, result = _late_kind_alone("ddl-retry", tmp_path)
    ends = {(e[2][0], e[2][-1]) for e in sim.events if e[1] == "ddl"}
    assert ends == {("retry", "dropped"), ("retry-create", "refused")}, ends
    for name in ("master.delete_table.retry_answered", "master.create_table.retry_found_dropped"):
        assert result.probes.get(name, 0) >= 2, (name, result.probes)
    for forgotten, violation in (("dropped_by", "dropped the new table"),
                                 ("dropped_creator", "made it again")):
        with monkeypatch.context() as m:
            m.setattr(Catalog, forgotten, lambda self, name: None)
            broken = StackSim(cfg, tmp_path / forgotten).run()
        assert violation in (broken.violation or ""), (forgotten, broken.violation)


def test_a_ddl_retry_that_stops_early_drops_the_table_it_may_have_left(tmp_path, monkeypatch):
    """A `retry` step that fails under the faults around it ("skipped: ...") may leave the
    table behind (its create landed, or the re-create did): the fault drops it, as the
    `retry-create` variant does, so a skipped step leaves the cluster no larger."""
    from harness.sim import stack_ddl

    async def skipped(sim, table, tablets):
        return "skipped: the re-create: a test's stand-in"

    monkeypatch.setattr(stack_ddl, "_drop_lost_and_retried_after_recreate", skipped)
    _, sim, _ = _late_kind_alone("ddl-retry", tmp_path)
    ends = [e[2][-1] for e in sim.events if e[1] == "ddl" and e[2][0] == "retry"]
    assert ends and all(end == "skipped: the re-create: a test's stand-in (dropped)"
                        for end in ends), ends


def test_a_replica_change_retried_after_its_reply_was_lost_is_answered_as_made(tmp_path,
                                                                              monkeypatch):
    """`change-retry`: a follower removed and added back through the leader master, each reply
    lost once and the change retried as the client retries it. The retry was refused "is not a
    member" (and "already a member"): the client raised for its own change, and seeds failed
    on it. The master now answers a refused retry with the committed config once nothing is
    pending (both of its probes reached here), and fails again without that answer."""
    from harness.sim.stack import StackSim
    from node.master.server import Master

    cfg, sim, result = _late_kind_alone("change-retry", tmp_path, seed=90)
    outcomes = [e[2][-1] for e in sim.events if e[1] == "change-retry"]
    assert len(outcomes) >= 5 and all(o == ["remove", "add"] for o in outcomes), outcomes
    for name in ("master.change_replica.retry_already_made",
                 "master.change_replica.retry_waited_pending"):
        assert result.probes.get(name, 0) >= 1, (name, result.probes)

    async def not_made(self, leader, req):
        return None

    monkeypatch.setattr(Master, "_change_made", not_made)
    broken = StackSim(cfg, tmp_path / "broken").run()
    assert "that landed was refused" in (broken.violation or ""), broken.violation


def test_a_mix_can_run_every_other_server_with_a_shorter_election_timeout(tmp_path):
    """`missed=N`: servers started with different timing flags, as a rolling restart with
    changed flags leaves a cluster. Every other host (masters and tablet servers alike) runs
    N missed heartbeats before an election, the rest the default; the spec reads back."""
    from harness.sim.stack import StackConfig, StackSim

    mix = parse_mix("restart:1,heal:1;reads=lease;missed=2")
    assert mix.missed == 2 and parse_mix(mix.spec()) == replace(mix, name="spec")
    sim = StackSim(StackConfig(seed=1, mix=mix), tmp_path)
    periods = [sim._options(h).replica.leader_failure_max_missed_heartbeat_periods
               for h in sorted(sim.disks)]
    assert periods[0::2] == [3] * len(periods[0::2]) and set(periods[1::2]) == {2}
    with pytest.raises(ValueError, match="missed='0'"):
        parse_mix("restart:1;missed=0")
    sim.loop.close()
    drawn = [swarm_mix(s) for s in _unbundled(range(200))]
    missed = [m for m in drawn if m.missed is not None]
    assert all(m.read_mode == "lease" and m.missed == 2 for m in missed)  # drawn for leases
    lease = [m for m in drawn if m.read_mode == "lease"]
    assert len(lease) // 8 <= len(missed) <= len(lease) // 2, (len(missed), len(lease))
    assert all(parse_mix(m.spec()).missed == 2 for m in missed)


def test_a_shared_smart_client_and_bursts_are_drawn_and_a_spec_carries_them():
    """A quarter of the seeds draw the smart client (workers sharing one client that goes to
    the leader, as `--client smart`), in a stream of its own; bursts (`--pacing bursts`) are a
    spec option only. A spec carries both, and refuses bursts where the workers run back to
    back and a value after either."""
    from harness.sim.swarm import ALL_BUNDLES, bundle_of

    own = [swarm_mix(s, bundled=False) for s in range(200)]  # the seeds' own draws
    assert 25 < sum(m.smart for m in own) < 70 and not any(m.bursts for m in own)
    mixes = [swarm_mix(s) for s in range(200)]
    assert all(m == replace(parse_mix(ALL_BUNDLES[b]), name="swarm")
               for s, m in enumerate(mixes) if (b := bundle_of(s)))  # a bundle stays whole
    m = parse_mix("crash:1;load=10x100;writes=session-manual;smart;bursts")
    assert m.smart and m.bursts and m.spec().endswith(";smart;bursts")
    assert parse_mix(m.spec()) == m and m.as_json()["smart"] is True
    assert not parse_mix("crash:1").smart and not parse_mix("crash:1").bursts
    with pytest.raises(ValueError, match="smart and bursts take no value"):
        parse_mix("crash:1;smart=yes")
    with pytest.raises(ValueError, match="bursts spread paced op starts"):
        parse_mix("crash:1;writes=shared;bursts")
    with pytest.raises(ValueError, match="bursts spread paced op starts"):
        parse_mix("crash:1;writes=session-manual;unpaced;bursts")


@pytest.mark.slow
def test_list_append_through_a_smart_client_in_bursts_groups_one_tablets_writes(
        tmp_path, batch_sizes):
    """list-append's key sets bind one set's workers to different servers, so node-bound
    workers never share a client for one tablet; through the smart client, in bursts, a
    manual-flush session sends several of their writes in one batch, under crashes, and the
    seed is valid."""
    mix = parse_mix("crash:2,restart:2,heal:1;every=1-2;load=10x100;writes=session-manual;"
                    "smart;bursts")
    r = StackSim(StackConfig(seed=3, workload="list-append", seconds=10.0, mix=mix),
                 tmp_path).run()
    assert r.ok(), (r.violation, r.verdict, r.results.get("anomalies"))
    assert any(n > 1 for n in batch_sizes), batch_sizes


def test_flip_newest_leaves_alone_a_replica_start_up_would_not_read():
    """The flip-newest fault scans each tablet's newest WAL segment on the host for a batch to
    flip. A copy cut part-way leaves a COPYING superblock and segment files written at the
    offsets of the chunks that came, a header missing, say; the scan raised WalCorruption out
    of the nemesis and the seed ended unknown. Start-up tombstones such a
    replica and never reads its files: they are no target."""
    import random

    from harness.sim.disk import SimDisk, SimFaults
    from harness.sim.stack_checks import DATA_DIR
    from harness.sim.stack_damage import newest_segment
    from node import durable
    from node.disk import pwrite_all
    from node.tablet.paths import TabletPaths
    from node.tablet.superblock import DataState, KeyRange, OpId, Superblock
    from node.wal.errors import WalCorruption

    disk = SimDisk(random.Random(1), SimFaults())
    paths = TabletPaths(DATA_DIR, "t1", disk)
    sb = Superblock("t1", "tbl", KeyRange(), DataState.COPYING, tombstone_last_opid=OpId(0, 0))
    sb.save(paths.superblock, disk)
    durable.ensure_dir(paths.wal_dir, disk)
    fd = disk.open(paths.wal_dir / "wal-000000001", create=True)
    pwrite_all(disk, fd, [b"\1" * 16], 4096)  # a chunk past a header that never came
    disk.close(fd)
    assert newest_segment(disk, "t1") is None
    sb.with_state(DataState.READY).save(paths.superblock, disk)
    with pytest.raises(WalCorruption, match="bad segment magic"):
        newest_segment(disk, "t1")  # READY: start-up reads it, and so does the fault
