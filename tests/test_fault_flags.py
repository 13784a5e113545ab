"""Each unsafe fault flag really produces its bug (and nothing happens without it), and a daemon
refuses every fault flag unless unsafe flags are unlocked."""

from __future__ import annotations

import argparse
import asyncio
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from lazyfs_helpers import REPO
from replica_net import (
    TABLET,
    TAIL,
    Net,
    open_session,
    options,
    rejoin_with_uncommitted_tail,
    write_wal,
)

from harness.sim.runner import run_seeds
from harness.sim.script import ScriptCluster
from node import faults
from node.consensus import (
    CoreConfig,
    HardState,
    Member,
    MemberType,
    PersistedState,
    RaftConfig,
    RaftCore,
    Role,
    SafetyError,
    VoteRequest,
)
from node.entry import Entry, EntryType
from node.errors import ReplicaError
from node.faults import Faults
from node.replica.replica import Replica
from node.server import daemon_cli
from node.tablet.cmeta import ConsensusMetadata
from node.tablet.ops import Append, OpenSession, Read, Write, encode_command
from node.tablet.state import StateMachine
from node.tools.local_cluster import free_port
from node.wal import Log, LogOptions
from node.wal import segment as segment_mod


def parse(argv):
    p = argparse.ArgumentParser()
    daemon_cli.configure(p, "tserver")
    return p.parse_args(argv)


@pytest.mark.parametrize("name", [n for n in faults.flags() if n != faults.UNLOCK])
def test_every_fault_flag_is_refused_unless_unlocked(tmp_path, name):
    flag = "--" + name.replace("_", "-")
    with pytest.raises(ValueError, match=f"^{name} is an unsafe flag"):
        daemon_cli.resolve(parse(["--data-dir", "/d", flag, "true"]))
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'data_dir = "/d"\n{name} = true\nunlock_unsafe_flags = true\n')
    values = daemon_cli.resolve(parse(["--config", str(cfg)]))
    opts = daemon_cli.build_options(values, "tserver")
    assert opts.replica.faults.enabled() == [name]
    assert opts.replica.log.faults is opts.replica.faults


