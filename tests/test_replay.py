"""`tessera replay RUN_DIR` runs the recorded spec and fault plan again: unit tests with a fake
run (the spec and the plan handed to the run are the recorded ones; the runner's per-process
op streams repeat from the seed), and one short run-and-replay on the netns cluster."""

import asyncio
import json
import os
import subprocess
import sys

import pytest

from harness import chaos
from harness.cli import main
from harness.recorder import Recorder
from harness.runner import RunOptions, run
from harness.spec import TestSpec
from nemeses import plan as plans
from reports.history import read_jsonl
from workloads import make


def invocations_by_thread(ops, concurrency: int) -> dict[int, list]:
    """Each worker thread's invocations in order (a thread is process mod concurrency: an info
    retires a process, and its thread goes on as process + concurrency)."""
    out: dict[int, list] = {}
    for o in ops:
        if o.type == "invoke" and o.process != "nemesis" and o.process < 10**6:
            out.setdefault(o.process % concurrency, []).append(
                (o.f, o.key, json.dumps(o.value, sort_keys=True)))
    return out


def assert_same_streams(a: dict, b: dict) -> None:
    """Runs of different length (timing differs) issue the same ops: one is a prefix of the other."""
    assert a.keys() == b.keys()
    for thread in a:
        n = min(len(a[thread]), len(b[thread]))
        assert n > 0 and a[thread][:n] == b[thread][:n], thread


def recorded_run(tmp_path):
    spec = TestSpec(workload="bank", nemesis=["partition", "kill"], seed=17, time_limit=30,
                    nemesis_interval=4, concurrency=6, store=str(tmp_path / "store"))
    run_dir = tmp_path / "store" / "bank" / "20260101T000000"
    run_dir.mkdir(parents=True)
    (run_dir / "test.json").write_text(json.dumps({**spec.to_dict(), "status": "complete",
                                                   "started_at": 1.0, "nodes": []}))
    plan = chaos.draw_plan(spec, ["n1", "n2", "n3", "n4", "n5"])
    (run_dir / "schedule.json").write_bytes(plans.dumps(plan))
    return spec, plan, run_dir


def test_replay_runs_the_recorded_spec_and_plan(tmp_path, monkeypatch, capsys):
    spec, plan, run_dir = recorded_run(tmp_path)
    seen = []

    def fake_run(spec_, plan_, made, **facts):
        seen.append((spec_, plan_, facts))
        made(run_dir.with_name("20260101T000001"))
        return "valid"

    monkeypatch.setattr(chaos, "run_test", fake_run)
    assert main(["replay", str(run_dir)]) == 0
    ((spec_, plan_, facts),) = seen
    assert spec_ == spec and plans.dumps(plan_) == plans.dumps(plan)
    assert facts == {"replay_of": str(run_dir.resolve())}


def test_a_run_without_a_schedule_cannot_be_replayed(tmp_path, capsys):
    _, _, run_dir = recorded_run(tmp_path)
    (run_dir / "schedule.json").unlink()
    assert main(["replay", str(run_dir)]) == 254
    assert "cannot be replayed" in capsys.readouterr().err


@pytest.mark.parametrize("edit, says", [
    ({"flags": {"nosuch": 1}}, "unknown key 'nosuch'"),
    ({"nemesis": ["meteor"]}, "unknown nemesis 'meteor'"),
    ({"time_limit": -5}, "--time-limit must be > 0"),
    ({"workload": "watch"}, "runs the workloads"),
])
def test_a_recorded_run_is_checked_as_tessera_test_checks_its_arguments(tmp_path, capsys, edit,
                                                                       says):
    """Replay shares `tessera test`'s one check (harness.validate), so a test.json
    edited by hand, or written by another version, is refused before any host is touched."""
    _, _, run_dir = recorded_run(tmp_path)
    test = json.loads((run_dir / "test.json").read_text())
    (run_dir / "test.json").write_text(json.dumps({**test, **edit}))
    assert main(["replay", str(run_dir)]) == 254
    err = capsys.readouterr().err
    assert "cannot be replayed" in err and says in err, err


