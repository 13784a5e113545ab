"""Swarm knobs and recorded mixes that reach code probes no whole-stack seed had reached: each
a recorded seed and mix spec, valid, with the probes it must fire (as tests/test_sim_swarm.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from harness.sim.stack import StackConfig, StackSim
from harness.sim.stack_damage import AIMED_MODES
from harness.sim.swarm import (
    ALL_BUNDLES,
    BUNDLE_AIMS,
    BUNDLE_DRAW,
    BUNDLED,
    BUNDLES,
    EIGHTH_BUNDLES,
    ELEVENTH_BUNDLES,
    FIFTEENTH_BUNDLES,
    FIFTH_BUNDLES,
    FOURTEENTH_BUNDLES,
    FRESH_CLIENTS,
    LATE,
    LATE_BUNDLE_DRAW,
    LATE_BUNDLES,
    LATER_BUNDLES,
    LATEST_BUNDLES,
    NINTH_BUNDLES,
    SEVENTH_BUNDLES,
    SIXTEENTH_BUNDLES,
    SIXTH_BUNDLES,
    TENTH_BUNDLES,
    THIRTEENTH_BUNDLES,
    TWELFTH_BUNDLES,
    UNPACED,
    _own_draw,
    bundle_of,
    bundle_reach,
    parse_mix,
    swarm_mix,
    workload_for,
)
from node import probes


def _valid_and_fired(cfg: StackConfig, out, *names: str):
    """The seed `cfg` is valid and fires every probe of `names`; its result."""
    result = StackSim(cfg, out).run()
    assert result.ok(), (result.violation, result.verdict)
    for name in names:
        assert result.probes.get(name, 0) >= 1, name
    return result


def test_some_batching_mixes_run_their_workers_unpaced_and_the_spec_carries_it():
    """`unpaced` (its own draw) is drawn only where it changes how the workers write: the
    session modes, and shared writers of wide values, those only under a lowered frame."""
    assert set(UNPACED) == {False, True}
    mixes = [swarm_mix(s) for s in range(400)]
    unpaced = [m for m in mixes if m.unpaced]
    assert 20 < len(unpaced) < 100, len(unpaced)
    assert {m.writes for m in unpaced} == {"session-background", "session-manual", "shared"}
    assert all(m.frame_mb for m in unpaced if m.values == "wide")
    assert all(m.values == "wide" for m in unpaced if m.writes == "shared")
    assert all(parse_mix(m.spec()).unpaced and "unpaced" in m.spec().split(";") for m in unpaced)
    assert not any(m.unpaced for m in mixes if m.writes == "own")
    for bad in ("restart:1;unpaced", "restart:1;writes=shared;unpaced",
                "restart:1;writes=session-manual;values=wide;unpaced",
                "restart:1;writes=session-manual;unpaced=1"):
        with pytest.raises(ValueError, match="unpaced"):
            parse_mix(bad)


def test_unpaced_workers_fill_a_manual_flush_sessions_buffer_and_flush_again(tmp_path):
    """A MANUAL_FLUSH session of 2-op batches shared by a node's four workers, back to back:
    three of them apply to one tablet in one turn, the third finds the buffer full at its op
    count, flushes and applies again. Paced workers each woke on a timer of their own, so no
    apply ever met another caller's buffered op."""
    spec = BUNDLES["manual-fill"]
    _valid_and_fired(StackConfig(seed=2, workload="register", seconds=4.0, mix=parse_mix(spec)),
                     tmp_path, "client.session.buffer_full_ops",
                     "client.manual_flush.buffer_full_reflush")


def test_unpaced_shared_writers_of_wide_values_split_a_coalesced_batch_over_the_frame(tmp_path):
    """Shared writers of wide values under a 1 MiB server frame, back to back: writes issued in
    one turn leave as one ts.write_batch, which together exceed the servers' frame though each
    may fit alone; the client splits it and sends each alone. On an odd seed, as the default
    run picks its workload: the bundle names the register, whose values it sizes (list-append
    on odd seeds appended integers under it and never split a batch)."""
    mix = parse_mix(BUNDLES["frame-split"])
    _valid_and_fired(StackConfig(seed=1, workload=workload_for(1, mix), seconds=6.0, mix=mix),
                     tmp_path, "client.batch.coalesced_sent", "client.batch.split_after_too_large")


def test_a_read_handed_to_a_leader_that_just_stepped_down_is_refused(tmp_path):
    """Leadership transfers under a read-mostly load on slow fsyncs: a read reaches the leader
    while its driver saves the new term of a step-down (the replica still says leader), and
    the core refuses its ReadIndex when the driver hands it over. Fired only in 60 s seeds
    before; no new knob, a recorded mix (in 10 of its seeds 0-11 now)."""
    spec = BUNDLES["transfer-read"]
    _valid_and_fired(StackConfig(seed=1, workload="register", seconds=10.0, mix=parse_mix(spec)),
                     tmp_path, "read.refused_not_leader")



