"""The session intruder against a fake deployment (the real attack is in
test_session_intruder_e2e): an attack no server answered made nothing happen, so the start is
held off and the schedule tries it again while the plan leaves it time; once a server answers,
the start is in force. A power loss of every tablet server at the instant of the start once
left such starts counted unchecked, faults that never fired."""

from __future__ import annotations

import asyncio

from fake_clock import FakeClock

from harness.recorder import Recorder
from nemeses.base import Context
from nemeses.plan import Plan, Step
from nemeses.schedule import Schedule
from nemeses.session_intruder import SessionIntruder


class FakeDB:
    secure = True

    def __init__(self, answers: list[int]):
        self.answers = answers  # how many calls are answered, attack after attack
        self.attacks = 0

    def intrude_sessions(self, step, groups, sessions):
        answered = self.answers[min(self.attacks, len(self.answers) - 1)]
        self.attacks += 1
        return {"calls": 4, "answered": answered, "refused": answered, "foreign_applied": 0}


def _run(tmp_path, answers: list[int], stop_at: float) -> tuple[FakeDB, dict, Schedule]:
    db = FakeDB(answers)
    nemesis = SessionIntruder(ctx=Context(db=db, tablets={0: "t0"}))
    plan = Plan(seed=1, interval=5.0, time_limit=60.0, hosts=["n1"], heal=["session-intruder"],
                steps=[Step(0.0, "session-intruder", "start", {"step": "poison"}),
                       Step(stop_at, "session-intruder", "stop")])
    schedule = Schedule({"session-intruder": nemesis}, plan, clock=FakeClock())
    rec = Recorder(tmp_path / "history.jsonl")
    asyncio.run(schedule.run(rec))
    rec.close()
    return db, schedule.executed[0], schedule


def test_a_start_is_held_off_when_no_server_answered_and_in_force_when_one_did():
    unanswered = SessionIntruder(ctx=Context(db=FakeDB([0]), tablets={0: "t0"}))
    done = unanswered.start({"step": "close"})
    assert done["held_off"] and "no tablet server answered the intruder's 4 calls" in done["skipped"]
    assert done["calls"] == 4 and "observed" not in done
    answered = SessionIntruder(ctx=Context(db=FakeDB([2]), tablets={0: "t0"}))
    done = answered.start({"step": "close"})
    assert "skipped" not in done and done["observed"]["ok"] is True and done["refused"] == 2


def test_an_unanswered_attack_is_tried_again_until_a_server_answers(tmp_path):
    db, start, schedule = _run(tmp_path, [0, 0, 0, 3], stop_at=10.0)
    assert db.attacks == 4
    assert "skipped" not in start and start["observed"]["ok"] is True
    assert start["waited_s"] > 0 and schedule.coverage["start-session-intruder"] == 1


def test_an_attack_never_answered_before_its_stop_is_a_skip_with_its_reason(tmp_path):
    db, start, schedule = _run(tmp_path, [0], stop_at=2.0)
    assert db.attacks > 1
    assert "no tablet server answered" in start["skipped"]
    assert schedule.coverage["start-session-intruder-skipped"] == 1
    assert not schedule.coverage["start-session-intruder"]
