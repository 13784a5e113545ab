"""One fault at a time takes a replica out of the replication groups.

Faults fire in threads of their own. Three of them take a replica away from a group: the
membership fault removes a voter, the disk fault leaves one FAILED for the rest of the run
(or until the system's repair), and the failing-disk fault fails every replica on its host
until its restart. Each looks first that the group can spare one (three voters, every member
running, no change in flight), but a look and the act that follows are seconds apart over SSH
and RPC. Two faults that both looked before either acted each took one replica of the same
group of three: a removal committed while the disk fault had its host down, the damaged
replica came back FAILED, and the tablet kept one live voter of two. It could elect no
leader until an operator stepped in, and the membership fault's add-back gave up on it
(Stranded), as a nightly run showed: one fault undid what the other's check had promised.

So a fault looks, and acts or reserves, while it holds the one `taking` turn. A fault that
finds the turn held is held off (nemeses.base.held_off) and tried again, as one that finds its
daemon held is. The disk fault damages in its turn and lets it go once the damaged group is
recorded (`let_go`), before its restart; the failing-disk fault keeps it through its act (its
replicas run again only at its restart: seconds). The
membership fault only looks in it and reserves the group it picked (`reserved`): its removal,
which may wait up to half a minute for a leader under other faults, runs after the turn, and
the group stays reserved until the member is added back. Holding the turn through the removal
kept the disk fault held off for its whole window in a short run. What a damage takes for good
is written in `lost`. A file lost under a running daemon fails its replica only when the
daemon next reads it, and no look at the group sees it before. Every fault leaves the lost
and reserved groups of the others alone (`spared_for`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Redundancy:
    """Shared by a run's faults (nemeses.base.Context): whose turn it is, and what was lost."""

    lost: dict[str, str] = field(default_factory=dict)  # group -> the fault that damaged it
    # group -> the fault that picked a replica of it in its turn and is taking it now (a
    # removal, slow under other faults, runs outside the turn with its group reserved)
    reserved: dict[str, str] = field(default_factory=dict)
    holder: str | None = None  # the fault taking a replica now, for the held-off message
    _turn: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @contextmanager
    def taking(self, by: str) -> Iterator[str | None]:
        """Look and act inside: yields None when it is `by`'s turn, or the fault whose turn it
        is (then nothing is held, and `by` must do nothing). Never blocks: a removal holds the
        turn for up to half a minute, and a start that waited that long would fire outside
        its window."""
        if not self._turn.acquire(blocking=False):
            yield self.holder or "another fault"
            return
        self.holder = by
        try:
            yield None
        finally:
            self.let_go(by)

    def let_go(self, by: str) -> None:
        """End `by`'s turn before its block ends, once what it took is recorded (`lose`,
        `reserve`): the rest of its act (a restart, reading the system's answer, seconds
        more) needs no turn, and holding it kept the other faults off for most of a short
        matrix cell. Nothing if the turn is not `by`'s."""
        if self.holder == by:
            self.holder = None
            self._turn.release()

    def lose(self, group: str, by: str) -> None:
        """`by` damaged a replica of `group` for good: no other fault takes one from it."""
        self.lost[group] = by

    def mend(self, group: str, by: str) -> None:
        """The system repaired what `by` damaged in `group` (etcd replaces the member)."""
        if self.lost.get(group) == by:
            del self.lost[group]

    def reserve(self, group: str, by: str) -> None:
        """`by` picked a replica of `group` in its turn and takes it after the turn: until
        `release`, no other fault takes one from the group."""
        self.reserved[group] = by

    def release(self, group: str, by: str) -> None:
        if self.reserved.get(group) == by:
            del self.reserved[group]

    def spared_for(self, by: str) -> set[str]:
        """The groups another fault damaged for good or is taking a replica from: `by` must
        leave them alone."""
        return ({g for g, who in self.lost.items() if who != by}
                | {g for g, who in self.reserved.items() if who != by})
