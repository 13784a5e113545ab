"""A replica's linearizable reads (etcd's read_only.go beside its raft.go): ReadIndex requests
shared by the reads that arrive together, the wait until the state machine has applied that
far, and in lease mode the leader lease a confirmed round grants.

The core confirms leadership (`RaftCore.read_index` answers with a ReadState once a quorum acks
a round of this term); this module owns what the driver keeps about reads in flight: which
group each ReadIndex context belongs to, when its round went out (a lease starts from the send,
never from the answer), and the lease itself. The Replica feeds it the Ready's parts that
concern reads and asks it to fail everything when leadership or the replica ends.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable
from typing import Any, Protocol

from node.consensus import Heartbeat, ProposalError, ReadState, Role
from node.errors import ReplicaError
from node.probes import probe
from node.replica.done import Done, finish

LEASE_MARGIN_S = 0.001  # timer and clock resolution: asyncio may fire a timer this much early



def leader_lease_s(withhold_ticks: int, tick_ms: int, max_clock_drift: float) -> float:
    """The one place the leader lease is computed: how long, on the leader's clock and counted
    from when it SENT a heartbeat round that a quorum acknowledged, it may serve reads locally.

    Why this is safe. Each follower that acknowledged the round received it after we sent it,
    and from then on withholds (pre-)votes from other candidates until its core has counted
    its own vote lease in ticks, at least `withhold_ticks` (RaftCore.voters_lease_ticks: the
    shortest the voters said, each set by its own flags; the tick is one constant everywhere,
    TICK_MS). Ticks are counted, not timed: the first
    one may come right after the message (worst tick phase), so on the follower's clock the
    window only lasts longer than `withhold_ticks - 1` tick periods. With every clock running
    at a rate within ±`max_clock_drift` of real time, that is at least
    (withhold_ticks - 1) * tick / (1 + drift) real seconds, while a lease of L seconds on our
    clock lasts at most L / (1 - drift) real seconds. So
        L = (withhold_ticks - 1) * tick * (1 - drift) / (1 + drift) - LEASE_MARGIN_S
    ends strictly before any acknowledging follower can vote for someone else; with us (a
    leader withholds too) they are a quorum, so no other leader is elected before it ends.
    Leadership transfer bypasses withholding: see RaftCore.lease_reads_allowed. A window of a
    single tick gives no lease at all (0): every read then confirms leadership (ReadIndex).
    """
    if withhold_ticks <= 1:
        return 0.0
    window = (withhold_ticks - 1) * tick_ms / 1000
    return max(0.0, window * (1 - max_clock_drift) / (1 + max_clock_drift) - LEASE_MARGIN_S)


class ReadGroup:
    """Reads that share one ReadIndex request, each with a Done of its own: a reader that
    gives up (its deadline) leaves the others waiting."""

    __slots__ = ("started", "waiters", "done")

    def __init__(self, started: float):
        self.started = started
        self.waiters: list[Done] = []
        self.done = False

    def join(self, done: Done) -> None:
        self.waiters.append(done)

    def resolve(self, value: Any) -> None:
        self.done = True
        for done in self.waiters:
            finish(done, value, None)

    def fail(self, err: Exception) -> None:
        self.done = True
        for done in self.waiters:
            finish(done, None, err)


class Driver(Protocol):
    """What reads need of the replica that drives them (node.replica.replica.Replica)."""

    options: Any  # ReplicaOptions: read_mode, faults, tick_ms, max_clock_drift
    core: Any  # RaftCore: read_index, term, lease_reads_allowed, voters_lease_ticks
    state: Any  # StateMachine: query, last_applied_index
    role: Role
    term: int
    leader: str | None
    _applied_waiters: list[tuple[int, Callable[[], None], Callable[[BaseException], None]]]

    def _check_serving(self) -> None: ...

    def _submit(self, fn: Callable[[], Any]) -> None: ...


class ReadOnly:
    def __init__(self, replica: Driver):
        self.r = replica
        self.groups: dict[bytes, ReadGroup] = {}  # read-index ctx -> its group
        self.open_group: ReadGroup | None = None  # the group new reads join
        self.round_sent: dict[bytes, float] = {}  # read-index ctx -> when its round was sent
        self.lease_until = 0.0  # reads are served locally until then (lease read mode) ...
        self.lease_term = -1  # ... but only as leader of this term: never in another one
        self._ctx = itertools.count(1)

    # -- reads ---------------------------------------------------------------------------------
    def submit(self, op: Any, done: Done) -> None:
        """Linearizable read: confirm leadership for this read (ReadIndex), wait until applied
        that far, then read locally: `done(result, None)`, or `done(None, ReplicaError)`. In
        lease mode a confirmation also grants a lease (see `leader_lease_s`) during which reads
        skip the round: safe only while clocks advance at rates within `max_clock_drift` of
        real time. A lease belongs to the term it was granted in, and none is served or granted
        once a leadership transfer started in the term."""
        r = self.r
        r._check_serving()
        if r.options.faults.fault_read_without_leadership:
            done(r.state.query(op), None)  # unsafe: nothing proves we still lead
            return
        loop = asyncio.get_running_loop()
        if r.options.read_mode == "lease" and self._lease_valid(loop.time()):
            done(r.state.query(op), None)
            return
        group = self.open_group or self._open(loop)
        group.join(functools.partial(self._confirmed, op, group, done))

    def serves_lease_reads(self, now: float) -> bool:
        """Whether a read arriving at `now` (this replica's monotonic clock) would be served from
        the leader lease, without a round: what the simulator holds against newer leaders."""
        return self.r.options.read_mode == "lease" and self._lease_valid(now)

    def _confirmed(self, op: Any, group: ReadGroup, done: Done, confirmed: Any,
                   error: BaseException | None) -> None:
        if error is not None:
            done(None, error)
            return
        index, term, sent = confirmed
        if sent is None:
            # No heartbeat of its own went out if a quorum confirmed it at once: the group's
            # start is earlier than any round that did, so still a safe start for a lease.
            sent = group.started
        then = functools.partial(self._applied, op, term, sent, done)
        if index > self.r.state.last_applied_index:
            self.r._applied_waiters.append((index, then, functools.partial(done, None)))
        else:
            then()

    def _applied(self, op: Any, term: int, sent: float, done: Done) -> None:
        if self.r.options.read_mode == "lease":
            self._grant_lease(term, sent)
        done(self.r.state.query(op), None)

    def _open(self, loop: asyncio.AbstractEventLoop) -> ReadGroup:
        """Reads not yet handed to the core share one ReadIndex request: the round that confirms
        it goes out after every one of them arrived, and its index is at least the commit index
        each of them saw. Under load that is one request per turn of the loop, not per read.
        The group closes when the driver hands it to the core; it resolves to (index, term,
        when its round was sent or None)."""
        ctx = next(self._ctx).to_bytes(8, "big")
        group = self.groups[ctx] = self.open_group = ReadGroup(loop.time())

        def hand() -> None:
            if self.open_group is group:
                self.open_group = None  # closed (leadership loss may have closed it already)
            try:
                self.r.core.read_index(ctx)
            except ProposalError as e:  # not leader after all: nothing would ever answer it
                self.groups.pop(ctx, None)
                probe("read.refused_not_leader")
                group.fail(ReplicaError(f"read refused: {e}", leader=self.r.leader))

        self.r._submit(hand)
        return group

    # -- leases --------------------------------------------------------------------------------
    def _lease_valid(self, now: float) -> bool:
        r = self.r
        return (self.lease_term == r.core.term == r.term and r.role == Role.LEADER
                and r.core.lease_reads_allowed() and now < self.lease_until)

    def _grant_lease(self, term: int, sent: float) -> None:
        """A quorum acknowledged a round we sent at `sent` while leading in `term`."""
        r = self.r
        if term != r.core.term or term != r.term or not r.core.lease_reads_allowed():
            probe("read.lease.not_granted")
            return  # confirmed in an earlier term, or a transfer started since: no lease
        o = r.options
        until = sent + leader_lease_s(r.core.voters_lease_ticks(), o.tick_ms, o.max_clock_drift)
        if self.lease_term != term:
            probe("read.lease.granted")
            self.lease_term, self.lease_until = term, until
        else:
            self.lease_until = max(self.lease_until, until)

    # -- what the driver tells us --------------------------------------------------------------
    def sent(self, m: Any, at: float) -> None:
        """A message left at `at`: a heartbeat carrying a read's context starts its lease."""
        if type(m) is Heartbeat and m.ctx and m.ctx in self.groups:
            self.round_sent.setdefault(m.ctx, at)

    def released(self, read_states: list[ReadState], term: int) -> None:
        """The core confirmed these reads; they hold in `term`, the one the Ready froze (the
        core releases reads only while it leads, and they die with its term)."""
        for rs in read_states:
            group = self.groups.pop(rs.ctx, None)
            sent = self.round_sent.pop(rs.ctx, None)
            if group is not None and not group.done:
                group.resolve((rs.index, term, sent))

    def leadership_changed(self, leading_same_term: bool) -> None:
        """Soft state changed: a lease never outlives the role and term it was granted in, and
        read-index requests die with leadership."""
        if not leading_same_term:
            self.lease_until, self.lease_term = 0.0, -1
        if self.r.role != Role.LEADER:
            self.open_group = None  # its reads fail just below; later ones must not join it
            for ctx, group in list(self.groups.items()):
                if not group.done:
                    probe("read.failed_leadership_lost")
                    group.fail(ReplicaError("leadership lost", leader=self.r.leader))
                    self.groups.pop(ctx)
                    self.round_sent.pop(ctx, None)

    def fail_all(self, err: Exception) -> None:
        for group in self.groups.values():
            group.fail(err)
        self.groups.clear()
        self.round_sent.clear()
        self.open_group = None

