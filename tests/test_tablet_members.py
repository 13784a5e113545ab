"""How the harness reads a tablet's membership back from its tablet servers
(harness/systems/tessera/members.py): what the membership nemesis checks after a removal."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from harness.systems.tessera import members as members_module
from harness.systems.tessera.members import TabletMembers, stranded
from nemeses.membership import Stranded
from node.protocol import ServerStatus, TabletReport
from node.rpc import ErrorCode, RpcError

THREE = [["a", "VOTER"], ["b", "VOTER"], ["c", "VOTER"]]
TWO = [["a", "VOTER"], ["b", "VOTER"]]


@dataclass
class Servers:
    """The status each host's tablet server answers with; a host missing answered nothing."""
    reports: dict[str, TabletReport]
    hosts: tuple = ()

    def ask_each(self, hosts, daemon, method, reply, request=None):
        return {h: ServerStatus(uuid=h, host=h, port=1, tablets=[t]) for h, t in self.reports.items()}


def replica(role, term, config, index, state="RUNNING"):
    return TabletReport("t1", "tbl", state, role=role, term=term, config=config,
                        committed_config=config, committed_config_index=index)


def test_a_removed_follower_of_the_newest_term_does_not_hide_its_removal():
    # the leader (a) committed c's removal at index 7 and is paused now; c, a follower of the
    # same term that no leader told of that commit, still lists itself, and answers first
    db = Servers({"c": replica("FOLLOWER", 3, THREE, 2), "b": replica("FOLLOWER", 3, TWO, 7)})
    members = TabletMembers(db)
    assert members.present(("t1", "c", "c")) is False
    view = members.view("t1")
    assert view.leader is None and view.members == {"a": "VOTER", "b": "VOTER"}


def test_the_leader_is_the_newest_terms_and_no_answer_is_none():
    db = Servers({"a": replica("LEADER", 2, THREE, 2), "b": replica("LEADER", 3, THREE, 2)})
    assert TabletMembers(db).view("t1").leader == "b"
    assert TabletMembers(Servers({})).present(("t1", "c", "c")) is None


# A removal of c appended, not committed, then b FAILED (a disk fault): the config in effect on
# a, the only RUNNING voter, is a and b, with a learner d the master added.
PENDING = [["a", "VOTER"], ["b", "VOTER"], ["d", "NON_VOTER"]]


def statuses(reports):
    return {h: ServerStatus(uuid=h, host=h, port=1, tablets=[t]) for h, t in reports.items()}


def test_a_tablet_whose_every_running_voter_has_a_failed_majority_is_stranded():
    reports = {"a": replica("FOLLOWER", 4, PENDING, 2), "b": replica("", 0, [], -1, "FAILED"),
               "d": replica("LEARNER", 4, PENDING, 2)}
    why = stranded(statuses(reports), "t1")
    assert why is not None and "a's has 1 of 2 FAILED (b)" in why


@pytest.mark.parametrize("change, case", [
    ({"a": replica("LEADER", 4, PENDING, 2)}, "a replica leads"),
    ({"b": None}, "the FAILED voter's host did not answer"),
    ({"b": replica("", 0, [], -1, "COPYING")}, "b is copying, not FAILED"),
    ({"c": replica("FOLLOWER", 3, THREE, 2)}, "c, yet to hear of its removal, counts b and a live"),
    ({"a": replica("FOLLOWER", 4, PENDING, 2, "FAILED")}, "no RUNNING voter reports"),
])
def test_a_tablet_that_may_still_elect_is_not_stranded(change, case):
    reports = {"a": replica("FOLLOWER", 4, PENDING, 2), "b": replica("", 0, [], -1, "FAILED"),
               **change}
    assert stranded(statuses({h: t for h, t in reports.items() if t is not None}), "t1") is None, case


@dataclass
class Looks:
    """Servers whose answers change from one look to the next (the last one stays)."""
    looks: list[dict[str, TabletReport]]
    hosts: tuple = ()
    asked: list = field(default_factory=list)

    def ask_each(self, hosts, daemon, method, reply, request=None):
        self.asked.append(method)
        reports = self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]
        return statuses(reports)


STRANDED = {"a": replica("FOLLOWER", 4, PENDING, 2), "b": replica("", 0, [], -1, "FAILED")}


def no_leader(monkeypatch, tries=None, config=None):
    """The master's answer to a change: no leader reported, for the first `tries` (all when
    None), then the committed `config`."""
    calls = []

    async def change_replica(db, tablet, op, uuid, timeout=10.0):
        calls.append(op)
        if tries is not None and len(calls) > tries:
            return config
        raise RpcError(ErrorCode.TABLET_NOT_RUNNING, f"tablet {tablet}: no leader reported yet")
    monkeypatch.setattr(members_module, "change_replica", change_replica)
    return calls


def test_a_change_on_a_stranded_tablet_gives_up_before_its_timeout(monkeypatch):
    # The old loop asked "no leader" until its timeout and raised that; a tablet that can no
    # longer elect held a matrix cell's membership start, stop and heal for a minute and more.
    calls = no_leader(monkeypatch)
    members = TabletMembers(Looks([STRANDED]), retry_s=0.01, stranded_s=0.05)
    with pytest.raises(Stranded, match="remove of c in tablet t1 given up: no replica leads"):
        members.change("t1", "remove", "c", timeout=5.0)
    assert calls == []  # the master, waiting out its own retries, could only say "no leader"


def test_a_tablet_stranded_for_one_look_only_is_waited_on(monkeypatch):
    # b FAILED for a moment (a restart reopens it): the change waits, and the leader's answer
    # comes once one is elected
    calls = no_leader(monkeypatch, tries=3, config=[["a", "VOTER"], ["b", "VOTER"]])
    back = {**STRANDED, "b": replica("FOLLOWER", 4, PENDING, 2)}
    members = TabletMembers(Looks([STRANDED, back]), retry_s=0.01, stranded_s=60.0)
    assert members.change("t1", "remove", "c", timeout=5.0) == [["a", "VOTER"], ["b", "VOTER"]]
    assert len(calls) == 4


def test_no_removable_member_says_what_each_tablet_lacked():
    # t1's leader has a change pending; the membership start's skip names it
    pending = TabletReport("t1", "tbl", "RUNNING", role="LEADER", term=3, config=THREE,
                           committed_config=TWO + [["c", "NON_VOTER"]], committed_config_index=4)
    members = TabletMembers(Servers({"a": pending, "b": replica("FOLLOWER", 3, THREE, 4)}))
    assert members.removable() == [] and members.why_none == "t1: a change pending"
    members = TabletMembers(Servers({"b": replica("FOLLOWER", 3, THREE, 4)}))
    assert members.removable() == [] and members.why_none == "t1: no leader reported"
    members = TabletMembers(Servers({"a": replica("LEADER", 3, THREE, 4),
                                     "b": replica("FOLLOWER", 3, THREE, 4)}))
    assert members.removable() == [] and members.why_none == "t1: members not running: c"
    members.db.reports["c"] = replica("FOLLOWER", 3, THREE, 4)
    assert len(members.removable()) == 3 and members.why_none == ""
