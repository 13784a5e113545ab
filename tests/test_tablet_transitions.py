"""Kudu keeps one transition in progress per tablet, not per server: a copy installing on one
tablet (a thread that writes, fsyncs and replays a WAL) must not hold up a vote another tablet
answers from its tombstone. Here the install is held inside its thread for as long as the test
likes, and the other tablet's vote must be answered meanwhile; the same tablet's vote must wait
for the install (it would read metadata the install is merging)."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest

from node.consensus import Member, MemberType, RaftConfig, VoteRequest
from node.disk import REAL
from node.replica.replica import ReplicaOptions
from node.tablet.superblock import KeyRange
from node.tserver import tablet_manager as tm_module
from node.tserver.tablet_manager import TabletManager, TabletState

ME, PEER = "ts-me", "ts-peer"


@pytest.fixture
def held_install(monkeypatch):
    """(entered, release): a copy install blocks in its thread until `release` is set, then
    fails as a bad copy does."""
    entered, release = threading.Event(), threading.Event()

    def complete_install(paths, session, source):
        entered.set()
        release.wait(30)
        raise OSError("the test's copy gave up")

    monkeypatch.setattr(tm_module, "complete_install", complete_install)
    return entered, release


async def two_tombstones(root) -> tuple[TabletManager, list]:
    sent: list = []
    tm = TabletManager(ME, root, REAL, ReplicaOptions(), random.Random(1),
                       sender=lambda tid: lambda to, msgs: sent.append((tid, to, msgs)))
    config = RaftConfig(0, (Member(ME, MemberType.VOTER), Member(PEER, MemberType.VOTER)))
    for tid in ("tablet-a", "tablet-b"):
        assert await tm.create(tid, "tbl", KeyRange(), config)
        assert await tm.delete(tid)
        assert tm.state(tid) == TabletState.TOMBSTONED
    return tm, sent


def vote() -> VoteRequest:  # a leadership transfer's: never withheld within the vote lease
    return VoteRequest(term=5, from_uuid=PEER, to_uuid=ME, last_index=10, last_term=4,
                       transfer=True)


def test_a_copy_installing_on_one_tablet_does_not_delay_a_vote_on_another(tmp_path, held_install):
    entered, release = held_install

    async def go():
        tm, sent = await two_tombstones(tmp_path)
        install = asyncio.create_task(tm.finish_copy("tablet-b", None, PEER))
        await asyncio.to_thread(entered.wait, 10)
        try:
            assert await asyncio.wait_for(tm.vote_as_tombstone("tablet-a", [vote()]), 10) == []
            assert [(tid, to) for tid, to, _ in sent] == [("tablet-a", PEER)]
            assert sent[0][2][0].granted
            # the tablet being installed answers only once its install is over
            same = asyncio.create_task(tm.vote_as_tombstone("tablet-b", [vote()]))
            await asyncio.sleep(0.2)
            assert not same.done() and install.done() is False
        finally:
            release.set()
        with pytest.raises(OSError, match="gave up"):
            await install
        await asyncio.wait_for(same, 10)
        await tm.stop()

    asyncio.run(go())
