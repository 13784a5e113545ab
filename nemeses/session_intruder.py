"""Another user against the workloads' client sessions (README "Security": the threat model
includes a client holding a user's credentials). The system under test offers "sessions": as a
second user, it writes into sessions it did not open (each a full window of seqs from 1, so an
owner's coming writes would be answered from the intruder's results and never applied), closes
them, and floods the session table with its own. Each start also sends a write whose
propagated timestamp is two hours ahead of the clocks, which would push a server's hybrid clock
past every other's if it were taken.

Nothing of this may land: each op in another identity's session is refused, and a flood evicts
only the intruder's own sessions, and the far-ahead timestamp is refused. The honest clients' histories are checked as usual, and an op
applied in a session the intruder did not open is itself an error (the logs checker's
`session-intrusion`), so the fault shows the engine's answer even where no honest op happened
to use a poisoned seq. Each start runs one step, drawn with poison twice as likely as close or
flood; one that no server answered is held off and tried again (nemeses.schedule), so it is an
attack or a skip with its reason, never a start that did nothing. Nothing needs undoing: stop
and heal do nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from nemeses import observe
from nemeses.base import Context, Nemesis, held_off
from nemeses.registry import Package, register

STEPS = ("poison", "poison", "close", "flood")  # drawn from: poison is the one that hurts
SESSIONS = 64  # session ids 1..SESSIONS on each tablet: the workloads' are among the first
FLOOD = 300  # OpenSessions per tablet: past the per-identity bound (node.tablet.state.Limits)


def draw(rng: random.Random, hosts: list[str]) -> dict:
    return {"step": rng.choice(STEPS)}


@dataclass
class SessionIntruder(Nemesis):
    ctx: Context = None
    name: str = "session-intruder"

    def start(self, choice: dict) -> dict:
        if not getattr(self.ctx.db, "secure", False):
            return {"skipped": "the daemons run without authentication: every caller is one "
                               "identity, and sessions have no owner to defend"}
        groups = sorted(self.ctx.tablets.values())
        count = FLOOD if choice["step"] == "flood" else SESSIONS
        done = {"step": choice["step"], "tablets": len(groups),
                **self.ctx.db.intrude_sessions(choice["step"], groups, count)}
        if not done["answered"]:
            # No server answered (another fault has every tablet server down, or their
            # leaders moving): no attack was made, so the schedule tries again while the plan
            # leaves this start time. A power loss of every tablet server at the same instant
            # once left a fifth of a matrix's intruder starts doing nothing, counted unchecked.
            return held_off(f"no tablet server answered the intruder's {done['calls']} calls "
                            "(every one down, or its leaders moving)", **done)
        # in force: the servers answered the intruder (the attack was made, whatever they
        # answered; the checkers judge what they answered)
        done["observed"] = observe.observation(True, answered=done["answered"],
                                               calls=done["calls"])
        return done

    def stop(self) -> dict:
        return {}

    def heal(self) -> dict:
        return {}


register(Package("session-intruder", heal_rank=90, draw=draw, min_hosts=1,
                 needs=frozenset({"sessions"}), build=lambda ctx: SessionIntruder(ctx=ctx)))
