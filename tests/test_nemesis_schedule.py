"""The combined nemesis schedule against in-process fake faults (unit test)."""

import asyncio
import random
from dataclasses import dataclass, field

import pytest

from harness.recorder import Recorder
from nemeses.base import Nemesis, choose_targets
from nemeses.schedule import Schedule
from reports.history import read_jsonl


@dataclass
class Fake(Nemesis):
    log: list = field(default_factory=list)
    fail: bool = False
    skip: bool = False

    def start(self, rng):
        if self.fail:
            raise RuntimeError("iptables not found")
        if self.skip:
            return {"skipped": "nothing to do"}
        self.active = True
        self.log.append(("start", self.name))
        return {"targets": ["n1"]}

    def stop(self):
        self.active = False
        self.log.append(("stop", self.name))
        return {"healed": ["n1"]}


def run_schedule(tmp_path, nemeses, seconds=0.8, interval=0.1):
    rec = Recorder(tmp_path / "h.jsonl")
    s = Schedule(nemeses, interval, seed=1)

    async def go():
        deadline = asyncio.get_running_loop().time() + seconds
        s.rng.uniform = lambda a, b: 0.0  # no start-up jitter in this test
        await s.run(rec, deadline)
        await s.heal(rec)
    asyncio.run(go())
    rec.close()
    return s, read_jsonl(tmp_path / "h.jsonl")


def test_packages_alternate_and_heal_in_order(tmp_path):
    log = []
    kill, part = Fake(name="kill", log=log), Fake(name="partition", log=log)
    s, ops = run_schedule(tmp_path, [kill, part])
    for name in ("kill", "partition"):
        mine = [a for a, n in log if n == name]
        assert mine and mine[0] == "start"
        assert all(a != b for a, b in zip(mine, mine[1:], strict=False)), mine  # alternates
    assert not kill.active and not part.active
    heals = [o.f for o in ops if o.f.startswith("heal-") and o.value is not None]
    assert heals == ["heal-partition", "heal-kill"]  # partitions heal first
    assert all(o.process == "nemesis" and o.type == "info" for o in ops)
    summary = s.summary()
    assert summary["fired"]["kill"] >= 1 and summary["never_fired"] == []


def test_a_fault_that_fails_is_recorded_and_reported_as_never_fired(tmp_path):
    s, ops = run_schedule(tmp_path, [Fake(name="clock", fail=True)])
    assert any(o.error and "iptables not found" in o.error for o in ops)
    assert s.summary()["never_fired"] == ["clock"]


def test_a_fault_that_skips_is_not_counted_as_fired(tmp_path):
    s, _ = run_schedule(tmp_path, [Fake(name="membership", skip=True)])
    assert s.summary()["never_fired"] == ["membership"]
    assert s.coverage["start-membership-skipped"] >= 1


def test_choose_targets():
    hosts = ["n1", "n2", "n3", "n4", "n5"]
    rng = random.Random(3)
    assert len(choose_targets("one", hosts, rng)) == 1
    assert len(choose_targets("minority", hosts, rng)) == 2
    assert len(choose_targets("majority", hosts, rng)) == 3
    assert choose_targets("all", hosts, rng) == hosts
    with pytest.raises(ValueError, match="unknown target spec"):
        choose_targets("most", hosts, rng)
