"""A leader's write behind its Ready (ready_steps.Steps.write_behind, RaftCore.persisted): the
followers' answers are stepped while the leader still writes, two followers of three commit
without it, and the leader counts itself only once its write is durable. Driven by hand
(harness.sim.script) with the leader's writes held until the script finishes them."""

import pytest

from harness.sim.script import ScriptCluster
from node import probes
from node.consensus import AppendEntries, AppendResponse, ChangeOp, ConfigChange


def leading(voters=("n1", "n2", "n3")) -> ScriptCluster:
    c = ScriptCluster(voters, write_behind=("n1",))
    c.elect("n1")
    c.stabilize()
    if "n1" in c.behind:
        c.finish_write("n1")  # the term's first entry
        c.stabilize()
    return c


def test_two_followers_commit_a_write_the_leader_has_not_made_durable():
    c = leading()
    with probes.expect("raft.commit.before_own_write"):
        index = c.do("n1", "propose", b"x")
        assert "n1" in c.behind and index not in [e.index for e in c.disks["n1"]["log"]]
        c.stabilize()
    n1 = c.core("n1")
    assert n1.commit >= index and index in [e.index for e in c.applied["n1"]]
    assert n1.log.stable < index  # its own write is still behind
    assert all(index in [e.index for e in c.disks[u]["log"]] for u in ("n2", "n3"))
    c.finish_write("n1")
    assert n1.log.stable >= index and index in [e.index for e in c.disks["n1"]["log"]]


def test_one_follower_does_not_commit_until_the_leaders_own_write_is_durable():
    c = leading()
    c.partition(("n1", "n2"), ("n3",))
    index = c.do("n1", "propose", b"x")
    c.stabilize()
    n1 = c.core("n1")
    assert n1.commit < index  # n2 alone is not a majority: the leader does not count itself yet
    c.finish_write("n1")
    assert n1.commit >= index and index in [e.index for e in c.applied["n1"]]


def test_a_lone_leader_commits_only_when_its_write_is_durable():
    c = leading(("n1",))
    index = c.do("n1", "propose", b"x")
    assert c.core("n1").commit < index
    c.finish_write("n1")
    assert c.core("n1").commit >= index


def test_a_crash_loses_the_write_behind_and_nothing_committed():
    c = leading()
    c.partition(("n1", "n2"), ("n3",))
    index = c.do("n1", "propose", b"x")
    c.deliver(types=AppendEntries)  # n2 has it; its answer never reaches n1
    c.crash("n1")
    assert index not in [e.index for e in c.disks["n1"]["log"]]
    assert c.max_commit["n1"] < index


def test_a_report_for_an_entry_a_new_leader_replaced_is_ignored():
    c = leading()
    c.isolate("n1")
    index = c.do("n1", "propose", b"stale")
    c.heal()
    c.partition(("n1",), ("n2", "n3"))
    c.elect("n2")
    c.do("n2", "propose", b"new")
    c.stabilize()
    c.heal()
    c.tick("n2", 5)  # a heartbeat: n1 steps down and takes n2's entries over its own
    c.stabilize()
    n1 = c.core("n1")
    assert n1.log.term_at(index) == c.core("n2").term
    with probes.expect("raft.persisted.stale_report"):
        c.finish_write("n1")  # the report names the replaced entry's term
    assert [e.payload for e in c.disks["n1"]["log"]] == [e.payload for e in c.disks["n2"]["log"]]


@pytest.mark.parametrize("acks", [0, 1, 2])
def test_an_answer_never_counts_more_than_the_follower_acknowledged(acks):
    c = leading()
    index = c.do("n1", "propose", b"x")
    c.deliver(types=AppendEntries)
    answers = [m for _, m in c.queue if isinstance(m, AppendResponse)]
    for _ in range(len(answers) - acks):
        c.drop(answers.pop().from_uuid)
    c.deliver(types=AppendResponse)
    assert (c.core("n1").commit >= index) is (acks == 2)


@pytest.mark.parametrize("bug", [False, True])
def test_a_leader_that_counts_its_unsynced_entries_commits_what_a_power_loss_takes(bug):
    """fault_count_unsynced_own_entries: with one follower's answer the leader counts itself
    while its write is still behind, so the entry is committed on one disk of three; the
    leader's power loss leaves it on n2 alone, and n3 with the restarted n1 elect without it."""
    c = ScriptCluster(write_behind=("n1",), count_unsynced_own_entries=bug)
    c.elect("n1")
    c.stabilize()
    if "n1" in c.behind:
        c.finish_write("n1")
        c.stabilize()
    c.partition(("n1", "n2"), ("n3",))
    index = c.do("n1", "propose", b"acknowledged?")
    c.stabilize()
    assert (c.core("n1").commit >= index) is bug
    acknowledged = any(e.payload == b"acknowledged?" for e in c.applied["n1"])  # and answered
    c.crash("n1")  # before its write ends
    c.restart("n1")
    c.partition(("n1", "n3"), ("n2",))
    c.elect("n3")
    c.do("n3", "propose", b"other")
    c.stabilize()
    lost = all(index > len(c.disks[u]["log"]) or c.disks[u]["log"][index - 1].payload
               != b"acknowledged?" for u in ("n1", "n3"))
    assert lost  # the entry is gone from the new majority either way...
    assert acknowledged is bug  # ...but only the bug had applied (and acknowledged) it


