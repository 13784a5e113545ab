"""The schedule executor runs a fault plan against in-process fake faults on a fake clock (unit
test): each step at its planned time with its planned choice, packages overlapping, heal in
order."""

import asyncio
import random
from dataclasses import dataclass, field

import pytest

from harness.recorder import Recorder
from nemeses.base import Nemesis, choose_targets
from nemeses.plan import Plan, Step
from nemeses.schedule import Schedule
from reports.history import read_jsonl


class FakeClock:
    """Time moves only when the executor sleeps, and only once every step it launched is done:
    a fake fault takes no time."""

    def __init__(self):
        self.t = 1000.0

    def now(self):
        return self.t

    async def sleep(self, seconds):
        await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}))
        self.t += seconds


@dataclass
class Fake(Nemesis):
    clock: FakeClock = None
    log: list = field(default_factory=list)
    fail: bool = False
    skip: bool = False

    def start(self, choice):
        if self.fail:
            raise RuntimeError("iptables not found")
        if self.skip:
            return {"skipped": "nothing to do"}
        self.active = True
        self.log.append((self.clock.t - 1000.0, "start", self.name, choice))
        return {"targets": choice["targets"]}

    def stop(self):
        self.active = False
        self.log.append((self.clock.t - 1000.0, "stop", self.name, None))
        return {"healed": ["n1"]}


def plan_of(*steps, heal=("partition", "kill")):
    return Plan(seed=1, interval=5, time_limit=30, hosts=["n1", "n2", "n3"],
                steps=[Step(*s) for s in steps], heal=list(heal))


def execute(tmp_path, plan, **fakes):
    clock = FakeClock()
    nemeses = {name: Fake(name=name, clock=clock, **opts) for name, opts in fakes.items()}
    rec = Recorder(tmp_path / "h.jsonl")
    s = Schedule(nemeses, plan, clock=clock)

    async def go():
        await s.run(rec)
        await s.heal(rec)
    asyncio.run(go())
    rec.close()
    return s, nemeses, read_jsonl(tmp_path / "h.jsonl")


def test_steps_run_at_their_planned_times_with_their_choices(tmp_path):
    plan = plan_of((2.5, "kill", "start", {"targets": ["n2"]}), (4.0, "partition", "start", {"targets": ["n1"]}),
                   (7.5, "kill", "stop"), (9.0, "partition", "stop"),
                   (12.5, "kill", "start", {"targets": ["n3"]}), (17.5, "kill", "stop"))
    log = []
    s, nemeses, ops = execute(tmp_path, plan, kill={"log": log}, partition={"log": log})
    assert log == [(2.5, "start", "kill", {"targets": ["n2"]}), (4.0, "start", "partition", {"targets": ["n1"]}),
                   (7.5, "stop", "kill", None), (9.0, "stop", "partition", None),
                   (12.5, "start", "kill", {"targets": ["n3"]}), (17.5, "stop", "kill", None)]
    assert not any(n.active for n in nemeses.values())
    heals = [o.f for o in ops if o.f.startswith("heal-") and o.value is not None]
    assert heals == ["heal-partition", "heal-kill"]  # the plan's heal order
    assert all(o.process == "nemesis" and o.type == "info" for o in ops)
    done = [o for o in ops if o.f == "start-kill" and o.value]
    assert [o.value["targets"] for o in done] == [["n2"], ["n3"]]  # what was done is recorded
    assert s.summary()["fired"] == {"kill": 2, "partition": 1}


def test_a_fault_that_fails_is_recorded_and_reported_as_never_fired(tmp_path):
    plan = plan_of((1, "clock", "start", {"targets": ["n1"]}), (6, "clock", "stop"), heal=("clock",))
    s, _, ops = execute(tmp_path, plan, clock={"fail": True})
    assert any(o.error and "iptables not found" in o.error for o in ops)
    assert s.summary()["never_fired"] == ["clock"]


def test_a_fault_that_skips_is_not_counted_as_fired(tmp_path):
    plan = plan_of((1, "membership", "start", {"targets": []}), (6, "membership", "stop"),
                   heal=("membership",))
    s, _, _ = execute(tmp_path, plan, membership={"skip": True})
    assert s.summary()["never_fired"] == ["membership"]
    assert s.coverage["start-membership-skipped"] == 1


def test_choose_targets():
    hosts = ["n1", "n2", "n3", "n4", "n5"]
    rng = random.Random(3)
    assert len(choose_targets("one", hosts, rng)) == 1
    assert len(choose_targets("minority", hosts, rng)) == 2
    assert len(choose_targets("majority", hosts, rng)) == 3
    assert choose_targets("all", hosts, rng) == hosts
    with pytest.raises(ValueError, match="unknown target spec"):
        choose_targets("most", hosts, rng)
