"""The schedule executor runs a fault plan against in-process fake faults on a fake clock (unit
test): each step at its planned time with its planned choice, packages overlapping, heal in
order."""

import asyncio
import random
import threading
import time
from dataclasses import dataclass, field

import msgspec
import pytest
from fake_clock import FakeClock

from harness.recorder import Recorder
from nemeses.base import Nemesis, choose_targets, held_off
from nemeses.plan import Plan, Step
from nemeses.schedule import RETRY_S, Clock, Schedule
from reports.history import read_jsonl


@dataclass
class Fake(Nemesis):
    clock: FakeClock = None
    log: list = field(default_factory=list)
    fail: bool = False
    skip: bool = False
    observed: dict | None = None  # what a look at the hosts saw after the start

    def start(self, choice):
        if self.fail:
            raise RuntimeError("iptables not found")
        if self.skip:
            return {"skipped": "nothing to do"}
        self.active = True
        self.log.append((self.clock.t - 1000.0, "start", self.name, choice))
        seen = {"observed": self.observed} if self.observed is not None else {}
        return {"targets": choice["targets"], **seen}

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


def judged(tmp_path, **fakes) -> dict:
    """A valid register history with the nemesis ops of a run of `fakes` beside it, judged as
    `tessera test` judges a run (the faults check among the run's checks)."""
    from reports.checkers.faults import check_faults
    from reports.checkers.generate import register_history
    from reports.checkers.verdict import judge
    from workloads import make

    plan = plan_of(*((1, name, "start", {"targets": ["n1"]}) for name in fakes),
                   *((6, name, "stop") for name in fakes), heal=tuple(fakes))
    _, _, nemesis_ops = execute(tmp_path, plan, **fakes)
    client = register_history(3, 60, processes=3)
    ops = [msgspec.structs.replace(o, index=i) for i, o in enumerate(client + nemesis_ops)]
    return judge(ops, make("register").checker, [check_faults(ops, list(fakes))])


def test_a_fault_that_failed_to_start_makes_the_run_unknown_and_is_named(tmp_path):
    """A run in which a fault failed to start was once valid; the history was made under
    less than the run claims, so it is unknown, and says which fault."""
    results = judged(tmp_path, partition={"observed": {"ok": True}}, clock={"fail": True})
    assert results["history_verdict"] == "valid" and results["verdict"] == "unknown"
    faults = next(r for r in results["check"]["results"] if r["checker"] == "faults")
    assert [(e["type"], e["fault"]) for e in faults["errors"]] == [("fault-failed", "clock")]
    assert "iptables not found" in faults["errors"][0]["explanation"]
    assert faults["starts"]["verified"] == 1 and faults["never_fired"] == ["clock"]


def test_a_fault_not_in_force_when_checked_makes_the_run_unknown(tmp_path):
    seen = {"ok": False, "connected": [["n1", "n4"]]}
    results = judged(tmp_path, partition={"observed": seen})
    faults = next(r for r in results["check"]["results"] if r["checker"] == "faults")
    assert results["verdict"] == "unknown" and faults["errors"][0]["type"] == "fault-not-in-force"
    assert "connected [['n1', 'n4']]" in faults["errors"][0]["explanation"]


def test_faults_seen_in_force_leave_the_verdict_to_the_history(tmp_path):
    results = judged(tmp_path, partition={"observed": {"ok": True}}, kill={},
                     membership={"skip": True})
    faults = next(r for r in results["check"]["results"] if r["checker"] == "faults")
    assert results["verdict"] == "valid" and faults["verdict"] == "valid"
    # kill has no check here: counted as unchecked, never as verified; membership only skipped
    assert faults["starts"] == {"verified": 1, "unverified": 0, "unchecked": 1, "failed": 0,
                                "skipped": 1}
    assert faults["never_fired"] == ["membership"]


def test_a_check_nobody_answered_is_unchecked_and_a_failed_stop_only_a_note(tmp_path):
    """A look at the hosts that could not be made (ok None) is not a verification, and not a
    fault out of force either; a stop that raised leaves the fault in force longer (more fault,
    not less): a note. Neither makes the run unknown."""
    @dataclass
    class StuckStop(Fake):
        def stop(self):
            raise TimeoutError("no reply within 1.059s")

    clock = FakeClock()
    nemeses = {"membership": StuckStop(name="membership", clock=clock,
                                       observed={"ok": None, "in_config": None})}
    plan = plan_of((1, "membership", "start", {"targets": ["n1"]}), (6, "membership", "stop"),
                   heal=())
    rec = Recorder(tmp_path / "h.jsonl")
    asyncio.run(Schedule(nemeses, plan, clock=clock).run(rec))
    rec.close()
    from reports.checkers.faults import check_faults

    r = check_faults(read_jsonl(tmp_path / "h.jsonl"), ["membership"])
    assert r["verdict"] == "valid" and r["starts"]["unchecked"] == 1 and not r["errors"]
    assert [n["type"] for n in r["notes"]] == ["heal-failed"]