def test_daemon_without_unlock_exits_non_zero_with_one_line_naming_the_flag(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'data_dir = "{tmp_path / "d"}"\nfault_skip_dedup = true\n')
    out = subprocess.run([sys.executable, "-m", "harness.cli", "tserver", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert out.stderr.strip().splitlines() == [
        "tessera tserver: fault_skip_dedup is an unsafe flag: it also needs "
        "unlock_unsafe_flags = true (--unlock-unsafe-flags)"]
    assert not (tmp_path / "d").exists()  # refused before touching anything


def test_unlocked_daemon_starts_and_warns_loudly_about_each_fault_flag(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "tserver", "--data-dir", str(tmp_path / "d"),
         "--rpc-addr", f"127.0.0.1:{free_port()}", "--unlock-unsafe-flags", "true",
         "--fault-ack-before-fsync", "true", "--fault-skip-dedup", "true"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("tserver ")  # "ready": it started
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    warnings = [line for line in err.splitlines() if "WARNING" in line and "UNSAFE FAULT FLAG ON" in line]
    assert [w.split("ON: ")[1].split(" = ")[0] for w in warnings] == [
        "fault_ack_before_fsync", "fault_skip_dedup"]


# -- fault_ack_before_fsync -------------------------------------------------------------------

@pytest.mark.parametrize("bug,expected", [
    (False, ["sync", "ack 1", "sync", "ack 2"]),
    (True, ["ack 1", "sync", "ack 2"]),  # each group is acknowledged before its sync
])
def test_ack_before_fsync_runs_the_callback_before_the_sync(tmp_path, monkeypatch, bug, expected):
    events: list[str] = []
    real_sync = segment_mod.WritableSegment.sync
    monkeypatch.setattr(segment_mod.WritableSegment, "sync",
                        lambda seg: (events.append("sync"), real_sync(seg)))
    opts = LogOptions(log_preallocate_segments=False, faults=Faults(fault_ack_before_fsync=bug))
    with Log.open(str(tmp_path), TABLET, opts) as wal:
        for i in (1, 2):
            done = threading.Event()
            wal.async_append(wal.reserve([Entry(1, i, EntryType.NO_OP)]),
                             lambda _err, i=i, done=done: (events.append(f"ack {i}"), done.set()))
            assert done.wait(10)
    assert events == expected


ACK_CHILD = r"""
import sys, threading, time
from node.entry import Entry, EntryType
from node.faults import Faults
from node.wal import Log, LogOptions

directory, bug, n = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
log = Log.open(directory, "t", LogOptions(faults=Faults(fault_ack_before_fsync=bug)))
for i in range(1, n + 1):  # one entry per group, each acknowledged before the next is written
    done = threading.Event()
    log.async_append(log.reserve([Entry(1, i, EntryType.REPLICATE, b"p")]), lambda e: done.set())
    done.wait()
print(n, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/dev/fuse").exists(), reason="needs /dev/fuse")
@pytest.mark.parametrize("bug", [False, True])
def test_ack_before_fsync_loses_an_acknowledged_entry_in_a_crash(lazy, bug):  # noqa: F811
    """kill -9, then lazyfs drops what was never synced (the lose-unfsynced-writes nemesis)."""
    child = subprocess.Popen([sys.executable, "-c", ACK_CHILD, lazy.path("wal"), str(int(bug)),
                              "20"], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert child.stdout.readline() == "20\n"  # all 20 acknowledged
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
    lazy.command("lose")
    with Log.open(lazy.path("wal"), "t") as wal:
        recovered = [e.index for e in wal.recovered]
    assert recovered == list(range(1, 20 if bug else 21))


# -- fault_skip_dedup ---------------------------------------------------------------------------

@pytest.mark.parametrize("bug,expected", [(False, ["x"]), (True, ["x", "x"])])
def test_skip_dedup_applies_a_retried_write_twice(bug, expected):
    sm = StateMachine(TABLET, faults=Faults(fault_skip_dedup=bug))
    sm.apply(Entry(1, 1, EntryType.REPLICATE, encode_command(OpenSession())))
    retry = encode_command(Append("k", "x"), session=1, seq=1)
    results = [sm.apply(Entry(1, i, EntryType.REPLICATE, retry)) for i in (2, 3)]
    assert all(r.ok for r in results)
    assert sm.data["k"] == expected


# -- fault_apply_uncommitted_at_bootstrap -----------------------------------------------------

@pytest.mark.parametrize("bug", [False, True])
def test_apply_uncommitted_at_bootstrap_applies_the_unknown_tail(tmp_path, bug):
    net = Net(tmp_path)
    write_wal(net.paths["a"], TAIL)
    r = Replica("a", net.paths["a"], lambda *_: None,
                options(Faults(fault_apply_uncommitted_at_bootstrap=bug)))
    r.open()
    try:
        assert r.core.commit == 0  # nothing is known committed at start-up
        assert r.state.data == ({"k": "uncommitted"} if bug else {})
        assert r.state.last_applied_index == (2 if bug else 0)
    finally:
        r.wal.close()


@pytest.mark.parametrize("bug", [False, True])
def test_apply_uncommitted_at_bootstrap_makes_the_replica_diverge(tmp_path, bug):
    a, leader = asyncio.run(rejoin_with_uncommitted_tail(tmp_path, bug))
    assert a.core.log.slice(1, 3) == leader.core.log.slice(1, 3)  # the logs agree...
    assert leader.state.data == {"other": 1}
    assert a.state.data == ({"k": "uncommitted"} if bug else {"other": 1})  # ...states do not


# -- fault_read_without_leadership ------------------------------------------------------------

@pytest.mark.parametrize("bug", [False, True])
def test_cut_off_leader_serves_stale_reads_only_with_the_bug(tmp_path, bug):
    async def main():
        net = Net(tmp_path, bugs={u: Faults(fault_read_without_leadership=bug) for u in "abc"})
        net.start()
        try:
            old = await net.leader()
            session = await open_session(old)
            await old.write(Write("k", "v1"), session=session, seq=1, acked_below=0)
            net.cut.add(old.uuid)
            new = await net.leader(among=set("abc") - {old.uuid})
            session = await open_session(new)
            await new.write(Write("k", "v2"), session=session, seq=1, acked_below=0)
            try:
                return old.role, (await asyncio.wait_for(old.read(Read("k")), 1.0)).value
            except (ReplicaError, TimeoutError) as e:
                return old.role, e
        finally:
            await net.stop()

    role, answer = asyncio.run(main())
    if bug:  # still believes it leads, and answers a value already overwritten
        assert (role, answer) == (Role.LEADER, "v1")
    else:  # check-quorum deposed it; the read failed instead of answering
        assert role != Role.LEADER and isinstance(answer, (ReplicaError, TimeoutError))


def test_read_fault_disables_check_quorum_and_vote_fault_reaches_the_core():
    assert options().core_config("a").check_quorum is True
    assert options(Faults(fault_read_without_leadership=True)).core_config("a").check_quorum is False
    assert options(Faults(fault_vote_skip_log_check=True)).core_config("a").vote_skip_log_check


@pytest.mark.parametrize("flag,option", [
    ("fault_vote_skip_log_check", "vote_skip_log_check"),
    ("fault_commit_prior_term_by_count", "commit_prior_term_by_count"),
    ("fault_keep_conflicting_suffix", "keep_conflicting_suffix"),
    ("fault_vote_twice_in_term", "vote_twice_in_term"),
    ("fault_count_unsynced_own_entries", "count_unsynced_own_entries"),
])
def test_raft_fault_flags_reach_the_core_config_and_only_their_own_option(flag, option):
    unsafe = ("vote_skip_log_check", "commit_prior_term_by_count", "keep_conflicting_suffix",
              "vote_twice_in_term", "count_unsynced_own_entries")
    assert not any(getattr(options().core_config("a"), o) for o in unsafe)
    on = options(Faults(**{flag: True})).core_config("a")
    assert [o for o in unsafe if getattr(on, o)] == [option]
    assert on.check_quorum is True


@pytest.mark.parametrize("bug", [False, True])
def test_vote_twice_in_term_grants_a_second_candidate_and_the_metadata_guard_refuses_it(
        tmp_path, bug):
    """The core grants n3 after n1 in term 1 only with the bug; the consensus metadata, which
    the replica saves before any vote goes out, refuses the second vote as a SafetyError (the
    replica goes FAILED on it, with a SAFETY line)."""
    voters = tuple(Member(u, MemberType.VOTER) for u in ("n1", "n2", "n3"))
    core = RaftCore(CoreConfig("n2", vote_twice_in_term=bug), random.Random(1),
                    PersistedState(HardState(), RaftConfig(0, voters)))
    cmeta = ConsensusMetadata.create(tmp_path / "t", "t", b"c")
    granted, refused = [], []
    for candidate in ("n1", "n3"):
        core.step(VoteRequest(1, candidate, "n2", 0, 0))
        rd = core.ready()
        core.advance(rd)
        granted += [m.to_uuid for m in rd.messages if m.granted]
        if rd.hard_state is not None:
            try:
                cmeta.update((rd.hard_state.term, rd.hard_state.voted_for))
            except SafetyError as e:
                refused.append(str(e))
    assert granted == (["n1", "n3"] if bug else ["n1"])
    assert refused == (["term 1: already voted for 'n1', not 'n3'"] if bug else [])
    assert (cmeta.current_term, cmeta.voted_for) == (1, "n1")


# -- Raft core faults, in the deterministic simulator ------------------------------------------
# Every node runs with the fault's core option; the simulator's invariants must report a safety
# violation within the seed budget, and the same seeds must run clean without the option.

SIM_SEEDS = 200
SIM_STEPS = 4000


@pytest.mark.slow
@pytest.mark.parametrize("option,violations", [
    ("commit_prior_term_by_count", ("commit durability", "state machine safety",
                                    "leader completeness")),
    ("keep_conflicting_suffix", ("quorum", "state machine safety", "log matching")),
    ("count_unsynced_own_entries", ("quorum",)),  # only seeds whose leaders write behind
])
def test_simulator_reports_a_safety_violation_only_with_the_core_fault(option, violations):
    bad = run_seeds(SIM_SEEDS, steps=SIM_STEPS, stop_at_first=True, core_options={option: True})
    assert bad.failures, f"{option} survived {SIM_SEEDS} seeds"
    assert bad.failures[0].violation.startswith(violations), bad.failures[0].violation
    good = run_seeds(SIM_SEEDS, steps=SIM_STEPS, core_options={option: False})
    assert not good.failures, [(r.seed, r.violation) for r in good.failures]
    assert not good.liveness_failures


# -- fault_commit_prior_term_by_count -----------------------------------------------------------

def applied_at(c: ScriptCluster, uuid: str, index: int) -> Entry | None:
    return next((e for e in c.applied[uuid] if e.index == index), None)


@pytest.mark.parametrize("bug", [False, True])
def test_commit_prior_term_by_count_commits_an_entry_that_is_later_overwritten(bug):
    """Raft figure 8: n1 (term 3) re-replicates its term-1 entry at index 2 to n2. Counting it
    as committed is wrong: n3 (last entry of term 2) can still win and overwrite it."""
    c = ScriptCluster(batch_bytes=1, commit_prior_term_by_count=bug)
    c.elect("n1")
    c.stabilize()
    c.isolate("n1")
    c.do("n1", "propose", b"x")  # index 2, term 1: only on n1
    c.stabilize()
    c.crash("n1")
    c.heal()
    c.elect("n3")  # term 2
    c.drop("n3")  # its NO_OP at index 2 never leaves n3
    c.crash("n3")
    c.restart("n1")
    c.elect("n1")  # term 3
    for _ in range(2):  # the probe is rejected, then index 2 (term 1) is acknowledged
        c.deliver("n1", "n2", limit=1)
        c.deliver("n2", "n1", limit=1)
    assert c.log_terms("n2") == [1, 1]
    # n1 restarted with commit 0 (like Replica.open()) and leads term 3 before any entry of
    # term 3 is replicated: only counting replicas of the term-1 entry commits anything
    assert c.core("n1").commit == (2 if bug else 0)
    c.crash("n1")
    c.restart("n3")
    c.elect("n3")  # term 4: n3's log (last term 2) is ahead of n2's (last term 1)
    c.stabilize()
    c.tick("n3")  # n2 hears the commit index at n3's next tick
    c.stabilize()
    assert c.log_terms("n2") == [1, 2, 4]  # the term-1 entry at index 2 is overwritten
    assert applied_at(c, "n2", 2).term == 2
    if bug:  # n1 applied the entry n2 and n3 later replaced: the replicas diverge
        assert (applied_at(c, "n1", 2).term, applied_at(c, "n1", 2).payload) == (1, b"x")
    else:
        assert applied_at(c, "n1", 2) is None


# -- fault_keep_conflicting_suffix --------------------------------------------------------------

@pytest.mark.parametrize("bug", [False, True])
def test_keep_conflicting_suffix_follower_applies_its_own_entry_where_peers_have_another(bug):
    c = ScriptCluster(keep_conflicting_suffix=bug)
    c.elect("n1")
    c.stabilize()
    c.isolate("n1")
    c.do("n1", "propose", b"old")  # index 2, term 1: only on n1, never committed
    c.stabilize()
    c.elect("n2")  # term 2, with n3: its NO_OP at index 2
    c.do("n2", "propose", b"new")  # index 3
    c.stabilize()
    assert c.core("n2").commit == 3
    c.heal()
    c.tick("n2", 5)  # a heartbeat round reaches n1, which then catches up
    c.stabilize()
    assert c.core("n1").role == Role.FOLLOWER and c.core("n1").commit == 3
    assert c.log_terms("n2") == [1, 2, 2]
    assert c.log_terms("n1") == ([1, 1, 2] if bug else [1, 2, 2])  # kept its conflicting entry
    mine, theirs = applied_at(c, "n1", 2), applied_at(c, "n2", 2)
    assert theirs.term == 2 and applied_at(c, "n3", 2) == theirs
    if bug:  # acknowledged as stored, committed, and applied with the wrong contents
        assert (mine.term, mine.payload) == (1, b"old")
    else:
        assert mine == theirs
    assert [e.payload for e in c.applied["n1"] if e.index == 3] == [b"new"]
