"""The leader-transfer nemesis on Tessera (harness.systems.tessera.transfers), its decisions on
what the servers report (unit test; the transfer itself runs in the chaos end-to-end tests): a
group with no leader right now, or a leader that refuses for the group's state, is held off, so
the schedule asks again while the start's turn lasts instead of leaving the fault unfired."""

from types import SimpleNamespace

from harness.systems.tessera import transfers
from node.protocol import ServerStatus, TabletReport

TABLET = "t-0000"


def db_with(tablets_by_host: dict[str, list[TabletReport]]):
    hosts = [SimpleNamespace(name=h, address=f"10.0.0.{i}") for i, h in enumerate(tablets_by_host)]

    def ask_each(hosts_, daemon, method, shape):
        return {h: ServerStatus(uuid=f"u-{h}", host=h, port=7050, tablets=tablets)
                for h, tablets in tablets_by_host.items()}
    return SimpleNamespace(hosts=hosts, ask_each=ask_each)


def report(role: str, term: int = 3) -> TabletReport:
    config = [["u-n1", "VOTER"], ["u-n2", "VOTER"], ["u-n3", "VOTER"]]
    return TabletReport(TABLET, "t", "RUNNING", role=role, term=term, config=config)


def test_a_group_electing_now_is_held_off_not_skipped():
    db = db_with({"n1": [report("CANDIDATE")], "n2": [report("FOLLOWER")], "n3": []})
    done = transfers.step_down_leader(db, TABLET, graceful=True, pick=7)
    assert done["held_off"] is True and done["skipped"] == f"no server reports leading {TABLET}"


def test_a_leader_that_refuses_for_the_groups_state_is_held_off(monkeypatch):
    db = db_with({"n1": [report("LEADER")], "n2": [report("FOLLOWER")], "n3": [report("FOLLOWER")]})
    monkeypatch.setattr(transfers, "_call", lambda db, leader, group, to: "NOT_LEADER: moved on")
    done = transfers.step_down_leader(db, TABLET, graceful=True, pick=7)
    assert done["held_off"] is True and done["skipped"] == "the leader refused: NOT_LEADER: moved on"
    assert done["leader"] == "n1" and done["term"] == 3 and done["to"] in ("u-n2", "u-n3")
