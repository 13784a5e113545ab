"""Executes a fault plan (`nemeses.plan`): each package's steps in order at their planned times,
on an injected clock, so a unit test runs a whole schedule on a fake clock in no time.

Every start, stop and heal is a pair of ops in the history (process "nemesis": an `info`
invoke, then an `info` completion whose value says exactly what was done, with any target the
plan left as a rule resolved, and under "observed" what a look at the hosts right after the
start saw: `nemeses.observe`), and the coverage (how often each fault fired, healed, failed or
was not seen in force) goes into results.json. `executed` lists each step as it ran, with its
observation or error, for schedule.json. A step running late (an earlier start of its package
was slow) runs at once, unless it is a start whose turn came after the workload ended: no op
would meet that fault, and the run would only last longer (an etcd removal stuck behind a
partition pushed a 30 s run's last membership changes 16 s past its end). Such a start is
skipped, and said so, and so is its stop; the final heal follows anyway.

A start held off by another package (it answers `nemeses.base.held_off`: the daemon it would
kill is held killed or paused, every replica it would race is down) did nothing, and is tried
again every RETRY_S until the plan's stop for it (one that `fires_late`, until the package's
next start: a transfer held off by an all-kill as long as its own window never fired), so two packages' overlap delays a fault
rather than cancelling it (however short its hold is left: a kill then restarted at once is still
a crash and a recovery): `membership-race` starting inside `all-kill`'s hold fires
once the kill is over. The start's completion then says how long it waited (`waited_s`); a
start still held off at the end is skipped with its last reason.

Some starts need every other fault at rest at once (`held_off(..., quiet=True)`: a removal needs
a group whose every member is up). Among ten packages overlapping at random that moment
seldom comes, and under `--nemesis all` membership fired in one matrix cell of four or five.
While such a start is held off, the other packages' next starts wait (their stops and heals do
not), so no new hold begins while the ones in force end and the cluster settles. They go on
once it has what it waited for (its `settled()`: a removal's group found and reserved, not the
removal's slow commit and read-back, which under load kept every other start waiting past a
short run's end), or its turn is over. They fire later by as much (`deferred_s` in their
completion), and so do their stops, so each deferred hold keeps its length (its stop at the
workload's end at the latest); a start deferred past the workload's end is skipped like any
late start. It cannot shorten a hold already in force, so in a short cell a removal may still
find no group to spare.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from harness.recorder import Recorder
from nemeses.base import Nemesis
from nemeses.plan import Plan, Step

RETRY_S = 0.5  # between a held-off start's tries


class Clock:
    """Seconds on the event loop's clock; a test passes its own `now` and `sleep`."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class Schedule:
    def __init__(self, nemeses: dict[str, Nemesis], plan: Plan, active: set | None = None,
                 clock: Clock | None = None):
        self.nemeses = nemeses
        self.plan = plan
        self.clock = clock or Clock()
        self.coverage: Counter = Counter()
        self.active = active if active is not None else set()
        self.executed: list[dict] = []  # each step as it ran: what schedule.json adds at the end
        self._t0: float | None = None
        self._quiet: set[str] = set()  # packages whose held-off start waits for the others to rest

    async def _do(self, rec: Recorder, name: str, action: str, choice: dict | None = None,
                  skip: str | None = None, retry_until: float | None = None,
                  deferred: dict | None = None) -> None:
        """Run one step and record it; `skip`: the reason a start is not run at all;
        `retry_until`: the clock time up to which a held-off start is tried again;
        `deferred`: how long a start waited for another's quiet, and for whom."""
        n, f = self.nemeses[name], f"{action}-{name}"
        rec.record("nemesis", "info", f, None)
        ran = {"at": round(self.clock.now() - (self._t0 or self.clock.now()), 3),
               "package": name, "action": action, **(deferred or {})}
        self.executed.append(ran)
        loop = asyncio.get_running_loop()
        n.settled = lambda: loop.call_soon_threadsafe(self._quiet.discard, name)
        try:
            call = {"start": lambda: n.start(choice), "stop": n.stop, "heal": n.heal}[action]
            # SSH and RPCs block: off the event loop
            done = {"skipped": skip} if skip else await asyncio.to_thread(call)
            began = last_try = self.clock.now()
            tries = 1
            try:
                while (retry_until is not None and _held_off(done)
                       and self.clock.now() + RETRY_S <= retry_until):
                    if done.get("quiet"):
                        self._quiet.add(name)
                    await self.clock.sleep(RETRY_S)
                    last_try, tries = self.clock.now(), tries + 1
                    done = await asyncio.to_thread(call)
            finally:
                self._quiet.discard(name)
            if tries > 1 and isinstance(done, dict):  # held off a while: until its last try
                done = {**done, "tries": tries, "waited_s": round(last_try - began, 3)}
                ran["waited_s"] = done["waited_s"]
            if deferred and isinstance(done, dict):
                done = {**done, **deferred}
            rec.record("nemesis", "info", f, done)
            if action == "start" and isinstance(done, dict) and "skipped" in done:
                self.coverage[f"{f}-skipped"] += 1  # nothing was done: not a firing
                ran["skipped"] = done["skipped"]
                return
            self.coverage[f] += 1
            if action == "start":
                observed = done.get("observed") if isinstance(done, dict) else None
                ran["observed"] = observed if observed is not None else "no check on the hosts"
                if isinstance(observed, dict) and observed.get("ok") is False:
                    self.coverage[f"{f}-unverified"] += 1  # fired, but not seen in force
                self.active.add(name)
            else:
                self.active.discard(name)
        except Exception as e:  # a fault that failed to apply is recorded, and the run goes on
            rec.record("nemesis", "info", f, None, error=f"{type(e).__name__}: {e}")
            self.coverage[f"{f}-failed"] += 1
            ran["error"] = f"{type(e).__name__}: {e}"

    async def run(self, rec: Recorder) -> None:
        """Every step of the plan at its time after this call. One loop waits for the times, so
        a test's clock only has to advance; each step runs as a task after its package's
        previous step, so packages overlap and a slow step delays only its own package."""
        t0 = self._t0 = self.clock.now()
        last: dict[str, asyncio.Task] = {}
        # each start's last moment to fire: the stop the plan gives it, or for one that
        # `fires_late` the package's next start (the workload's end for its last)
        until: dict[int, float] = {}
        opened: dict[str, int] = {}
        for i, s in enumerate(self.plan.steps):
            if s.action == "start":
                if s.package in opened and self.nemeses[s.package].fires_late:
                    until[opened[s.package]] = t0 + s.at
                opened[s.package] = i
            elif s.package in opened and not self.nemeses[s.package].fires_late:
                until[opened.pop(s.package)] = t0 + s.at
        for name, j in opened.items():
            if self.nemeses[name].fires_late:
                until[j] = t0 + self.plan.time_limit
        skipped: set[str] = set()  # packages whose last start came after the workload's end
        shift: dict[str, float] = {}  # how long a package's start waited for another's quiet

        async def after(prev: asyncio.Task | None, s: Step, retry_until: float | None) -> None:
            if prev is not None:
                await prev
            if s.action == "stop" and s.package in skipped:
                skipped.discard(s.package)  # nothing of its start to stop
                return
            if s.action == "stop" and (by := shift.pop(s.package, 0.0)):
                # its start was deferred: the hold keeps its length, up to the workload's end
                end = min(t0 + s.at + by, t0 + self.plan.time_limit)
                await self.clock.sleep(max(0.0, end - self.clock.now()))
            deferred = await self._quiet_for(s.package) if s.action == "start" else None
            late = self.clock.now() - t0 - self.plan.time_limit
            if s.action == "start" and late >= 0:
                skipped.add(s.package)
                await self._do(rec, s.package, "start", skip=(
                    f"its turn came {late:.1f} s after the workload ended (planned at "
                    f"{s.at:g} s; an earlier step of the package ran long)"))
                return
            if deferred:
                shift[s.package] = deferred["deferred_s"]
            await self._do(rec, s.package, s.action, s.choice, retry_until=retry_until,
                           deferred=deferred)

        for i, s in enumerate(self.plan.steps):
            await self.clock.sleep(max(0.0, t0 + s.at - self.clock.now()))
            last[s.package] = asyncio.create_task(after(last.get(s.package), s, until.get(i)))
        await asyncio.gather(*last.values())

    async def _quiet_for(self, package: str) -> dict | None:
        """Wait while another package's held-off start asks the others to rest; how long and
        for whom, or None if it did not have to."""
        began, waited_for = self.clock.now(), set()
        while others := self._quiet - {package}:
            waited_for |= others
            await self.clock.sleep(RETRY_S)
        if not waited_for:
            return None
        self.coverage["deferred-starts"] += 1
        return {"deferred_s": round(self.clock.now() - began, 3), "deferred_for": sorted(waited_for)}

    async def heal(self, rec: Recorder) -> None:
        for name in self.plan.heal:
            await self._do(rec, name, "heal")

    def summary(self) -> dict:
        fired = {name: self.coverage[f"start-{name}"] for name in self.nemeses}
        starts = [r for r in self.executed if r["action"] == "start"]
        return {"counts": dict(self.coverage), "fired": fired,
                "never_fired": [name for name, c in fired.items() if c == 0],
                "verified": sum(_seen(r) is True for r in starts),
                "unverified": sum(_seen(r) is False for r in starts),
                "unchecked": sum("observed" in r and _seen(r) is None for r in starts),
                "failed": sum("error" in r for r in self.executed)}


def _held_off(done: object) -> bool:
    return isinstance(done, dict) and done.get("held_off") is True


def _seen(ran: dict) -> bool | None:
    """A start's observation: True (seen in force), False (not), None (no check made)."""
    observed = ran.get("observed")
    return observed.get("ok") if isinstance(observed, dict) else None