def test_a_config_committed_before_the_leaders_own_write_is_saved_only_once_that_write_is():
    """Two followers commit a config entry the leader still writes: the leader's consensus
    metadata keeps the config before until its own entry is durable, so a power cut that loses
    the write cannot leave a committed config its log lacks (the whole-stack simulator found a
    leader restarted that way: a copy from it would hand on a config with no entry)."""
    c = leading()
    before = c.disks["n1"]["config"]
    index = c.do("n1", "propose_config_change", ConfigChange(ChangeOp.ADD_NON_VOTER, "n4", False), 0)
    assert "n1" in c.behind
    c.stabilize()
    n1 = c.core("n1")
    assert n1.committed_config.opid_index == index and n1.log.stable < index
    assert c.disks["n1"]["config"] == before  # not saved ahead of its entry
    c.crash("n1")  # the write behind is lost with the power
    c.restart("n1")
    n1 = c.core("n1")
    assert n1.committed_config == before and n1.log.last_index() < index
    c.stabilize()

    c = leading()
    index = c.do("n1", "propose_config_change", ConfigChange(ChangeOp.ADD_NON_VOTER, "n4", False), 0)
    c.stabilize()
    c.finish_write("n1")  # durable: now the committed config is saved
    assert c.disks["n1"]["config"].opid_index == index


def test_writes_pile_up_behind_a_slow_leader_disk_and_its_followers_commit_each():
    """A leader whose disk is slow makes further Readys while its first write still runs:
    each one's write goes behind too (in the WAL's order), its followers get and commit every
    entry, and the leader counts itself for each only as its own writes end, oldest first.
    Before, the replica's driver awaited the second Ready's own write, so a leader on a slow
    disk sent nothing, heartbeats included, until its syncs ended, and lost its followers."""
    c = leading()
    first = c.do("n1", "propose", b"x")
    second = c.do("n1", "propose", b"y")
    third = c.do("n1", "propose", b"z")
    assert len(c.behind["n1"]) == 3
    c.stabilize()
    n1 = c.core("n1")
    assert n1.commit >= third and n1.log.stable < first  # committed by n2 and n3 alone
    assert [e.payload for e in c.applied["n1"][-3:]] == [b"x", b"y", b"z"]
    c.finish_write("n1")
    assert first <= n1.log.stable < second and len(c.behind["n1"]) == 2
    assert [e.payload for e in c.disks["n1"]["log"][-1:]] == [b"x"]
    c.finish_write("n1")
    c.finish_write("n1")
    assert n1.log.stable >= third and "n1" not in c.behind


def test_a_crash_with_writes_behind_keeps_those_that_ended_and_commits_none_of_the_rest():
    """Cut off from its followers, a leader leaves two writes behind; the first ends, then the
    power goes: the first is on its disk, the second is lost, and neither was committed."""
    c = leading()
    c.partition(("n1",), ("n2", "n3"))
    first = c.do("n1", "propose", b"x")
    c.do("n1", "propose", b"y")
    assert len(c.behind["n1"]) == 2
    c.finish_write("n1")
    c.crash("n1")
    assert [e.payload for e in c.disks["n1"]["log"]][-1] == b"x"
    assert c.max_commit["n1"] < first


def test_writes_that_find_the_wal_queue_full_wait_in_order_without_holding_their_caller(
        tmp_path):
    """node.replica.wal_writes on a real WAL whose queue is full behind a group not handed over:
    start() returns at once, holding each write in order while the queue has no room; the
    driver parks its new writes meanwhile (parks()); once the queue drains, the held writes
    are written in order, each future done once durable, and the driver is woken to propose
    what it parked. Before, start() awaited the room, and the driver with it."""
    import asyncio
    import logging

    from node.entry import Entry, EntryType
    from node.logfmt import TabletLog
    from node.replica.wal_writes import WalWrites
    from node.wal import Log, LogOptions, read_log

    def entry(index: int, size: int) -> Entry:
        return Entry(1, index, EntryType.REPLICATE, bytes(size))

    log = Log.open(str(tmp_path), "t", LogOptions(group_commit_queue_size_bytes=500))
    woken = []

    async def main():
        # a group handed over behind one that is not: the queue holds its bytes, full
        head = log.reserve([entry(1, 16)])
        first = log.append_future(log.reserve([entry(2, 800)]))
        writes = WalWrites(log, TabletLog(logging.getLogger("t"), "t", "p"), {
            "wal_groups": 0, "wal_entries": 0, "wal_seconds": 0.0},
            lambda coro, name: asyncio.ensure_future(coro), lambda: woken.append(True))
        assert not writes.parks()
        with probes.expect("replica.wal.write_held"):
            second = writes.start((entry(3, 16),))
            third = writes.start((entry(4, 16), entry(5, 16)))
        with probes.expect("replica.proposal.parked"):
            assert writes.parks()
        await asyncio.sleep(0.2)
        assert not second.done() and not third.done() and not woken
        await asyncio.wait_for(asyncio.gather(log.append_future(head), first, second, third), 30)
        assert not writes.parks() and woken == [True]
        assert writes.stats["wal_entries"] == 3

    asyncio.run(main())
    log.close()
    assert [e.index for e in read_log(str(tmp_path), "t").entries] == [1, 2, 3, 4, 5]
