"""The engine logs what an operator needs, each replica's lines prefixed `T <tablet> P <uuid>: `,
and a replica that can no longer be trusted behind the exact markers log checkers grep for."""

from __future__ import annotations

import asyncio
import logging
import random
import re

import pytest
from replica_net import (
    TABLET,
    TAIL,
    Net,
    options,
    rejoin_with_uncommitted_tail,
    write_wal,
)

from harness.sim.script import ScriptCluster
from node.consensus import CasMismatch, ChangeOp, ConfigChange, ConfigRolledBack, SafetyError
from node.disk import REAL
from node.logfmt import CORRUPTION, FAILED, SAFETY
from node.protocol import CreateTablet, DeleteTablet
from node.replica.replica import Replica, ReplicaOptions, log_event
from node.server.base import ServerOptions
from node.tablet.paths import TabletPaths
from node.tablet.superblock import DataState, KeyRange, Superblock
from node.tserver.server import TabletServer
from node.tserver.tablet_manager import TabletManager, TabletState
from node.wal import format as fmt
from reports.html.raftlog import LINE

DAEMON_FORMAT = "%(asctime)s tserver %(levelname)s %(name)s: %(message)s"  # node.server.daemon_cli


def lines(caplog, level=logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def has(caplog, text: str) -> bool:
    return any(text in line for line in lines(caplog))


def test_elections_votes_and_role_changes(tmp_path, caplog):
    caplog.set_level(logging.INFO)

    async def main():
        net = Net(tmp_path)
        net.start()
        try:
            r = await net.leader()
            return r.uuid, r.term
        finally:
            await net.stop()

    leader, term = asyncio.run(main())
    me = f"T {TABLET} P {leader}: "
    assert has(caplog, me + f"started pre-election for term {term}: votes {leader}=yes of voters "
                            "a, b, c")
    assert has(caplog, me + f"won pre-election for term {term}")
    assert has(caplog, me + f"started election for term {term}")
    assert has(caplog, me + f"won election for term {term}: votes ")
    assert any(line.partition(": ")[2] == f"granted vote to {leader} for term {term}, its last op "
                                          "(0, 0): log up to date"
               for line in lines(caplog) if not line.startswith(me))
    line = f"raft tablet={TABLET} term={term} role=LEADER leader={leader}"
    role = next(r for r in caplog.records if r.getMessage() == me + line)
    # the HTML report's leader track still parses the line in the daemons' format
    m = LINE.match(logging.Formatter(DAEMON_FORMAT).format(role))
    assert m is not None and m.group(3, 4, 5, 6) == (TABLET, str(term), "LEADER", leader)


def test_config_change_proposed_pending_committed_and_refused(tmp_path, caplog):
    caplog.set_level(logging.INFO)

    async def main():
        net = Net(tmp_path)
        net.start()
        try:
            leader = await net.leader()
            config = await leader.change_config(ConfigChange(ChangeOp.ADD_NON_VOTER, "d"), 0)
            with pytest.raises(CasMismatch):
                await leader.change_config(ConfigChange(ChangeOp.REMOVE, "d"), 0)
            # the leader writes behind: its followers may commit the entry before it is
            # durable here, and the config is saved (and logged committed) only once it is
            for _ in range(1000):
                if has(caplog, f"P {leader.uuid}: config committed: index"):
                    break
                await asyncio.sleep(0.01)
            return leader.uuid, config.opid_index
        finally:
            await net.stop()

    leader, index = asyncio.run(main())
    me = f"T {TABLET} P {leader}: "
    members = f"index {index} [a VOTER, b VOTER, c VOTER, d NON_VOTER+promote]"
    assert has(caplog, me + "proposing config change ADD_NON_VOTER d +promote (cas config index 0)")
    assert has(caplog, me + f"config change pending: {members}")
    assert has(caplog, me + f"config committed: {members}")
    assert has(caplog, me + "config change REMOVE d refused: CasMismatch: cas_config_index 0")


def test_config_rollback_is_reported_by_the_core_and_logged(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    c = ScriptCluster()
    c.elect("n1")
    c.stabilize()
    c.isolate("n1")
    c.do("n1", "propose_config_change", ConfigChange(ChangeOp.REMOVE, "n3"), 0)  # only n1 has it
    c.crash("n1")
    c.heal()
    c.elect("n2")
    c.stabilize()
    c.restart("n1")
    c.tick("n2", 5)  # a heartbeat: n1 learns of n2 and takes its log
    c.stabilize()
    rolled = [e for e in c.events["n1"] if isinstance(e, ConfigRolledBack)]
    assert [e.config.voters() for e in rolled] == [["n1", "n2"]]
    log_event(Replica("n1", TabletPaths(tmp_path, TABLET), lambda *_: None, options()).log, rolled[0])
    assert lines(caplog) == [f"T {TABLET} P n1: config change rolled back (its entry was "
                             "truncated): index 2 [n1 VOTER, n2 VOTER]"]


def test_bootstrap_and_truncation_of_an_uncommitted_suffix(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    asyncio.run(rejoin_with_uncommitted_tail(tmp_path, bug=False))
    me = f"T {TABLET} P a: "
    assert has(caplog, me + "bootstrap: term 1, voted for a, committed config index 0 "
                            "[a VOTER, b VOTER, c VOTER], snapshot at index 0, 2 WAL entries after it")
    assert has(caplog, me + "bootstrap: WAL entries 1..2 are not known committed")
    # b and c may split their first vote: the leader's term is 2 or later, never a's term 1
    truncations = [re.search(r"entries from term (\d+)$", line) for line in lines(caplog)
                   if line.startswith(me + "truncating WAL entries 1..2: uncommitted, replaced by "
                                           "the leader's entries from term ")]
    assert truncations and all(int(m[1]) >= 2 for m in truncations), lines(caplog)


def failing(tmp_path, error: BaseException) -> None:
    """Start a one-replica tablet and make its driver hit `error`."""

    async def main():
        net = Net(tmp_path, uuids=("a",))
        net.start()
        r = net.replicas["a"]
        try:
            await net.leader()

            def boom():
                raise error

            r._submit(boom)
            for _ in range(200):
                if r.failed:
                    return r.failed
                await asyncio.sleep(0.01)
            raise AssertionError("the replica did not fail")
        finally:
            await net.stop()

    return asyncio.run(main())


def test_safety_violation_is_logged_with_its_marker_then_failed(tmp_path, caplog):
    cause = failing(tmp_path, SafetyError("a: conflict at committed index 7"))
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        f"T {TABLET} P a: {SAFETY} a: conflict at committed index 7",
        f"T {TABLET} P a: {FAILED} replica failed: {cause}"]
    assert cause == "SafetyError: a: conflict at committed index 7"
    assert errors[0].exc_info is not None  # its stack explains it


def test_unexpected_error_fails_the_replica_with_a_traceback(tmp_path, caplog):
    cause = failing(tmp_path, RuntimeError("disk on fire"))
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in errors] == [f"T {TABLET} P a: {FAILED} replica failed: {cause}"]
    text = logging.Formatter(DAEMON_FORMAT).format(errors[0])
    assert "\nTraceback (most recent call last):\n" in text and "RuntimeError: disk on fire" in text


def test_corruption_at_start_up_names_file_and_offset_and_fails_the_replica(tmp_path, caplog):
    net = Net(tmp_path, uuids=("u1",))
    paths = net.paths["u1"]
    Superblock(TABLET, "tbl", KeyRange(), DataState.READY).save(paths.superblock)
    write_wal(paths, TAIL)
    segment = next(paths.wal_dir.glob("wal-*"))
    data = bytearray(segment.read_bytes())
    data[-fmt.FOOTER_SIZE - 3] ^= 0xFF  # inside the last batch
    segment.write_bytes(bytes(data))
    tablets = TabletManager("u1", paths.data_dir, REAL, ReplicaOptions(), random.Random(0),
                            lambda _tablet: lambda *_: None)
    tablets.open_existing(TABLET)
    assert tablets.state(TABLET) == TabletState.FAILED and TABLET not in tablets.replicas
    errors = lines(caplog, logging.ERROR)
    assert len(errors) == 2
    assert errors[0].startswith(f"T {TABLET} P u1: {CORRUPTION} {segment} at offset ")
    assert errors[1] == f"T {TABLET} P u1: {FAILED} cannot open the replica: {tablets.get(TABLET).error}"
    assert tablets.get(TABLET).error.startswith("WalCorruption: ")


def test_tablet_server_logs_creation_and_tombstoning(tmp_path, caplog):
    caplog.set_level(logging.INFO)

    async def main():
        ts = TabletServer(ServerOptions(tmp_path, rpc_port=0))
        await ts.start()
        try:
            await ts.service.on_create_tablet(CreateTablet(TABLET, "tbl", KeyRange(), [ts.me]))
            for _ in range(500):  # a config of one elects itself and commits its NO_OP
                if ts.replicas[TABLET].last_logged() == (1, 1):
                    break
                await asyncio.sleep(0.01)
            await ts.service.on_delete_tablet(DeleteTablet(TABLET))
            return ts.uuid
        finally:
            await ts.stop()

    uuid = asyncio.run(main())
    me = f"T {TABLET} P {uuid}: "
    assert has(caplog, me + f"created replica of table tbl with config index 0 [{uuid} VOTER]")
    assert has(caplog, me + "tombstoned; last logged op (1, 1)")
