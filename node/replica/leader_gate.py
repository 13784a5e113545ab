"""Where a new leader's first requests wait, and what wakes them.

A leader takes writes and reads once it has applied an entry of its own term (Raft's no-op):
until then entries of earlier terms may sit in its log unapplied, and its clock has not
witnessed their timestamps. Requests that arrive before then wait at this gate. Kudu answers
them at once (LEADER_NOT_READY) and its client backs off; waiting here spares that round trip
in the common case, where the no-op commits within a heartbeat.

A waiter is owed an answer as soon as one is known, not only when the leader becomes ready:
when it stops leading (a higher term, check-quorum), stops or fails, every waiter wakes and
its caller's check refuses it (NOT_LEADER with a hint, or why). Left waiting, such a request
ran into its RPC deadline and was reported as maybe applied, though it was never proposed.
`waiting` counts the requests at the gate, so the whole-stack simulator can fail a seed on one
left there by a replica that no longer leads (harness.sim.stack_owed)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from node.probes import probe


class LeaderGate:
    def __init__(self) -> None:
        self.term = -1  # the term in which we, as leader, applied our own entry
        self._open = asyncio.Event()
        self.waiting = 0  # requests in wait() now

    def is_open(self) -> bool:
        return self._open.is_set()

    def opened(self, term: int) -> None:
        """An entry of our own term `term` was applied while leading in it."""
        self.term = term
        self._open.set()

    def lost(self) -> None:
        """Not leading (or leading in a newer term, not ready yet), stopping or failed: close
        the gate, and wake whoever waits on it so their check answers them now."""
        if self._open.is_set():
            self._open.clear()  # no one waits on an open gate
            return
        waiting, self._open = self._open, asyncio.Event()
        waiting.set()

    async def wait(self, check: Callable[[], None]) -> None:
        """Until the gate opens; `check` raises (refusing the caller) whenever the replica can
        no longer serve, before the wait and at each wake."""
        check()
        self.waiting += 1
        try:
            while not self._open.is_set():
                await self._open.wait()
                try:
                    check()
                except Exception:
                    probe("replica.leader_gate.waiter_refused")
                    raise
        finally:
            self.waiting -= 1