def test_aimed_file_damage_misplaces_a_replicas_consensus_metadata_and_flips_a_footer(tmp_path):
    """`damage-file` (a late kind): the damage fault aimed at file kinds its draw rarely
    reaches (one file kind among many, on at most two servers a seed). Another tablet's
    consensus metadata in a replica's place is refused at the open (cmeta.load.wrong_tablet),
    a finished segment whose footer's CRC fails is refused at bootstrap
    (wal.scan.footer_damaged); each replica comes back FAILED, as the checks demand of judged
    damage, and the seed stays valid."""
    assert "damage-file" in LATE and 30 < sum("damage-file" in swarm_mix(s).kinds()
                                               for s in range(200)) < 140
    spec = "damage-file:4,restart:1,heal:1;every=0.5-2;reads=linearizable;load=10x100"
    sim = StackSim(StackConfig(seed=0, workload="register", seconds=10.0, mix=parse_mix(spec)),
                   tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    modes = {e[2][1] for e in sim.events if e[1] == "damage"}
    assert modes == set(AIMED_MODES), sim.events
    for name in ("cmeta.load.wrong_tablet", "wal.scan.footer_damaged", "tablet.failed.at_open"):
        assert result.probes.get(name, 0) >= 1, name


def test_a_small_session_results_bound_forgets_outstanding_results_and_refuses_large_batches(
        tmp_path):
    """`results=N` (RESULTS, its own draw): every tablet keeps N results per session. Shared
    writers keep more outstanding behind a stalled attempt than that: the oldest are forgotten,
    and the stalled attempt's retry is told STALE_SEQ (an outcome unknown). A session mode's
    batch of more ops than the bound is refused before it is proposed (a definite failure the
    client does not retry). Both seeds stay valid."""
    mixes = [swarm_mix(s) for s in range(200)]
    drawn = Counter(m.max_results for m in mixes)
    assert set(drawn) == {None, 3, 8} and 100 < drawn[None] < 200, drawn
    shared = parse_mix(LATER_BUNDLES["shared-results"])  # drawn whole by a few swarm seeds
    assert shared.max_results == 8 and ";results=8;" in shared.spec()
    assert parse_mix(shared.spec()) == shared
    with pytest.raises(ValueError, match="results='0'"):
        parse_mix("restart:1;results=0")
    # a seed whose partitions stall an attempt behind more writes than the bound keeps
    _valid_and_fired(StackConfig(seed=2, workload="register", seconds=6.0, mix=shared),
                     tmp_path / "shared", "tablet.session.results_over_bound_forgotten",
                     "tablet.session.stale_seq", "client.write.session_lost_unknown")
    batches = BUNDLES["batch-refused"]
    _valid_and_fired(StackConfig(seed=0, workload="register", seconds=4.0,
                                 mix=parse_mix(batches)),
                     tmp_path / "batches", "tserver.write_batch.refused_invalid",
                     "client.retry.refused")


def test_a_caller_that_gives_up_before_its_client_has_its_buffered_op_dropped_unsent(tmp_path):
    """`caller=MS` (CALLERS_MS, its own draw): the harness waits that long for each op, as
    Jepsen's clients and an application's request handlers bound a call, with the client's
    own timeout still 5 s. Under partitions, a node's workers sharing an AUTO_FLUSH_BACKGROUND
    session give up on ops still in a buffer queued behind a stalled batch: each such op is
    dropped before its batch is sent (never applied) and recorded unknown. Valid; no seed
    before drew a caller shorter than its client."""
    mixes = [swarm_mix(s) for s in range(200)]
    drawn = Counter(m.caller_timeout_ms for m in mixes)
    assert set(drawn) == {None, 1000, 2500} and 100 < drawn[None] < 200, drawn
    mix = parse_mix("partition:2,isolate:2,crash:1,restart:1,heal:1;every=0.5-2;"
                    "reads=linearizable;load=20x200;writes=session-background;caller=1000")
    assert mix.caller_timeout_ms == 1000 and parse_mix(mix.spec()) == mix
    with pytest.raises(ValueError, match="caller='0'"):
        parse_mix("restart:1;caller=0")
    _valid_and_fired(StackConfig(seed=1, workload="register", seconds=8.0, mix=mix),
                     tmp_path, "client.session.cancelled_ops_dropped")


def test_a_failed_replica_on_a_server_in_maintenance_is_copied_over_or_refuses_the_copy(
        tmp_path):
    """`maintenance` (a late kind): an operator puts a tablet server in maintenance (Kudu's
    `kudu tserver state enter_maintenance`, recorded in the catalog) and takes it off the
    network; the masters replace none of its replicas meanwhile. Its tablets' leaders compact
    past it (snapshot=200), and it comes back on a disk that fails every fsync: a replica that
    fails while running is tombstoned and copied over by its leader (seed 2); one restarted on
    the failing disk comes back FAILED and refuses the copy (seed 13). Both seeds stay valid."""
    assert "maintenance" in LATE and 20 < sum("maintenance" in swarm_mix(s).kinds()
                                               for s in range(200)) < 80
    spec = BUNDLES["maintenance-compact"]
    assert parse_mix(spec).spec() == spec
    sim = StackSim(StackConfig(seed=2, workload="register", seconds=8.0, mix=parse_mix(spec)),
                   tmp_path / "running")
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    assert [e[2][1:] for e in sim.events if e[1] == "maintenance"] == [["running", 8.944, "left"]]
    # the tombstone the copy writes over the failed replica fails on the failing disk: the
    # replica is FAILED, not a stopped one listed RUNNING
    for name in ("master.rereplication.maintenance_deferred", "replica.failed.while_running",
                 "copy.over_failed_running_replica", "tablet.tombstone.write_failed"):
        assert result.probes.get(name, 0) >= 1, name
    _valid_and_fired(StackConfig(seed=13, workload="register", seconds=8.0, mix=parse_mix(spec)),
                     tmp_path / "restart", "copy.refused.failed_replica",
                     "master.rereplication.maintenance_deferred")


OPERATOR_COPY = "recopy:4,damage:2,restart:1,heal:1;every=1-4;reads=linearizable;load=20x200"


def test_an_operators_copy_over_a_running_replica_from_a_failed_one_or_from_a_follower(tmp_path):
    """`recopy` (in the operator-copy bundle): Kudu's `kudu remote_replica copy` by hand. Over
    a running follower it is refused (no leader found it behind); from a replica the damage
    fault left FAILED, to a server without the tablet, the source refuses the session; from a
    follower that takes a config for committed before its slow WAL holds the entry, the
    source's pin waits for the sync and, past its patience, refuses. The seed stays valid (a
    copy either of the first modes forbids would be its violation)."""
    sim = StackSim(StackConfig(seed=6, workload="register", seconds=30.0,
                               mix=parse_mix(OPERATOR_COPY)), tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    outcomes = Counter((e[2][3], e[2][-1]) for e in sim.events if e[1] == "recopy")
    assert outcomes[("running", "refused: REPLICA_NOT_BEHIND")] >= 1, outcomes
    assert outcomes[("failed-source", "refused: TABLET_NOT_RUNNING")] >= 1, outcomes
    assert outcomes[("follower-source", "refused: ILLEGAL_STATE")] >= 1, outcomes
    assert not any(o == "copied" for m, o in outcomes if m != "follower-source"), outcomes
    for name in ("copy.refused.not_behind", "tserver.request.refused_failed",
                 "copy.pins.waited_for_config_entry", "copy.pins.config_entry_not_synced",
                 "copy.source.pin_refused"):
        assert result.probes.get(name, 0) >= 1, (name, outcomes)


def _operator_copy(seed: int, tmp_path):
    return StackSim(StackConfig(seed=seed, workload="register", seconds=30.0,
                                mix=parse_mix(OPERATOR_COPY)), tmp_path).run()


def test_a_copy_source_that_sends_a_committed_config_its_wal_lacks_is_caught(tmp_path, monkeypatch):
    """With the pin's wait for the config's entry gone (it sends the WAL as synced so far),
    seed 8's copy from a follower installs a replica whose committed config is beyond its
    log, and the invariants say so."""
    import node.replica.copy_pins as copy_pins

    async def hasty_pin(self, holder):
        r = self.r
        index = r.snapshots.pin_latest()
        r.wal.register_anchor(holder, index + 1)
        self.floors[holder] = index + 1
        extents = r.wal.copy_extents(index + 1)[0]
        snapshot = str(r.snapshots.path_for(index)) if index else None
        return copy_pins.CopySource(index, snapshot, extents, r.core.committed_config, r.core.term)

    monkeypatch.setattr(copy_pins.CopyPins, "pin", hasty_pin)
    result = _operator_copy(8, tmp_path)
    assert result.violation and result.violation.startswith("config logged:"), result.violation


def test_a_copy_onto_a_damaged_superblock_failing_on_it_is_caught(tmp_path, monkeypatch):
    """The engine before its fix (node.tserver.copy read a forgotten replica's superblock as
    it found it): seed 0's copy onto a server whose replica had failed on a truncated superblock
    and been deleted ends in an unexpected REMOTE_ERROR, which the
    invariants (a handler failed) and the recopy fault each call a violation
    (tests/test_failed_replica_delete.py has the fix's test)."""
    import node.tserver.copy as copy_mod
    from node.tablet.superblock import Superblock

    def as_before(paths):
        return (Superblock.load(paths.superblock, paths.disk)
                if paths.disk.exists(paths.superblock) else None)

    monkeypatch.setattr(copy_mod, "readable_superblock", as_before)
    result = _operator_copy(0, tmp_path)
    assert result.violation and "REMOTE_ERROR" in result.violation, result.violation
    assert "CorruptionError" in result.violation and "tablet-meta" in result.violation


def test_about_one_seed_in_five_runs_a_recorded_mix_that_reaches_paths_only_knobs_together_do():
    """BUNDLES: the recorded specs the tests here (and FORGE's) fire probes with; about one
    seed in five runs one of them whole, named swarm so its replay is `--mix swarm`; of the
    other seeds about one in sixteen runs one of LATE_BUNDLES (its own stream, so the seeds
    with a bundle keep theirs), and of the seeds left about one in twenty-one one of
    LATER_BUNDLES (a third stream), and of those left about one in eleven one of
    LATEST_BUNDLES (a fourth), one in twenty-one one of FIFTH_BUNDLES (a fifth), of
    SIXTH_BUNDLES (a sixth), of SEVENTH_BUNDLES (a seventh), of EIGHTH_BUNDLES (an eighth)
    and of NINTH_BUNDLES (a ninth), TENTH_BUNDLES (a tenth), ELEVENTH_BUNDLES (an eleventh)
    TWELFTH_BUNDLES (a twelfth), THIRTEENTH_BUNDLES (a thirteenth), FOURTEENTH_BUNDLES
    (a fourteenth), FIFTEENTH_BUNDLES (a fifteenth) and SIXTEENTH_BUNDLES (a sixteenth);
    the rest keep their own draws,
    and a kind of BUNDLED only comes in a bundle."""
    from tests.test_sim_forge import FORGE

    assert parse_mix(BUNDLES["forge-snapshot"]) == parse_mix(f"{FORGE};workload=register")
    assert BUNDLES["operator-copy"] == OPERATOR_COPY
    drawn = Counter(_own_draw(s, "bundle", BUNDLE_DRAW) for s in range(200))
    assert set(drawn) == {None, *BUNDLES} and 145 < drawn[None] < 175, drawn
    late = Counter(b for s in range(400) if _own_draw(s, "bundle", BUNDLE_DRAW) is None
                   and _own_draw(s, "late-bundle", LATE_BUNDLE_DRAW) is not None
                   and (b := bundle_of(s)) is not None)
    assert set(late) == set(LATE_BUNDLES) and 6 < sum(late.values()) < 30, late
    later = Counter(b for s in range(400) if (b := bundle_of(s)) in LATER_BUNDLES)
    assert set(later) == set(LATER_BUNDLES) and 6 < sum(later.values()) < 30, later
    latest = Counter(b for s in range(400) if (b := bundle_of(s)) in LATEST_BUNDLES)
    assert set(latest) == set(LATEST_BUNDLES) and 10 < sum(latest.values()) < 40, latest
    fifth = Counter(b for s in range(600) if (b := bundle_of(s)) in FIFTH_BUNDLES)
    assert set(fifth) == set(FIFTH_BUNDLES) and 8 < sum(fifth.values()) < 40, fifth
    for stream, low in ((SIXTH_BUNDLES, 8), (SEVENTH_BUNDLES, 8), (EIGHTH_BUNDLES, 8),
                        (NINTH_BUNDLES, 8), (TENTH_BUNDLES, 8), (ELEVENTH_BUNDLES, 5),
                        (TWELFTH_BUNDLES, 5), (THIRTEENTH_BUNDLES, 5), (FOURTEENTH_BUNDLES, 5),
                        (FIFTEENTH_BUNDLES, 3), (SIXTEENTH_BUNDLES, 2)):
        drawn_here = Counter(b for s in range(800) if (b := bundle_of(s)) in stream)
        assert set(drawn_here) == set(stream) and low < sum(drawn_here.values()) < 40, drawn_here
    specs = {**BUNDLES, **LATE_BUNDLES, **LATER_BUNDLES, **LATEST_BUNDLES, **FIFTH_BUNDLES,
             **SIXTH_BUNDLES, **SEVENTH_BUNDLES, **EIGHTH_BUNDLES, **NINTH_BUNDLES,
             **TENTH_BUNDLES, **ELEVENTH_BUNDLES, **TWELFTH_BUNDLES, **THIRTEENTH_BUNDLES,
             **FOURTEENTH_BUNDLES, **FIFTEENTH_BUNDLES, **SIXTEENTH_BUNDLES}
    assert specs == ALL_BUNDLES
    for s in range(200):
        mix, bundle = swarm_mix(s), bundle_of(s)
        if bundle is None:
            assert not set(BUNDLED) & set(mix.kinds()), s
        else:
            assert mix == replace(parse_mix(specs[bundle]), name="swarm"), s
            assert mix.describe() == f"swarm: {parse_mix(specs[bundle]).spec()}"


def test_an_operators_copy_over_a_running_replica_that_goes_through_is_a_violation(
        tmp_path, monkeypatch):
    """With the guard off (every running replica taken for behind), seed 6's first copy over
    a running follower is carried out, and the run says so."""
    import node.tserver.tablet_manager as tablet_manager

    monkeypatch.setattr(tablet_manager, "_not_behind", lambda r, req: None)
    result = _operator_copy(6, tmp_path)
    assert result.violation and result.violation.startswith("recopy:"), result.violation
    assert "a running replica no leader found behind was copied over" in result.violation


def test_an_operators_copy_chosen_while_a_server_starts_skips_it(tmp_path):
    """Seed 199 drew the operator-copy bundle; a server restarted by the heal had no tablet
    manager yet when the copy was chosen, and the fault itself broke the seed (unknown:
    AttributeError). A server still starting is no copy's source or target."""
    mix = swarm_mix(199)
    assert mix.describe() == f"swarm: {parse_mix(BUNDLES['operator-copy']).spec()}"
    r = StackSim(StackConfig(seed=199, workload="list-append", seconds=20.0, mix=mix),
                 tmp_path).run()
    assert r.ok(), (r.violation, r.verdict, r.results.get("error"))


def test_a_copy_that_merges_into_fresh_metadata_where_the_old_was_lost_is_caught(
        tmp_path, monkeypatch):
    """Swarm seed 76 (the operator-copy bundle): a power loss deleted a replica's consensus
    metadata, the replica came back FAILED, the masters replaced and deleted it (its files
    left for an operator), then brought the server back in, and the copy created fresh
    metadata over the superblock that remained: the replica forgot its vote in term 1. With
    the engine's refusal taken out (the copy merges as it did before), the seed fails on it;
    tests/test_failed_replica_delete.py has the refusal."""
    import node.tserver.tablet_manager as tablet_manager
    from node.tablet.cmeta import ConsensusMetadata

    def as_before(paths):
        if not paths.disk.exists(paths.consensus_meta):
            return None, None
        return ConsensusMetadata.load(paths.consensus_meta, paths.disk), None

    monkeypatch.setattr(tablet_manager, "_votes_held", as_before)
    mix = swarm_mix(76)
    assert mix.describe() == f"swarm: {parse_mix(BUNDLES['operator-copy']).spec()}"
    result = StackSim(StackConfig(seed=76, workload="register", seconds=60.0, mix=mix),
                      tmp_path).run()
    assert result.violation and result.violation.startswith("vote safety"), result.violation
    assert "forgot its vote" in result.violation



def test_a_replica_deleted_while_a_copy_onto_it_runs_aborts_refuses_or_is_tombstoned_offline(
        tmp_path):
    """`copy-delete` (BUNDLED, LATEST_BUNDLES): while a leader copies a tablet back to a
    tombstoned follower, the follower's replica is deleted: a plain delete aborts the copy and
    the leader's StartTabletCopy is told so; the masters' eviction with its config index is
    refused while the copy installs a config; a crash mid-copy and the operator's offline delete
    tombstone the unfinished copy. No seed reached any of the three before. Valid."""
    assert "copy-delete" in BUNDLED
    sim = StackSim(StackConfig(seed=6, workload="register", seconds=20.0,
                               mix=parse_mix(LATEST_BUNDLES["copy-delete"])), tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    modes = {e[2][3] for e in sim.events if e[1] == "copy-delete"}
    assert modes == {"delete", "delete-cas", "offline"}, sim.events
    for name in ("copy.aborted_by_delete", "tablet.delete.copy_aborted",
                 "tablet.delete.cas_refused_while_copying",
                 "tools.delete.unfinished_copy_tombstoned"):
        assert result.probes.get(name, 0) >= 1, name


def test_the_master_tools_run_again_by_two_at_once_or_at_a_deposed_leader_finish(tmp_path):
    """The `masters` fault's second add (`add-deposed`): the first try's add commits with the
    spare cut off from the leader master, then the leader is cut off from the other masters
    as the tool runs again: the cut-off leader, still taking itself for the leader, does not
    answer "a member already" from a config it cannot confirm, and the tool finishes through
    the new leader. Every fourth removal (`remove-twice`): two `master remove` runs at once,
    as an operator's second try while the first still waits: both find the spare a member and
    ask the leader; the one asked second is told it is not a member any more and counts the
    removal done. No seed reached either answer before. Valid."""
    sim = StackSim(StackConfig(seed=0, workload="register", seconds=30.0,
                               mix=parse_mix("masters:4,restart:1,heal:1;every=0.5-2;"
                                             "reads=linearizable")), tmp_path)
    result = sim.run()
    assert result.ok(), (result.violation, result.verdict)
    done = [e[2] for e in sim.events if e[1] == "masters"]
    assert ["add-deposed", sim.spare] in done and ["remove-twice", sim.spare] in done, done
    for name in ("master.membership.answer_not_confirmed", "tools.master_add.already_member",
                 "tools.master_remove.already_gone"):
        assert result.probes.get(name, 0) >= 1, name


def test_a_small_wal_group_commit_queue_makes_writes_wait_for_room(tmp_path):
    """`wal-queue=KIB` (WAL_QUEUES_KB, its own draw): every server's WAL queues that much before
    a write waits for the queue's groups to be written and synced (an operator's
    --group-commit-queue-size-bytes). Wide values on 10 ms syncs fill 64 KiB, where no seed
    ever filled the engine's 8 MiB. Valid."""
    from harness.sim.swarm import WAL_QUEUES_KB

    drawn = Counter(swarm_mix(s).wal_queue_kb for s in range(400) if bundle_of(s) is None)
    assert set(drawn) == set(WAL_QUEUES_KB) and 100 < drawn[None] < 400, drawn  # bundles: theirs
    spec = ("restart:1,heal:1,crash:1;every=1-4;reads=linearizable;load=20x200;writes=shared;"
            "values=wide;fsync=10;wal-queue=64")
    mix = parse_mix(spec)
    assert mix.wal_queue_kb == 64 and mix.spec() == spec and parse_mix(mix.spec()) == mix
    with pytest.raises(ValueError, match="wal-queue='0'"):
        parse_mix("restart:1;wal-queue=0")
    _valid_and_fired(StackConfig(seed=0, workload="register", seconds=10.0, mix=mix), tmp_path,
                     "wal.queue.backpressure_waited")


def test_leadership_handed_over_under_lease_reads_grants_no_lease_from_a_round_across_it(
        tmp_path):
    """`transfer-lease` (LATEST_BUNDLES): transfers at a fast pace under a read-mostly load
    served from leader leases: a round a quorum acknowledged once a transfer began, or in a
    term the leader no longer holds, grants no lease. The ensemble reached that only by
    chance. Valid."""
    _valid_and_fired(StackConfig(seed=0, workload="register", seconds=20.0,
                                 mix=parse_mix(LATEST_BUNDLES["transfer-lease"])), tmp_path,
                     "read.lease.not_granted", "read.lease.granted")


def test_a_copy_from_a_leader_writing_behind_ends_behind_the_tombstone_and_is_refused(tmp_path):
    """`quiet-copy-behind` (SIXTH_BUNDLES): on a lightly loaded cluster, a follower tombstoned
    while its leader's own write runs behind on a slow disk holds entries the leader's WAL has
    not synced; the leader, still heartbeating, copies the tablet back from its synced end,
    and the copy is refused for ending behind the tombstone's last OpId (the tablet stays a
    tombstone) until a later copy reaches past it. No seed had reached that: under the swarm's
    usual load the leader awaits a second write and sends nothing until its syncs end, and
    copy-behind crashed it before it copied. Valid."""
    result = _valid_and_fired(StackConfig(seed=6, workload="register", seconds=20.0,
                                          mix=parse_mix(SIXTH_BUNDLES["quiet-copy-behind"])),
                              tmp_path, "copy.refused.behind_tombstone", "copy.install.completed")
    assert result.nemesis.get("copy-behind", 0) >= 1, result.nemesis


def test_a_tombstone_whose_metadata_does_not_read_answers_no_vote_and_takes_no_copy(tmp_path):
    """`tombstone-rot` (BUNDLED, SIXTH_BUNDLES): a voter tombstoned in place, then a bit of its
    consensus metadata flipped across a power loss, while its tablet's leader crashes and
    transfers move leadership: the tombstone knows neither its term nor its vote, so it sends
    no answer to a vote request, and every copy onto it is refused (the merge cannot keep
    votes it cannot read). Only READY replicas' metadata was damaged before, and no seed had
    asked such a tombstone for a vote. Valid."""
    result = _valid_and_fired(StackConfig(seed=0, workload="register", seconds=20.0,
                                          mix=parse_mix(SIXTH_BUNDLES["tombstone-rot"])),
                              tmp_path, "tombstone.vote.refused_corrupt_metadata",
                              "copy.refused.votes_lost")
    rotted = [e[2] for e in result.events if e[1] == "tombstone-rot"]
    assert rotted and all(v[8].endswith(v[0]) for v in rotted), rotted  # the tablet's metadata


def test_a_copy_from_a_leader_that_lost_its_newest_snapshot_is_refused_at_its_pin(tmp_path):
    """`lose-snapshot` (BUNDLED, SEVENTH_BUNDLES): a leader's newest snapshot loses its name
    under the running server, and a voter is tombstoned so the leader copies to it at once.
    Its log was collected up to the lost snapshot, so the snapshot left to pin (an older one
    or none) has a WAL starting after it: the copy is refused before a byte is sent, never
    sent as a log with a hole. A file lost at random never met a copy that way. Valid."""
    result = _valid_and_fired(StackConfig(seed=0, workload="register", seconds=20.0,
                                          mix=parse_mix(SEVENTH_BUNDLES["lose-snapshot"])),
                              tmp_path, "copy.pins.wal_starts_after_snapshot",
                              "copy.source.pin_refused")
    lost = [e[2] for e in result.events if e[1] == "lose-snapshot"]
    assert lost and all("/snapshot-" in v[3] for v in lost), lost


def test_a_leader_whose_full_wal_queue_waits_on_slow_syncs_goes_on_heartbeating(tmp_path):
    """`full-queue-behind` (EIGHTH_BUNDLES): a leader's syncs take 3-6 s and its 4 KiB WAL
    queue fills within one. Its next writes wait for room without holding its driver, the
    writes it is handed meanwhile wait in turn, and it heartbeats through: valid. When the
    driver awaited the room, this seed failed on the silent leader (harness.sim.stack_silence:
    nothing sent from 6.5 s to 8.0 s, past the election timeout)."""
    _valid_and_fired(StackConfig(seed=6, workload="register", seconds=20.0,
                                 mix=parse_mix(EIGHTH_BUNDLES["full-queue-behind"])),
                     tmp_path, "replica.wal.write_held", "replica.proposal.parked")


def test_a_leader_whose_disk_dies_under_parked_writes_refuses_each_as_never_proposed(tmp_path):
    """`dying-queue` (NINTH_BUNDLES): a leader's disk slow, then failing its syncs while its
    writes wait for room in a 4 KiB WAL queue. Each held write fails with the WAL's error, the
    replica fails, and the writes it parked, never proposed, are refused at once; the checkers
    find every refusal true: valid. Before, the task holding the writes died with the WAL's
    error unread, leaving the write at its head unanswered, and this seed failed on it
    (`unread_task_errors`); the parked writes were proposed to the failed log."""
    _valid_and_fired(StackConfig(seed=2, workload="register", seconds=20.0,
                                 mix=parse_mix(NINTH_BUNDLES["dying-queue"])),
                     tmp_path, "replica.wal.held_write_failed", "replica.inbox.refused_unrun")


def test_an_answer_overtaking_a_vote_request_inside_a_lease_elects_no_second_leader(tmp_path):
    """`late-answer` (TENTH_BUNDLES): R's refusal of F's pre-vote, carrying R's new term,
    reaches F after F acknowledged its leader L's lease round, and R's own vote request, sent
    before it on another connection, after that (harness.sim.stack_overtake). F drops the
    late answer inside its lease (raft.step.stale_answer_dropped_in_lease) and withholds the
    vote. On the code before the fix (docs/decisions/late-answers-in-a-lease.md) F took the
    refusal's term, and with it lost its leader and its withholding, granted the vote, and this
    seed failed the lease check: R led a newer term while L still served lease reads."""
    _valid_and_fired(StackConfig(seed=14, workload="register", seconds=20.0,
                                 mix=parse_mix(TENTH_BUNDLES["late-answer"])),
                     tmp_path, "raft.step.stale_answer_dropped_in_lease",
                     "raft.vote.withheld_in_lease")


BUFFERS = ("restart:1,heal:1,crash:1;every=1-4;reads=linearizable;load=20x200;writes={};"
           "values=zeros;buffers")


@pytest.mark.parametrize("writes", ["own", "shared", "session-background"])
def test_workers_reusing_their_value_buffers_write_what_they_handed_over(tmp_path, writes):
    """`buffers` (BUFFERS, its own draw): the workers hand each string value over in a
    bytearray they overwrite as soon as the client has the op. Every write mode sends the value
    as it was handed over. Valid."""
    from harness.sim.swarm import BUFFERS as DRAW

    drawn = Counter(swarm_mix(s).buffers for s in range(200))
    assert set(DRAW) == {False, True} and 20 < drawn[True] < 80, drawn
    mix = parse_mix(BUFFERS.format(writes))
    assert mix.buffers and parse_mix(mix.spec()) == mix
    with pytest.raises(ValueError, match="buffers"):
        parse_mix("restart:1;buffers")  # small values are ints: no buffer to hand over
    _valid_and_fired(StackConfig(seed=0, workload="register", seconds=8.0, mix=mix), tmp_path,
                     "client.op.value_copied")


def test_a_client_that_sends_a_reused_buffer_as_it_is_later_is_caught(tmp_path, monkeypatch):
    """The client before its fix (a handle's unbuffered op not copied, `kept` taken out):
    its writes wait for a location or a retry before they are sent, so the bytes the worker
    put in its buffer after reach the tablet, and the checker finds values no worker wrote."""
    import node.client

    monkeypatch.setattr(node.client, "kept", lambda op: op)
    result = StackSim(StackConfig(seed=0, workload="register", seconds=8.0,
                                  mix=parse_mix(BUFFERS.format("own"))), tmp_path).run()
    assert result.verdict == "invalid", (result.verdict, result.violation)
    assert "not a written value" in str(result.results), result.results


def test_every_bundle_names_declared_probes_it_aims_at_and_a_run_says_which_it_reached():
    """A bundle that runs without reaching what it is for shows in the run's summary (the
    frame-split bundle ran list-append under it on odd seeds, and nothing said so)."""
    assert set(BUNDLE_AIMS) == set(ALL_BUNDLES)
    for name, aims in BUNDLE_AIMS.items():
        assert aims and set(aims) <= set(probes.CATALOG), name
    split = [s for s in range(400) if bundle_of(s) == "frame-split"][:3]
    copy = next(s for s in range(400) if bundle_of(s) == "copy-delete")
    plain = next(s for s in range(400) if bundle_of(s) is None)
    reach = bundle_reach([(split[0], "register", {"client.batch.split_after_too_large": 2}),
                          (split[1], "register", {}), (split[2], "list-append", {}),
                          (copy, "register", {"copy.started": 3}), (plain, "register", {})])
    assert reach == {
        "copy-delete": {"seeds": 1, "workloads": {"register": {"seeds": 1, "reached": 0}},
                        "missed": True, "aims": dict.fromkeys(BUNDLE_AIMS["copy-delete"], 0)},
        "frame-split": {"seeds": 3, "workloads": {"register": {"seeds": 2, "reached": 1},
                                                  "list-append": {"seeds": 1, "reached": 0}},
                        "missed": False, "aims": {"client.batch.split_after_too_large": 1}}}


PEER_BOOK_FAULTS = ("disk:4,reprovision:4,master-swap:2,heal:1;every=0.5-2;reads=linearizable;"
                    "load=20x200;workload=register")


def test_a_peer_book_save_failing_under_a_heartbeat_leaves_the_heartbeater_running(tmp_path):
    """A tablet server's disk fails (EIO) while a reprovisioned server's new address reaches it
    in the leader master's heartbeat answer: the peer book's save fails inside the heartbeat
    (tserver.heartbeat.beat_failed), and the next beat tries again. Before the fix
    (docs/decisions/re-replication.md) the heartbeater ended, unread, with the server up: this
    seed then failed the server-loop check, as did 4 of this spec's first 40 seeds."""
    _valid_and_fired(StackConfig(seed=2, workload="register", seconds=20.0,
                                 mix=parse_mix(PEER_BOOK_FAULTS)),
                     tmp_path, "tserver.heartbeat.beat_failed")


def test_requests_at_a_deposed_leaders_gate_are_refused_before_the_next_check(tmp_path):
    """Swarm seed 5's own mix (cuts, delays, master swaps; the seed runs the `server-cut`
    bundle since that stream was added): a new leader loses its term with requests
    waiting at its gate (replica.leader_gate.waiter_refused), and the answers-owed watch
    (harness.sim.stack_owed) finds none left there. On the gate before the review's fix
    (docs/decisions/answers-owed-at-stop.md) they waited out their deadlines, and this seed
    failed the watch at 14.2 virtual s, as did 9 of the first 60 swarm seeds."""
    mix = swarm_mix(5, bundled=False)
    _valid_and_fired(StackConfig(seed=5, workload=workload_for(5, mix), seconds=20.0, mix=mix),
                     tmp_path, "replica.leader_gate.waiter_refused")


def test_a_master_migration_while_a_follower_cannot_save_its_peer_book_keeps_it_reconciling(
        tmp_path):
    """`swap-book` (ELEVENTH_BUNDLES): a master migration while a follower master's data-dir
    root fails its syncs, so saving the new master's address in its reconcile loop fails
    (master.reconcile.round_failed) and a later round tries again. Before the fix
    (docs/decisions/re-replication.md) the loop ended there, and this seed failed the
    server-loop check at 10.1 virtual s, as did 20 of the bundle's first 20 seeds."""
    _valid_and_fired(StackConfig(seed=0, workload="register", seconds=15.0,
                                 mix=parse_mix(ELEVENTH_BUNDLES["swap-book"])),
                     tmp_path, "master.reconcile.round_failed")


def test_a_copy_behind_the_log_of_a_follower_whose_superblock_was_lost_is_refused(tmp_path):
    """`superblock-behind` (TWELFTH_BUNDLES): a follower loses its superblock at rest while its
    leader writes behind on a slow disk; the leader copies the tablet to it from its synced
    end, behind what the follower's own log, still on its disk, held. The copy must be refused
    for it (copy.refused.behind_tombstone). Where the follower's consensus metadata went too,
    every copy is refused (copy.refused.log_without_metadata). Before the fix the copy's last
    OpId was unknown, it installed, and this seed failed on a log that regressed, as did 17
    of the spec's first 40 seeds (30 virtual s each)."""
    result = _valid_and_fired(StackConfig(seed=3, workload="register", seconds=15.0,
                                          mix=parse_mix(TWELFTH_BUNDLES["superblock-behind"])),
                              tmp_path, "copy.prepare.lost_superblocks_log_read",
                              "copy.refused.behind_tombstone", "copy.refused.log_without_metadata")
    assert result.nemesis.get("superblock-behind", 0) >= 1, result.nemesis


def test_a_config_saved_behind_never_goes_back_over_a_newer_one_in_the_whole_stack(tmp_path):
    """`config-race` (THIRTEENTH_BUNDLES): a follower writing a config's entry, its commit of
    the config before it saved behind that write, is sent the entry again with its commit and
    a leadership transfer's vote request, and saves the newer config with the new term before
    the task saving the older one first runs (harness.sim.stack_config_race). The older must
    not go over the newer (replica.cmeta.older_config_not_saved). Before the fix
    (node.replica.metadata_saves) it did: this seed failed `config saved` (and, without that
    check, `config kept` once the follower restarted past a snapshot), as did 18 of the spec's
    first 20 seeds."""
    result = _valid_and_fired(StackConfig(seed=7, workload="register", seconds=15.0,
                                          mix=parse_mix(THIRTEENTH_BUNDLES["config-race"])),
                              tmp_path, "replica.cmeta.older_config_not_saved")
    assert result.nemesis.get("config-race", 0) >= 1, result.nemesis


def test_a_copy_behind_what_a_forgotten_failed_replica_acknowledged_is_refused(tmp_path):
    """`failed-behind` (FOURTEENTH_BUNDLES): a follower's replica FAILS on a moment's failing
    syncs while its leader writes behind on a slow disk, and is deleted while FAILED
    (forgotten, its files left); the leader copies the tablet to it from its synced end,
    behind what the follower acknowledged before it failed. The copy starts from the last op
    the forgotten replica knew (copy.prepare.forgotten_replicas_last_op) and is refused
    (copy.refused.behind_tombstone). Before the fix a FAILED replica's files proved no last
    OpId, the copy installed, and this seed failed on a log that regressed, as did 4 of the
    spec's first 8 seeds (15 virtual s each)."""
    result = _valid_and_fired(StackConfig(seed=3, workload="register", seconds=15.0,
                                          mix=parse_mix(FOURTEENTH_BUNDLES["failed-behind"])),
                              tmp_path, "copy.prepare.forgotten_replicas_last_op",
                              "copy.refused.behind_tombstone")
    assert result.nemesis.get("failed-behind", 0) >= 1, result.nemesis


def test_a_copy_onto_a_voter_whose_superblock_is_lost_and_log_damaged_is_refused(tmp_path):
    """`superblock-behind` with a bit of the follower's newest WAL segment flipped as well
    (its delay slot "wal"): its log does not read, so nothing says what it acknowledged. While
    it is a voter a copy onto it is refused and it is FAILED, for the masters to replace
    (copy.refused.last_op_unknown_voter). Before, the copy started from no last OpId and
    installed behind what it had logged: this seed failed on a log that regressed, as did 12
    of the spec's first 40 seeds (30 virtual s each), each one that reached the unreadable log."""
    result = _valid_and_fired(StackConfig(seed=2, workload="register", seconds=15.0,
                                          mix=parse_mix(TWELFTH_BUNDLES["superblock-behind"])),
                              tmp_path, "copy.prepare.lost_superblocks_log_unreadable",
                              "copy.refused.last_op_unknown_voter")
    assert any(e[1] == "superblock-behind" and e[2][6] == "wal" for e in result.events)


def test_a_replaced_member_back_before_its_removal_leaves_no_tablet_over_replicated(tmp_path):
    """Isolations past the masters' silence limit: a follower cut off for FAILED_AFTER_S is
    replaced, add before remove, and comes back before its removal, so nothing counts failed
    and the tablet has four healthy voters. The reconciler removes the excess voter
    (master.rereplication.excess_voter_removed), as Kudu evicts one. Before, the tablet kept
    four voters for good; the check that every tablet is back to its replication factor after
    the heal (harness.sim.stack_replication) failed this seed, and 5 of the spec's first 10
    (30 virtual s each; 7 of 10 while silence was the master's view alone, seed 0 among them)."""
    _valid_and_fired(StackConfig(seed=3, workload="register", seconds=30.0, mix=parse_mix(
        "isolate:4,restart:1,heal:1;every=2-6;reads=linearizable;load=10x100")),
        tmp_path, "master.rereplication.replace_silent", "master.rereplication.excess_voter_removed")


def test_a_master_cut_off_from_some_servers_moves_no_data(tmp_path):
    """`master-cut` (FIFTEENTH_BUNDLES): every master cut off from one or two tablet servers,
    which still reach each other. The tablets' leaders hear every member, so no replica is
    failed and no tablet may change members (harness.sim.stack_master_cut). Before, a master
    judged silence by its own view alone: this seed failed, a tablet moved off a cut server
    with a copy, as did 10 of the spec's first 10 seeds (30 virtual s each)."""
    result = _valid_and_fired(StackConfig(seed=0, workload="register", seconds=15.0,
                                          mix=parse_mix(FIFTEENTH_BUNDLES["master-cut"])),
                              tmp_path, "master.rereplication.silent_but_leader_hears")
    assert result.nemesis.get("master-cut", 0) >= 1, result.nemesis
    assert not result.probes.get("copy.started"), result.probes


def test_a_server_cut_off_from_the_other_servers_has_its_members_replaced(tmp_path):
    """`server-cut` (SIXTEENTH_BUNDLES): one tablet server cut off from the other tablet
    servers, the masters still hearing it. Its members' leaders elsewhere cannot reach them,
    and 15 s into the cut each tablet with a member there must have a replacement under way
    (harness.sim.stack_server_cut). Before, the masters replaced a member only if they too
    stopped hearing its server: this seed failed, two tablets still on the cut server, as did
    4 of the spec's first 10 seeds (30 virtual s each; the others' cuts healed sooner)."""
    result = _valid_and_fired(StackConfig(seed=0, workload="register", seconds=30.0,
                                          mix=parse_mix(SIXTEENTH_BUNDLES["server-cut"])),
                              tmp_path, "master.rereplication.replace_unreachable_from_leader",
                              "copy.started")
    assert result.nemesis.get("server-cut", 0) >= 1, result.nemesis


def test_the_master_cut_check_judges_only_runs_of_master_cuts_alone():
    """With any other fault a replacement may be due, so only a run whose kinds are the cuts,
    restarts and heals is judged; there, a tablet past its first config is a violation."""
    from harness.sim.stack_master_cut import moved_by_master_cut

    configs = {"t-0": (0, ["a", "b", "c"]), "t-1": (7, ["a", "b", "d"])}
    alone = ["master-cut", "restart", "heal"]
    assert "t-1" in moved_by_master_cut(alone, configs)
    assert "t-0" not in moved_by_master_cut(alone, configs)
    assert moved_by_master_cut(alone, {"t-0": (0, ["a", "b", "c"])}) is None
    assert moved_by_master_cut([*alone, "crash"], configs) is None
    assert moved_by_master_cut(["isolate", "restart", "heal"], configs) is None


def test_a_client_per_unit_of_work_has_its_session_closed_under_an_apply_still_locating(
        tmp_path, monkeypatch):
    """FRESH_CLIENTS: a program that opens a client and a session per unit of work (here one
    write) and closes both after it. The unit's new client knows no tablet's location, so a
    worker's apply waits for a lookup while another worker's write closes the session: the
    session refuses the apply. Shared clients never reached that (their locations, once
    known, stay known). With the client's buffer-after-close bug (node.client.faults: the
    apply buffered after the close returned) the session's alarm fails the same seed."""
    from node.client import faults

    mixes = [swarm_mix(s, bundled=False) for s in range(200)]
    fresh = [m for m in mixes if m.fresh_clients]
    assert 4 <= len(fresh) <= 30 and {m.renew for m in fresh} == set(FRESH_CLIENTS) - {None}
    assert all(m.writes in ("session-background", "session-manual") for m in fresh)
    assert all(parse_mix(m.spec()).fresh_clients and "fresh-clients" in m.spec().split(";")
               for m in fresh)
    with pytest.raises(ValueError, match="fresh-clients .* needs renew=N"):
        parse_mix("restart:1;writes=session-manual;fresh-clients")
    spec = parse_mix("restart:1,heal:1;every=2-6;reads=linearizable;load=10x100;"
                     "writes=session-background;renew=1;fresh-clients;workload=register")
    cfg = StackConfig(seed=0, workload="register", seconds=4.0, mix=spec)
    _valid_and_fired(cfg, tmp_path / "fixed", "client.session.apply_closed_while_locating")
    monkeypatch.setattr(faults, "FAULTS", faults.parse("buffer-after-close"))
    broken = StackSim(cfg, tmp_path / "broken").run()
    assert "client.session.op_buffered_after_close" in (broken.violation or ""), broken.violation
