"""The membership nemesis (nemeses/membership.py) is the same for every system: it asks the
system's `Members` for candidates, removes the one the plan picks, and at the heal adds every
removed member back, in order, a failed add staying for the next heal. Here against a members
record standing in for a system; the real ones run in test_nemeses_e2e.py (Tessera) and on the
netns etcd cluster (test_harness_e2e.py)."""

from dataclasses import dataclass, field

import pytest

from nemeses.membership import Membership, Refused


@dataclass
class Ledger:
    """Members that remove and add for real in a list, and fail an add when told to."""

    members: list = field(default_factory=lambda: [("g", "m1", "n1"), ("g", "m2", "n2"),
                                                   ("g", "m3", "n3"), ("g", "m4", "n4")])
    fail_adds: int = 0
    refuse: int = 0  # the system declines this many removals as unsafe
    calls: list = field(default_factory=list)
    why_none: str = ""

    def removable(self):
        self.why_none = "" if len(self.members) > 3 else f"only {len(self.members)} members"
        return sorted(self.members) if len(self.members) > 3 else []

    def remove(self, member, timeout):
        assert timeout == Membership.remove_timeout
        if self.refuse:
            self.refuse -= 1
            raise Refused("only 1 of the 2 remaining voters answered lately")
        self.members.remove(member)
        self.calls.append(("remove", member[1]))
        return {"id": member[1]}

    def present(self, member):
        return member in self.members

    def add(self, member, timeout):
        if self.fail_adds:
            self.fail_adds -= 1
            raise RuntimeError("unhealthy cluster")
        self.members.append(member)
        self.calls.append(("add", member[1]))
        return {}


@dataclass
class System:
    ledger: Ledger

    def membership(self):
        return self.ledger

    def held_by(self, host, daemon=None, but=""):
        return None


def test_removes_the_picked_candidate_and_adds_it_back_at_the_stop():
    ledger = Ledger()
    m = Membership(db=System(ledger))
    done = m.start({"pick": 6})  # 6 mod 4 candidates: the third, n3
    assert done == {"removed": "n3", "group": "g", "id": "m3",
                    "observed": {"ok": True, "in_config": False}} and m.active
    assert m.stop() == {"added": [{"added": "n3", "group": "g"}]} and not m.active
    assert ledger.calls == [("remove", "m3"), ("add", "m3")]


def test_a_failed_add_stays_for_the_next_heal():
    ledger = Ledger(fail_adds=1)
    m = Membership(db=System(ledger))
    m.start({"pick": 0})
    with pytest.raises(RuntimeError, match="unhealthy"):
        m.stop()
    assert m.active and m.heal() == {"added": [{"added": "n1", "group": "g"}]}
    assert len(ledger.members) == 4 and m.heal() == {}


def test_no_candidate_is_a_skip_not_a_removal(monkeypatch):
    ledger = Ledger(members=[("g", "m1", "n1"), ("g", "m2", "n2"), ("g", "m3", "n3")])
    monkeypatch.setattr("nemeses.membership.time.sleep", lambda s: None)
    m = Membership(db=System(ledger), patience=0.0)
    done = m.start({"pick": 1})
    assert done["skipped"] == "no group whose members can spare one now (only 3 members)"
    assert not m.active and ledger.calls == []


def test_a_removal_refused_for_now_is_tried_again(monkeypatch):
    ledger = Ledger(refuse=2)
    monkeypatch.setattr("nemeses.membership.time.sleep", lambda s: None)
    m = Membership(db=System(ledger), patience=5.0)  # within one try
    assert m.start({"pick": 0}) == {"removed": "n1", "group": "g", "id": "m1",
                                    "observed": {"ok": True, "in_config": False}} and m.active
    assert ledger.calls == [("remove", "m1")]


def test_by_default_a_try_is_one_look_and_the_schedule_tries_again(monkeypatch):
    # a try that kept looking for seconds held the other packages' starts back only once it
    # answered: in a short window they came on meanwhile, and the removal never fired
    ledger = Ledger(refuse=1)
    monkeypatch.setattr("nemeses.membership.time.sleep", lambda s: None)
    m = Membership(db=System(ledger))
    first = m.start({"pick": 0})
    assert first["held_off"] is True and first["quiet"] is True and "refused" in first["skipped"]
    assert m.start({"pick": 0})["removed"] == "n1" and ledger.calls == [("remove", "m1")]


def test_a_removal_the_config_still_shows_is_not_in_force(monkeypatch):
    monkeypatch.setattr("nemeses.membership.time.sleep", lambda s: None)
    ledger = Ledger()
    ledger.remove = lambda member, timeout: {"id": member[1]}  # says done, changes nothing
    done = Membership(db=System(ledger), read_back_s=0.0).start({"pick": 0})
    assert done["observed"] == {"ok": False, "in_config": True}


def test_a_replica_that_has_not_applied_the_removal_yet_is_asked_again(monkeypatch):
    monkeypatch.setattr("nemeses.membership.time.sleep", lambda s: None)
    ledger = Ledger()
    answers = iter([True, True, False])  # committed, not yet applied where it was read
    ledger.present = lambda member: next(answers)
    done = Membership(db=System(ledger)).start({"pick": 0})
    assert done["observed"] == {"ok": True, "in_config": False}


def test_a_removal_the_system_keeps_refusing_is_held_off_with_nothing_to_add_back(monkeypatch):
    """Held off, not a plain skip: the schedule tries it again until its stop (another fault's
    hold, or a voter restarted a moment ago, is why the system refuses now)."""
    ledger = Ledger(refuse=1 << 30)
    monkeypatch.setattr("nemeses.membership.time.sleep", lambda s: None)
    m = Membership(db=System(ledger), patience=0.0)
    done = m.start({"pick": 0})
    assert "refused" in done["skipped"] and "1 of the 2" in done["skipped"] and not m.active
    assert done["held_off"] is True
    assert m.stop() == {"added": []} and ledger.calls == []


def test_a_removal_is_read_back_once_someone_answers(monkeypatch):
    monkeypatch.setattr("nemeses.membership.time.sleep", lambda s: None)
    ledger = Ledger()
    answers = iter([None, None, False])
    ledger.present = lambda member: next(answers)  # a leader change after the removal
    done = Membership(db=System(ledger)).start({"pick": 0})
    assert done["observed"] == {"ok": True, "in_config": False}
    ledger = Ledger()
    ledger.present = lambda member: None  # nobody answers within the read-back's time
    m = Membership(db=System(ledger), read_back_s=0.0)
    assert m.start({"pick": 0})["observed"] == {"ok": None, "in_config": None}