def test_a_start_whose_turn_comes_after_the_workload_ended_is_skipped_with_its_stop(tmp_path):
    """CI's etcd run: a removal stuck behind a partition pushed the membership package's last
    start and stop past the run's 30 s, where no op met them and the run only lasted longer.
    Such a start is skipped and said so (the history and schedule.json), and its stop with it."""
    @dataclass
    class Slow(Fake):
        def start(self, choice):
            self.clock.t = max(self.clock.t, 1040.0)  # the first start ends 40 s in
            return super().start(choice)

    clock = FakeClock()
    log = []
    nemeses = {"membership": Slow(name="membership", clock=clock, log=log)}
    plan = plan_of((5, "membership", "start", {"targets": ["n1"]}), (10, "membership", "stop"),
                   (15, "membership", "start", {"targets": ["n2"]}), (20, "membership", "stop"),
                   heal=())
    rec = Recorder(tmp_path / "h2.jsonl")
    s = Schedule(nemeses, plan, clock=clock)
    asyncio.run(s.run(rec))
    rec.close()
    # the stop runs late, at once; the start planned at 15 s comes after the 30 s workload
    assert [e[1:3] for e in log] == [("start", "membership"), ("stop", "membership")]
    late = [r for r in s.executed if "skipped" in r]
    assert len(late) == 1 and "after the workload ended (planned at 15 s" in late[0]["skipped"]
    assert s.coverage["start-membership-skipped"] == 1 and s.coverage["start-membership"] == 1
    assert [r["action"] for r in s.executed] == ["start", "stop", "start"]  # no second stop
    ops = read_jsonl(tmp_path / "h2.jsonl")
    assert [o.value["skipped"][:12] for o in ops if isinstance(o.value, dict)
            and "skipped" in o.value] == ["its turn cam"]


@dataclass
class Holder(Fake):
    """A fault that holds every server down from its start to its stop (all-kill)."""
    held: dict = None

    def start(self, choice):
        self.held["by"] = self.name
        return super().start(choice)

    def stop(self):
        self.held["by"] = None
        return super().stop()


@dataclass
class Needy(Fake):
    """A fault that needs a server up (membership-race): held off while one is held down."""
    held: dict = None
    tries: list = field(default_factory=list)

    def start(self, choice):
        self.tries.append(self.clock.t - 1000.0)
        if self.held["by"]:
            return held_off(f"every server is held by {self.held['by']}")
        return super().start(choice)


def run_held(tmp_path, holder_stop: float):
    clock, held, log = FakeClock(), {"by": None}, []
    nemeses = {"all-kill": Holder(name="all-kill", clock=clock, log=log, held=held),
               "membership-race": Needy(name="membership-race", clock=clock, log=log, held=held)}
    plan = plan_of(*sorted([(1, "all-kill", "start", {"targets": ["n1"]}),
                            (2, "membership-race", "start", {"targets": ["n2"]}),
                            (holder_stop, "all-kill", "stop"), (8, "membership-race", "stop")],
                           key=lambda s: s[0]), heal=())
    rec = Recorder(tmp_path / "h.jsonl")
    s = Schedule(nemeses, plan, clock=clock)
    asyncio.run(s.run(rec))
    rec.close()
    return s, nemeses["membership-race"], log, read_jsonl(tmp_path / "h.jsonl")


def test_a_start_held_off_by_another_fault_fires_once_that_fault_stops(tmp_path):
    """membership-race starting inside all-kill's hold found no replica up and was skipped in
    every cycle; now it is tried again every RETRY_S and fires once all-kill stops, its wait
    in the history."""
    s, needy, log, ops = run_held(tmp_path, holder_stop=5)
    fired = [e for e in log if e[1:3] == ("start", "membership-race")]
    assert len(fired) == 1 and 5 <= fired[0][0] <= 5 + RETRY_S
    assert needy.tries[0] == 2 and len(needy.tries) >= 7  # 2, 2.5, ... 5: every RETRY_S
    assert s.coverage["start-membership-race"] == 1 and not s.coverage["start-membership-race-skipped"]
    done = next(o.value for o in ops if o.f == "start-membership-race" and o.value)
    assert done["targets"] == ["n2"] and 3 <= done["waited_s"] <= 3 + RETRY_S
    assert done["tries"] == len(needy.tries)