class FlakyClient:
    """A register map whose timing and failures differ run to run (its own unseeded random)."""

    def __init__(self):
        import random

        self.data, self.rng = {}, random.Random()

    async def _maybe(self):
        await asyncio.sleep(self.rng.uniform(0, 0.002))
        if self.rng.random() < 0.1:
            from workloads.outcomes import OpUnknown
            raise OpUnknown("lost")

    async def read(self, key):
        await self._maybe()
        return self.data.get(key)

    async def write(self, key, value):
        await self._maybe()
        self.data[key] = value

    async def cas(self, key, expected, new):
        await self._maybe()
        return False


def test_the_same_seed_gives_every_thread_the_same_op_stream(tmp_path):
    def once(name):
        rec = Recorder(tmp_path / name)
        opts = RunOptions(concurrency=5, time_limit=0.3, rate=0, seed=23)
        client = FlakyClient()
        asyncio.run(run(make("register"), lambda _t: client, rec, opts))
        rec.close()
        return invocations_by_thread(read_jsonl(tmp_path / name), 5)

    assert_same_streams(once("a.jsonl"), once("b.jsonl"))


# -- end to end on the netns cluster ----------------------------------------------------------

def tessera(*argv, env, timeout=900):
    return subprocess.run([sys.executable, "-m", "harness.cli", *argv], capture_output=True,
                          text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.netns
def test_replay_repeats_the_fault_schedule_and_every_op_stream(env, tmp_path):
    out = tessera("test", "--workload", "register", "--nemesis", "kill,partition,majority-kill",
                  "--time-limit", "16", "--nemesis-interval", "3", "--seed", "5",
                  "--fast-failure-detection", "--store", str(tmp_path / "store"), env=env)
    assert out.returncode in (0, 1, 2), out.stderr[-3000:]
    first = out.stdout.strip().splitlines()[-1]
    again = tessera("replay", first, env=env)
    assert again.returncode in (0, 1, 2), again.stderr[-3000:]
    second = again.stdout.strip().splitlines()[-1]
    assert second != first
    a, b = (json.load(open(os.path.join(d, "test.json"))) for d in (first, second))
    assert TestSpec.from_dict(a) == TestSpec.from_dict(b) and b["replay_of"] == first
    schedules = [json.load(open(os.path.join(d, "schedule.json"))) for d in (first, second)]
    executed = [s.pop("executed") for s in schedules]  # what ran: its times differ run to run
    assert schedules[0] == schedules[1]
    ran = [[(r["package"], r["action"]) for r in e if r["action"] != "heal"] for e in executed]
    assert ran == [[(s["package"], s["action"]) for s in schedules[0]["steps"]]] * 2
    ops = [read_jsonl(os.path.join(d, "history.jsonl")) for d in (first, second)]
    for package in ("kill", "partition", "majority-kill"):
        mine = {f"{step}-{package}" for step in ("start", "stop", "heal")}  # not majority-kill's
        fs = [[o.f for o in h if o.process == "nemesis" and o.value is not None and o.f in mine]
              for h in ops]
        assert fs[0] == fs[1] and f"start-{package}" in fs[0], (package, fs)
    planned = plans.loads(json.dumps(schedules[0]))
    for h in ops:  # each start did what the plan drew (host shares need no live state)
        kills = [o.value for o in h if o.f == "start-majority-kill" and o.value]
        drawn = [s.choice["target"]["hosts"] for s in planned.steps
                 if s.package == "majority-kill" and s.action == "start"]
        # a host the kill package holds down is left to it, and named as held
        assert [sorted(k["killed"] + list(k.get("held", {}))) for k in kills] == \
            [sorted(d) for d in drawn]
    assert_same_streams(*(invocations_by_thread(h, a["concurrency"]) for h in ops))
