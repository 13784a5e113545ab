"""How the harness reads a tablet's membership back from its tablet servers
(harness/systems/tessera/members.py): what the membership nemesis checks after a removal."""

from __future__ import annotations

from dataclasses import dataclass

from harness.systems.tessera.members import TabletMembers
from node.protocol import ServerStatus, TabletReport

THREE = [["a", "VOTER"], ["b", "VOTER"], ["c", "VOTER"]]
TWO = [["a", "VOTER"], ["b", "VOTER"]]


@dataclass
class Servers:
    """The status each host's tablet server answers with; a host missing answered nothing."""
    reports: dict[str, TabletReport]
    hosts: tuple = ()

    def ask_each(self, hosts, daemon, method, reply, request=None):
        return {h: ServerStatus(uuid=h, host=h, port=1, tablets=[t]) for h, t in self.reports.items()}


def replica(role, term, config, index):
    return TabletReport("t1", "tbl", "RUNNING", role=role, term=term, config=config,
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