def test_a_start_held_off_until_its_own_stop_is_skipped_with_its_reason(tmp_path):
    """Its turn is 2 s to 8 s and all-kill holds until 9 s: tried until 8 s, then skipped."""
    s, needy, log, _ = run_held(tmp_path, holder_stop=9)
    assert not [e for e in log if e[1:3] == ("start", "membership-race")]
    assert needy.tries[-1] == 8 and len(needy.tries) == 13  # 2, 2.5, ... 8
    assert s.coverage["start-membership-race-skipped"] == 1
    skipped = next(r for r in s.executed if r["package"] == "membership-race" and "skipped" in r)
    assert "held by all-kill" in skipped["skipped"]


def test_a_start_that_fires_late_held_past_its_stop_fires_before_its_next_start(tmp_path):
    """A leadership transfer (it fires late: its stop undoes nothing) whose whole window lay inside
    all-kill's hold never fired; it is now tried until the package's next start, at 12 s."""
    clock, held, log = FakeClock(), {"by": None}, []
    needy = Needy(name="leader-transfer", clock=clock, log=log, held=held, fires_late=True)
    nemeses = {"all-kill": Holder(name="all-kill", clock=clock, log=log, held=held),
               "leader-transfer": needy}
    plan = plan_of((1, "all-kill", "start", {"targets": ["n1"]}),
                   (2, "leader-transfer", "start", {"targets": ["n2"]}),
                   (8, "leader-transfer", "stop"), (9, "all-kill", "stop"),
                   (12, "leader-transfer", "start", {"targets": ["n3"]}),
                   (16, "leader-transfer", "stop"), heal=())
    s = Schedule(nemeses, plan, clock=clock)
    asyncio.run(s.run(Recorder(tmp_path / "h.jsonl")))
    fired = [e for e in log if e[1:3] == ("start", "leader-transfer")]
    assert [e[3]["targets"] for e in fired] == [["n2"], ["n3"]]
    assert 9 <= fired[0][0] <= 9 + RETRY_S and fired[1][0] == 12
    # its stop followed the late start, before the next start
    assert [e[1] for e in log if e[2] == "leader-transfer"] == ["start", "stop", "start", "stop"]


def test_a_plain_skip_is_not_tried_again(tmp_path):
    calls = []

    @dataclass
    class Once(Fake):
        def start(self, choice):
            calls.append(self.clock.t)
            return {"skipped": "the system offers no such target"}

    clock = FakeClock()
    plan = plan_of((1, "membership", "start", {"targets": []}), (6, "membership", "stop"), heal=())
    s = Schedule({"membership": Once(name="membership", clock=clock)}, plan, clock=clock)
    rec = Recorder(tmp_path / "h.jsonl")
    asyncio.run(s.run(rec))
    rec.close()
    assert len(calls) == 1 and s.coverage["start-membership-skipped"] == 1


@dataclass
class Taker(Fake):
    """A fault that takes members away while in force (a kill, a pause)."""
    holding: set = None

    def start(self, choice):
        self.holding.add(self.name)
        return super().start(choice)

    def stop(self):
        self.holding.discard(self.name)
        return super().stop()


@dataclass
class Remover(Fake):
    """membership: a removal needs a group whose every member is up, so every other fault at
    rest at once."""
    holding: set = None
    quiet: bool = True

    def start(self, choice):
        if self.holding:
            return held_off("no group whose members can spare one now", quiet=self.quiet)
        return super().start(choice)


def run_overlapping(tmp_path, quiet: bool):
    """kill and pause overlap from 1 s to 14 s, never both at rest; membership's turn is 2-13 s."""
    clock, holding, log = FakeClock(), set(), []
    nemeses = {"kill": Taker(name="kill", clock=clock, log=log, holding=holding),
               "pause": Taker(name="pause", clock=clock, log=log, holding=holding),
               "membership": Remover(name="membership", clock=clock, log=log, holding=holding,
                                     quiet=quiet)}
    steps = [(t, "kill", "start", {"targets": ["n1"]}) for t in (1, 5, 9)]
    steps += [(t, "kill", "stop") for t in (4, 8, 12)]
    steps += [(t, "pause", "start", {"targets": ["n2"]}) for t in (3, 7, 11)]
    steps += [(t, "pause", "stop") for t in (6, 10, 14)]
    steps += [(2, "membership", "start", {"targets": []}), (13, "membership", "stop")]
    plan = plan_of(*sorted(steps, key=lambda s: (s[0], s[1])), heal=())
    rec = Recorder(tmp_path / "h.jsonl")
    s = Schedule(nemeses, plan, clock=clock)
    asyncio.run(s.run(rec))
    rec.close()
    return s, log, read_jsonl(tmp_path / "h.jsonl")


