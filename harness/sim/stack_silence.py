"""The whole-stack simulator's watch on silent leaders: a tablet leader that runs, leads and has
followers sends each of them something (an append, a heartbeat) at least once a heartbeat
interval, whatever its disk or the network does, as Kudu's leader does from its peer threads.
One silent for its followers' whole election timeout (`leader_failure_max_missed_heartbeat_
periods` heartbeat intervals) costs the tablet an election it had no reason for, and its writes
wait for it meanwhile.

What a leader sends is seen where its server queues it (ServerOptions.observe_outgoing), before
the network, so partitions, delays and dead peers do not count: only a leader whose own driver
stopped sending. A leader on a slow disk went silent three ways before this check caught each:
its driver awaited its own WAL write while another ran behind, awaited room in a full WAL
queue, and, in a Ready that handed over a committed config, awaited its own write and then the
metadata save (docs/decisions/write-behind.md).
"""

from __future__ import annotations

from node.consensus import Role


class Silences:
    def __init__(self) -> None:
        # (host, tablet) -> (the term it led, the virtual time it last sent a follower anything)
        self._spoke: dict[tuple[str, str], tuple[int, float]] = {}

    def spoke(self, host: str, tablet: str, term: int, now: float) -> None:
        self._spoke[(host, tablet)] = (term, now)

    def silent(self, host: str, tablet: str, r, now: float) -> str | None:
        """If `r`, the replica of `tablet` on `host`, leads and has sent its followers nothing
        for longer than their election timeout: what happened, in a line. A FAILED replica
        (a failed fsync, damage found) has stopped for good and says so, and a stopping one
        (on its way to a tombstone, whose write a slow disk can hold for seconds) runs nothing
        more: its followers are right to elect another."""
        if r.role is not Role.LEADER or r.failed or r.stopping or not r.core.progress:
            return None
        term, since = self._spoke.get((host, tablet), (None, 0.0))
        if term != r.term:
            return None  # not heard from in this term yet: it speaks at its first Ready
        timeout = r.core.cfg.election_timeout_ticks * r.options.tick_ms / 1000
        if now - since <= timeout:
            return None
        return (f"leader silent: tablet {tablet} on {host} (term {term}) sent its followers "
                f"nothing from {since:.3f} s to {now:.3f} s, past their {timeout:.1f} s "
                "election timeout, while it ran")
