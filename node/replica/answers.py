"""How an applied write is answered: Kudu's two external consistency modes (node.protocol).

A COMMIT_WAIT write is answered once the leader's clock minus the max clock error is past its
timestamp (KUDU-430), a CLIENT_PROPAGATED one as soon as it is applied; either way the clock has
first witnessed the timestamp the client propagated, so the write's exceeds it. One Group entry
may carry writes of both modes: each is answered in its own. Apart from `Replica`, which owns
the log and the driver, since this is the part that owns time."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import Any

from node.clock import HybridClock
from node.precise_timer import precise_timers
from node.probes import probe
from node.replica.done import Done, finish
from node.tablet.ops import Member, Result


def _timestamp(result: Any) -> int:
    """The hybrid timestamp an applied command's result carries (a batch: its ops' latest)."""
    if isinstance(result, list):
        return max((r.timestamp for r in result), default=0)
    return result.timestamp if result is not None else 0


def answer_members(dones: list[Done], results: list[Result] | None,
                   error: BaseException | None) -> None:
    """A Group's Done: each member's own result, or the entry's error for all of them."""
    if error is not None:
        for done in dones:
            finish(done, None, error)
        return
    for done, result in zip(dones, results, strict=True):
        finish(done, result, None)


@dataclass
class OpenGroup:
    """Single row ops queued to become one Group entry (`Replica.submit`): each member with its
    Done and whether it commit-waits, and the highest timestamp their clients propagated."""

    members: list[tuple[Member, Done, bool]] = field(default_factory=list)
    propagated: int = 0

    def refuse(self, error: BaseException) -> None:
        """Never proposed (node.replica.inbox): every member did not happen."""
        answer_members([done for _, done, _ in self.members], None, error)


class WriteAnswers:
    """The leader's clock as the write path uses it, and the replica's commit-wait stats."""

    def __init__(self, clock: HybridClock, stats: dict):
        self.clock, self.stats = clock, stats

    def witness(self, propagated: int) -> None:
        """Take the clock past the client's propagated timestamp, so the one assigned next
        exceeds it (a client's writes are ordered as it made them, even across tablets whose
        leaders' clocks disagree)."""
        if propagated and self.clock.update(propagated):
            probe("replica.clock.propagated_ahead")

    def single(self, done: Done, commit_wait: bool) -> Done:
        """One command's Done in its mode."""
        if commit_wait:
            return functools.partial(self.commit_waited, done, False)
        probe("replica.write.client_propagated")
        return done

    def group(self, dones: list[Done], waits: list[bool]) -> Done:
        """A Group's Done: its CLIENT_PROPAGATED members answered at once, its COMMIT_WAIT
        members once commit-waited (one wait: they share the entry's timestamp)."""
        return functools.partial(self._group_applied, dones, waits)

    def _group_applied(self, dones: list[Done], waits: list[bool], results: list[Result] | None,
                       error: BaseException | None) -> None:
        if error is not None or all(waits):
            self.commit_waited(functools.partial(answer_members, dones), False, results, error)
            return
        assert results is not None
        now = [(d, r) for d, r, w in zip(dones, results, waits, strict=True) if not w]
        later = [(d, r) for d, r, w in zip(dones, results, waits, strict=True) if w]
        answer_members([d for d, _ in now], [r for _, r in now], None)
        if later:
            probe("replica.write.group_modes_mixed")
            self.commit_waited(functools.partial(answer_members, [d for d, _ in later]), False,
                               [r for _, r in later], None)

    def commit_waited(self, done: Done, waited: bool, result: Any,
                      error: BaseException | None) -> None:
        """Kudu's COMMIT_WAIT (KUDU-430): answer once our clock's earliest possible
        now (physical now - max error) is past the result's timestamp. Any write invoked after
        we acknowledge is then given a larger timestamp by whichever leader takes it, even one
        whose clock is behind ours by up to the max error: timestamps follow real-time order."""
        ts = 0 if error is not None else _timestamp(result)
        remaining = self.clock.wait_until_after(ts) if ts else 0
        if remaining > 0:  # timers may fire early: this runs again until past
            if not waited:
                probe("replica.commit_wait.waited")
                self.stats["commit_waits"] += 1
            self.stats["commit_wait_seconds"] += remaining
            precise_timers(asyncio.get_running_loop()).call_later(
                remaining, self.commit_waited, done, True, result, None)
            return
        done(result, error)
