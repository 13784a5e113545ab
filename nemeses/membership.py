"""Membership change, like Jepsen's membership nemesis: remove one member of a replication
group, then add it back at the heal. The nemesis knows no system's membership API: a system
that offers "membership" (harness.deployment.Deployment.offers) gives, through `membership()`, the
`Members` it may change. Tessera removes a replica from one tablet's Raft config and adds it
back (the master tombstones it, and the leader copies the tablet onto the tombstone); etcd
removes a member from its cluster, wipes it, and adds a fresh one back (`etcdctl member remove`,
`member add`, a start with `--initial-cluster-state=existing`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from nemeses import observe
from nemeses.base import Nemesis, held_off
from nemeses.redundancy import Redundancy
from nemeses.registry import Package, register

# (group, member id, host): one member of one replication group, as a system names it
Candidate = tuple[str, str, str]


class Refused(Exception):
    """The system declined a removal as unsafe now (Kudu's SafeToEvict: too few live voters
    would remain), and did nothing. The fault is skipped, not failed: refusing is right."""


class Stranded(Exception):
    """The group can elect no leader until an operator steps in (most of its voters are
    FAILED): a change waiting on it would only spend the run's budget, so it gives up within
    seconds.
    The step fails, and says why; the run's verdict is unknown, as its convergence check also
    finds, never valid."""


class Members(Protocol):
    why_none: str  # when the last `removable` found none: why, group by group

    def removable(self) -> list[Candidate]:
        """The members whose removal alone costs no quorum now, sorted: a settled config,
        enough voters, every other member running."""

    def remove(self, member: Candidate, timeout: float) -> dict:
        """Remove it, retrying for up to `timeout` seconds; what was done. Raises Refused when
        the system declines it as unsafe, Stranded when the group can no longer elect,
        anything else when the removal failed."""

    def add(self, member: Candidate, timeout: float) -> dict:
        """Add it back, retrying for up to `timeout` seconds; one that is a member already is
        done. Raises after the timeout."""

    def present(self, member: Candidate) -> bool | None:
        """Whether the group's config, read afresh, still holds the member (None: nobody
        answered): how a removal is checked after it."""


@dataclass
class Membership(Nemesis):
    name: str = "membership"
    db: object = None  # harness.deployment.Deployment offering "membership"
    # per change, retrying while another change is pending or its leader moves. A removal is
    # waited on for half a minute: one that cannot finish in time leaves the start failed and
    # the run unknown, and a removal proposed while kills and partitions hold the majority
    # commits only after they heal (a nemesis interval or two). An add is given up sooner: one
    # that cannot finish at a stop is tried again at the heal. Either gives up at once on a
    # group that can no longer elect (Stranded): nothing the run does would let it finish.
    remove_timeout: float = 30.0
    add_timeout: float = 15.0
    # How long one try of a start looks for a removal the system takes; then it is held off
    # and the schedule tries again up to the package's next start (fires_late). Zero by
    # default: one look per try.
    # The schedule holds the other packages' next starts back only once a try has answered
    # held off (quiet), so a try of 2 s or more (looks on a loaded cluster take a while) kept
    # them coming through most of a short matrix cell's window, and the start never fired.
    patience: float = 0.0
    read_back_s: float = 10.0  # how long a removal's read-back waits for the config to show it
    # Held off through its whole window (ten packages overlapping in a short cell), it is tried
    # up to its next start: a removal added back at once is still a removal, a tombstone and a
    # copy, where a start never fired is nothing.
    fires_late: bool = True
    redundancy: Redundancy = field(default_factory=Redundancy)  # shared by the run's faults
    _removed: list[Candidate] = field(default_factory=list)

    def start(self, choice: dict) -> dict:
        """Remove one member among those `removable` finds, looking for up to `patience`
        (once, by default): other faults may be holding every group, and a system may refuse a
        removal that is unsafe only for now (a voter restarted a moment ago has not answered
        its leader yet); after `patience` it is held off (nemeses.base.held_off) and tried
        again up to its next start. Each look is made in the faults' one turn to take a
        replica, and the group it picks is reserved before the turn is let go
        (nemeses.redundancy): no damage fault takes a replica of it until the member is back.
        The plan's `pick` chooses among the candidates found then (a rule on live state)."""
        members = self.db.membership()
        deadline = time.monotonic() + self.patience
        while True:
            with self.redundancy.taking(self.name) as other:
                picked = (self._pick(members, choice["pick"]) if other is None else
                          f"{other} is taking a replica from a group now")
            if not isinstance(picked, str):
                self.settled()  # its group is reserved: the others' starts may go on
                outcome = self._remove(members, picked)
                if isinstance(outcome, dict):
                    return outcome
            else:
                outcome = picked
            if time.monotonic() > deadline:
                # Other faults' holds (a kill and a pause touch every group of three on five
                # hosts) or a voter just restarted: held off, so the schedule tries again
                # while the plan leaves this start time, and holds the other packages' next
                # starts back meanwhile (quiet): with ten packages overlapping at random, a
                # moment when every member of some group is up seldom comes by itself.
                return held_off(outcome, quiet=True)
            time.sleep(1.0)

    def _pick(self, members: Members, pick: int) -> Candidate | str:
        """One look: the member to remove, its group reserved, or why there is none. A member
        whose host another fault holds killed or paused is not this fault's, nor one of a
        group another fault took or is taking a replica from."""
        found = members.removable()
        spared = self.redundancy.spared_for(self.name)
        candidates = [c for c in found if not self.db.held_by(c[2]) and c[0] not in spared]
        if not candidates:
            if not found:
                return f"no group whose members can spare one now ({members.why_none})"
            return (f"no group whose members can spare one now (the hosts of "
                    f"{', '.join(sorted({c[2] for c in found}))} are held by other faults, or "
                    f"their groups lost a replica to one)")
        member = candidates[pick % len(candidates)]
        self.redundancy.reserve(member[0], self.name)
        return member

    def _remove(self, members: Members, member: Candidate) -> dict | str:
        """The removal of the member picked (its group reserved until it is back): what was
        done, or why nothing was (its group no longer reserved then)."""
        self._removed.append(member)  # first: a removal that raised may still have
        self.active = True            # applied, and adding back a member is done at once
        try:
            done = members.remove(member, self.remove_timeout)
        except Refused as e:
            self._removed.pop()
            self.active = bool(self._removed)
            self.redundancy.release(member[0], self.name)
            return f"the system refused to remove {member[2]}'s member: {e}"
        still = self._read_back(members, member)
        seen = observe.observation(None if still is None else not still, in_config=still)
        return {"removed": member[2], "group": member[0], **done, "observed": seen}

    def _read_back(self, members: Members, member: Candidate) -> bool | None:
        """Whether the config still holds the removed member, asked until someone answers
        that it does not (a leader change may follow the removal, and a replica that has not
        applied the committed change yet still lists it) for up to `read_back_s`; the
        last answer, None if none came."""
        deadline = time.monotonic() + self.read_back_s
        while (still := members.present(member)) is not False and time.monotonic() < deadline:
            time.sleep(0.5)
        return still

    def stop(self) -> dict:
        members, added = self.db.membership(), []
        while self._removed:
            member = self._removed[0]
            done = members.add(member, self.add_timeout)  # raises after it: heal tries again
            self._removed.pop(0)
            if all(m[0] != member[0] for m in self._removed):
                self.redundancy.release(member[0], self.name)
            added.append({"added": member[2], "group": member[0], **done})
        self.active = False
        return {"added": added}


register(Package("membership", heal_rank=60, needs=frozenset({"membership"}),
                 draw=lambda rng, hosts: {"pick": rng.randrange(1 << 16)},
                 build=lambda ctx: Membership(db=ctx.db, redundancy=ctx.redundancy)))
