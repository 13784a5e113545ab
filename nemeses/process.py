"""Process faults: crash (SIGKILL, restarted on stop) and pause (SIGSTOP, SIGCONT on stop).

A target host's daemon that another package holds (killed or paused: `Deployment.held`) is left
alone and recorded under "held", so two faults never undo each other: a kill's stop must not
restart what a pause holds stopped. Each start is checked on the hosts right after it: a killed
daemon's process must be gone, a paused one's stopped (state T in /proc/<pid>/stat).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from nemeses import observe
from nemeses.base import Context, Nemesis, draw_target, held_off
from nemeses.registry import Package, register

DEAD = ("gone", "Z", "X")  # no process, or a zombie nobody reaped yet: not running
STOPPED = ("T", "t")
SETTLE_S = 3.0  # how long a signalled process may take to act on it (see _ProcessFault._observe)


def draw_process(rng: random.Random, hosts: list[str], share: str = "minority") -> dict:
    """A host share, or a primary: the leader master's host or a tablet leader's."""
    return {"target": draw_target(rng, hosts, ("one", share, "leader-master", "tablet-leader"))}


@dataclass
class _ProcessFault(Nemesis):
    """Signal the daemons of the target hosts; undo it on stop."""

    ctx: Context = None
    daemon: str | None = None  # None: every daemon of the host
    _hit: list[str] = field(default_factory=list)
    # host -> the daemons it ran when signalled: what the check after the start reads. Not the
    # host's daemons at the check: master-membership may add a master there meanwhile, whose
    # pid file is not written yet, and a kill that hit everything read as not in force.
    _signalled: dict[str, list[str]] = field(default_factory=dict)
    # set by each fault: what to do, and the words its history values use
    do, done_word, undone_word, signal = "", "", "", ""
    expect: tuple[str, ...] = ()  # the /proc state letters a hit daemon must show
    at_once: bool = False  # signal every target host in parallel (a coordinated crash)

    def start(self, choice: dict) -> dict:
        rule, db = choice["target"], self.ctx.db
        if rule["rule"] == "hosts":
            targets, how = self.ctx.resolve(rule), {}
        else:
            host, resolved = self.ctx.resolve_leader(rule)
            targets, how = [host], {"resolved": resolved}  # "fallback": no leader was known
        idle = [h for h in targets if not self._runs_on(h)]
        held = {h: holder for h in targets
                if h not in idle and (holder := db.claim(h, self.daemon, self.name))}
        self._hit = [h for h in targets if h not in held and h not in idle]
        if not self._hit:
            why = {**({"held by another fault": held} if held else {}),
                   **({f"running no {self.daemon or 'daemon'}": idle} if idle else {})}
            skip = f"no target to {self.do}: {why}"
            return held_off(skip) if held else {"skipped": skip}
        self._signalled = {h: [self.daemon] if self.daemon else list(db.daemons(h))
                           for h in self._hit}
        if self.at_once:
            observe.each(self._hit, lambda h: getattr(db, self.do)(h, self.daemon))
        else:
            for h in self._hit:
                getattr(db, self.do)(h, self.daemon)
        self.active = True
        return {self.done_word: self._hit, "targets": rule.get("spec", rule["rule"]), **how,
                "signal": self.signal, **({"held": held} if held else {}),
                **({"idle": idle} if idle else {}), "observed": self._observe()}

    def _runs_on(self, host: str) -> bool:
        """Whether `host` runs what this fault signals (its daemon, or any): a host the system
        does not run on (MariaDB's single server leaves the others idle, a removed etcd member)
        has no process to hit, and an empty list of process states must not read as a hit."""
        daemons = self.ctx.db.daemons(host)
        return bool(daemons) if self.daemon is None else self.daemon in daemons

    def _observe(self, settle_s: float = SETTLE_S, poll_s: float = 0.2) -> dict:
        """Each hit daemon's process state, read from /proc on its host. `kill` returns once
        the signal is queued; a process waiting for a CPU acts on it only when it next runs,
        so on a loaded host the first read can still say R. A host whose state is wrong is
        read again every `poll_s` for up to `settle_s` before the start counts as not in
        force."""
        import time

        def wrong(seen: dict) -> dict:
            return {h: st for h, st in seen.items()
                    if any(state not in self.expect for state in st.values())}

        def states(h: str) -> dict:
            """The signalled daemons' states, less any with no pid file (it had no process to
            signal: a master that master-membership is adding to the host), unless that
            leaves none (then the fault hit nothing)."""
            seen = {d: st for d, st in self.ctx.db.process_states(h, self.daemon).items()
                    if d in self._signalled.get(h, (d,))}
            had = {d: st for d, st in seen.items() if st != "no-pid-file"}
            return had or seen

        seen = observe.each(self._hit, states)
        until = time.monotonic() + settle_s
        while (bad := wrong(seen)) and time.monotonic() < until:
            time.sleep(poll_s)
            seen |= observe.each(list(bad), states)
        return observe.observation(not wrong(seen), states=seen)

    def stop(self) -> dict:
        deferred = {}
        for h in self._hit:
            if left := self._undo(h):
                deferred[h] = left
        undone, self._hit, self.active = self._hit, [], False
        return {self.undone_word: undone, **({"deferred": deferred} if deferred else {})}

    def _undo(self, host: str) -> dict[str, str]:
        """Undo the fault on `host`, then let its daemons go (never the other way round: see
        Deployment.give_back); the daemons another package held, which were left alone."""
        raise NotImplementedError


@dataclass
class Kill(_ProcessFault):
    name: str = "kill"
    do, done_word, undone_word, signal = "kill", "killed", "restarted", "SIGKILL"
    expect: tuple[str, ...] = DEAD

    def _undo(self, host: str) -> dict[str, str]:
        return self.ctx.db.give_back(host, self.daemon, self.name)


@dataclass
class Pause(_ProcessFault):
    name: str = "pause"
    do, done_word, undone_word, signal = "pause", "paused", "resumed", "SIGSTOP"
    expect: tuple[str, ...] = STOPPED

    def _undo(self, host: str) -> dict[str, str]:
        try:  # resumed while still held: a pause claiming it in between would be undone
            self.ctx.db.resume(host, self.daemon)
        finally:
            self.ctx.db.release(host, self.daemon, self.name)
        return {}


register(Package("pause", heal_rank=40, draw=draw_process, needs=frozenset({"leaders"}),
                 build=lambda ctx: Pause(ctx=ctx)))
register(Package("kill", heal_rank=50, draw=draw_process, needs=frozenset({"leaders"}),
                 build=lambda ctx: Kill(ctx=ctx)))