def test_a_start_that_needs_quiet_holds_the_other_starts_back_until_it_fires(tmp_path):
    """Without quiet, two packages that overlap in turn leave membership no moment to fire;
    with it, pause's start at 3 s waits, kill's stop at 4 s does not, membership fires then,
    and pause starts after it, its wait in the history, and holds as long as planned."""
    (tmp_path / "plain").mkdir()
    s, log, _ = run_overlapping(tmp_path / "plain", quiet=False)
    assert s.coverage["start-membership-skipped"] == 1 and not s.coverage["start-membership"]

    s, log, ops = run_overlapping(tmp_path, quiet=True)
    starts = [(t, name) for t, what, name, _ in log if what == "start"]
    fired = [t for t, name in starts if name == "membership"]
    assert len(fired) == 1 and 4 <= fired[0] <= 4 + RETRY_S
    assert [t for t, what, name, _ in log if (what, name) == ("stop", "kill")][0] == 4
    pause = [t for t, name in starts if name == "pause"]
    assert fired[0] <= pause[0] <= fired[0] + RETRY_S
    done = next(o.value for o in ops if o.f == "start-pause" and o.value)
    assert done["deferred_for"] == ["membership"] and 1 <= done["deferred_s"] <= 1 + RETRY_S
    # the deferred hold kept its 3 s (its stop planned at 6 s came as late), and the next
    # start, planned at 7 s, followed that stop
    stops = [t for t, what, name, _ in log if (what, name) == ("stop", "pause")]
    assert stops[0] == 6 + done["deferred_s"] and pause[1] == stops[0] and pause[2] == 11
    assert s.coverage["deferred-starts"] == 1 and s.coverage["start-pause"] == 3


def test_a_quiet_start_lets_the_others_go_on_once_it_has_its_group(tmp_path):
    """Quiet holds the other starts back only while a removal looks for a group: once it has
    one (`settled()`), the slow rest (the change's commit and read-back, many seconds under
    load) runs beside them. Before, every start waited for the removal to return, and under a
    loaded netns run ten packages' later starts all came after the workload's end. Real clock:
    the removal waits for pause's start, which it can see only if pause was let go."""
    holding, log = set(), []
    started = threading.Event()

    @dataclass
    class SlowRemover(Remover):
        def start(self, choice):
            if self.holding:
                return held_off("no group whose members can spare one now", quiet=True)
            self.settled()
            return {"saw_pause_start": started.wait(10.0)}

    @dataclass
    class Pause(Taker):
        def start(self, choice):
            started.set()
            return super().start(choice)

    class Wall(Clock):  # the real clock, with the fakes' `t`
        t = property(lambda self: 1000.0 + time.monotonic())

    clock = Wall()
    nemeses = {"kill": Taker(name="kill", clock=clock, log=log, holding=holding),
               "pause": Pause(name="pause", clock=clock, log=log, holding=holding),
               "membership": SlowRemover(name="membership", clock=clock, log=log,
                                         holding=holding)}
    plan = plan_of((0.0, "kill", "start", {"targets": ["n1"]}),
                   (0.1, "membership", "start", {"targets": []}),
                   (0.3, "kill", "stop"), (0.5, "pause", "start", {"targets": ["n2"]}),
                   (0.6, "pause", "stop"), (2.0, "membership", "stop"), heal=())
    rec = Recorder(tmp_path / "h.jsonl")
    s = Schedule(nemeses, plan, clock=clock)
    asyncio.run(s.run(rec))
    rec.close()
    done = next(o.value for o in read_jsonl(tmp_path / "h.jsonl")
                if o.f == "start-membership" and o.value)
    assert done["saw_pause_start"] is True, done
    assert s.coverage["start-pause"] == 1 and s.coverage["deferred-starts"] == 1


def test_what_a_fault_found_on_the_hosts_at_its_stop_makes_the_run_invalid():
    """A stop's `found` (nemeses.server_cut: a member its leader could not reach, never
    replaced) is a broken promise no history shows: one error each, the run invalid. A run
    whose stops judged nothing has no such check (None), and one that judged and found
    nothing passes it."""
    from reports.checkers.faults import check_fault_findings
    from reports.history import Op

    def stop(i, value):
        return [Op(i, "info", "nemesis", "stop-server-cut", None, 5 * 10**9),
                Op(i + 1, "info", "nemesis", "stop-server-cut", value, 6 * 10**9)]

    quiet = stop(0, {"healed": "n1", "lasted_s": 4.0})
    assert check_fault_findings(quiet) is None
    clean = stop(0, {"healed": "n1", "lasted_s": 16.0, "judged_after_s": 15.0, "found": []})
    assert check_fault_findings(quiet + clean) == {
        "checker": "fault-findings", "verdict": "valid", "judged": 1, "errors": []}
    found = stop(2, {"healed": "n2", "lasted_s": 16.0, "found": ["tablet t-1 kept its voter"]})
    r = check_fault_findings(clean + found)
    assert r["verdict"] == "invalid" and r["judged"] == 2
    assert r["errors"] == [{"type": "fault-finding", "fault": "server-cut",
                            "explanation": "stop-server-cut at 6.0 s: tablet t-1 kept its voter"}]
