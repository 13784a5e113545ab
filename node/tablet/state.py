"""The tablet replica's state machine: a key-value map plus the client sessions that deduplicate.

`apply` is deterministic: replicas that apply the same log end in the same state with the same
results, so everything that influences a result (data, sessions, their limits) is replicated
state and part of every snapshot. Stored values are never mutated in place (append builds a new
list), so results and snapshots can share them without copying.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import OrderedDict
from typing import Any

import msgspec

from node.entry import Entry, EntryType
from node.faults import NO_FAULTS, Faults
from node.probes import probe
from node.tablet.ops import (
    Append,
    Batch,
    Cas,
    CloseSession,
    Command,
    Group,
    Member,
    MicroOp,
    Op,
    OpenSession,
    Read,
    Rejection,
    Result,
    Txn,
    Write,
    decode_command,
    is_read_only,
)

_OK = Result(ok=True)


class Session(msgspec.Struct):
    """One client's deduplication record: results of its recent seqs (Raft thesis §6.3)."""

    session_id: int
    forgotten_below: int = 0  # results of seqs below this are gone: retries get STALE_SEQ
    results: dict[int, Result] = {}
    owner: str = ""  # the identity that opened it (Command.owner): only it may use the session

    def copy(self) -> Session:
        return Session(self.session_id, self.forgotten_below, dict(self.results), self.owner)


class Limits(msgspec.Struct, frozen=True):
    """Bounds of the dedup table. Replicated with the state: every replica must evict alike."""

    max_sessions: int = 1024  # least recently used sessions beyond this are evicted
    # An authenticated identity opening more than this evicts its own least recently used
    # session, never another's: one user cannot flood the table and evict everyone's dedup
    # records. Unauthenticated callers ("") share one pool, bounded by max_sessions alone.
    max_sessions_per_owner: int = 256
    # A client pipelining more than this loses the oldest. A Batch takes one result per op, so
    # a leader refuses a batch larger than this (`check_batch`): it would forget its own.
    max_results_per_session: int = 128

    def check_batch(self, batch: Batch) -> None:
        """Refuse, before it is proposed, a batch whose results this session bound cannot keep
        together: a retry of it would get STALE_SEQ for its first ops."""
        if len(batch.ops) > self.max_results_per_session:
            raise ValueError(f"a batch of {len(batch.ops)} ops exceeds the "
                             f"{self.max_results_per_session} results a session keeps")


class Snapshot(msgspec.Struct, frozen=True):
    tablet_id: str
    last_applied_index: int
    last_applied_term: int
    last_timestamp: int  # highest hybrid time applied: a restarted leader's clock must pass it
    limits: Limits
    data: dict[str, Any]
    sessions: list[Session]  # least recently used first


def _is_int(value: Any) -> bool:
    return type(value) is int  # not bool


class StateMachine:
    def __init__(self, tablet_id: str, limits: Limits | None = None, faults: Faults = NO_FAULTS):
        self.tablet_id = tablet_id
        self.limits = limits or Limits()
        self.skip_dedup = faults.fault_skip_dedup
        self.any_owner = faults.fault_ignore_session_owner
        self.data: dict[str, Any] = {}
        self.sessions: OrderedDict[int, Session] = OrderedDict()
        self.last_applied_index = 0
        self.last_applied_term = 0
        self.last_timestamp = 0
        # session id -> the seqs of its results, ascending: forgetting the oldest is a cut at
        # the front, and a batch's seqs (contiguous, above every kept one on a first attempt)
        # are one extend. Derived, never snapshotted: built again from the results when
        # missing. Every removal of a result goes through it.
        self._seqs: dict[int, list[int]] = {}

    def apply(self, entry: Entry, command: Command | None = None) -> Result | list[Result] | None:
        """Apply the next committed entry; a REPLICATE entry returns its command's result (a
        Batch's: one per op). `command` is the entry's payload already decoded, which a leader
        has for the entries it proposed itself: decoding it again would be wasted work."""
        if entry.index <= self.last_applied_index:
            raise ValueError(
                f"entry {entry.index} already applied (last {self.last_applied_index})"
            )
        if entry.type == EntryType.COMMIT:
            raise ValueError("COMMIT markers are WAL bookkeeping, not state-machine input")
        if entry.type != EntryType.REPLICATE:
            command = None
        elif command is None:
            command = decode_command(entry.payload)
        self.last_applied_index, self.last_applied_term = entry.index, entry.term
        if command is None:
            return None
        self.last_timestamp = max(self.last_timestamp, command.timestamp)
        return self._apply_command(command, entry.index)

    def query(self, op: Op) -> Result:
        """Serve a read-only op from the current state, outside the log."""
        if not is_read_only(op):
            raise ValueError(f"{type(op).__name__} mutates: it must go through the log")
        return self._execute(op)

    def snapshot(self) -> Snapshot:
        """A copy of the whole state. Take it between two applies; encoding and writing it can
        then run in another thread while applying goes on (stored values are never mutated)."""
        sessions = [s.copy() for s in self.sessions.values()]
        return Snapshot(
            self.tablet_id,
            self.last_applied_index,
            self.last_applied_term,
            self.last_timestamp,
            self.limits,
            dict(self.data),
            sessions,
        )

    @classmethod
    def from_snapshot(cls, snap: Snapshot, faults: Faults = NO_FAULTS) -> StateMachine:
        sm = cls(snap.tablet_id, snap.limits, faults)
        sm.data = dict(snap.data)
        sm.sessions = OrderedDict((s.session_id, s.copy()) for s in snap.sessions)
        sm.last_applied_index, sm.last_applied_term = (
            snap.last_applied_index,
            snap.last_applied_term,
        )
        sm.last_timestamp = snap.last_timestamp
        return sm

    # -- sessions ------------------------------------------------------------------------------

    def _apply_command(self, c: Command, index: int) -> Result | list[Result]:
        """A command's result; a Batch's or a Group's is one Result per op, in order."""
        op = c.op
        if is_read_only(op):
            return self._execute(op)
        if isinstance(op, OpenSession):
            self._open_session(index, c.owner)
            return Result(True, index)
        ts = c.timestamp
        ok = Result(True, timestamp=ts) if ts else _OK  # one for every ok row of the command
        if isinstance(op, Group):  # each member as the Command it would be on its own
            return self._group(op.members, ts, ok)
        return self._in_session(c.session, c.seq, c.acked_below, op, ts, ok, c.owner)

    def _group(self, members: list[Member], timestamp: int, ok: Result) -> list[Result]:
        """A Group's members, each as `_in_session` would apply it on its own (a member's op is
        a row op: Member decodes no other). The usual group (every member's session open, its
        seq above the session's kept seqs, its forgotten ones and what the group's earlier
        members kept or acknowledged) is applied in one pass: no member can have a result yet,
        so each is executed in order, and each session is trimmed once, after the group, with
        its highest acked_below. Every result, row and session record comes out as member by
        member: trimming keeps the newest results above the highest acknowledgement either
        way (tests/test_tablet_group.py holds the two to each other)."""
        sessions, kept = self.sessions, self._seqs
        # session id -> [its Session, its kept seqs, the seq a next member must exceed, the
        # highest acked_below of its members]
        found: dict[int, list] = {}
        for m in members:
            f = found.get(m.session)
            if f is None:
                session = sessions.get(m.session)
                if session is None:
                    break
                seqs = kept.get(m.session)
                if seqs is None:
                    seqs = self._kept_seqs(m.session, session)
                f = found[m.session] = [session, seqs, max(seqs[-1] if seqs else 0,
                                                           session.forgotten_below - 1), 0]
            if m.seq <= f[2] or (f[0].owner != m.owner and not self.any_owner):
                break
            f[2] = max(m.seq, m.acked_below - 1)
            if m.acked_below > f[3]:
                f[3] = m.acked_below
        else:
            return self._fresh_group(members, found, timestamp, ok)
        probe("tablet.group.member_by_member")
        return [self._in_session(m.session, m.seq, m.acked_below, m.op, timestamp, ok, m.owner)
                for m in members]

    def _fresh_group(self, members: list[Member], found: dict[int, list], timestamp: int,
                     ok: Result) -> list[Result]:
        """`_group`'s one pass, for members it found to have no result yet (`found`: its
        record of each session)."""
        execute = self._execute
        results = [execute(m.op, ok, timestamp) for m in members]
        move_to_end = self.sessions.move_to_end
        for m, result in zip(members, results, strict=True):
            f = found[m.session]
            move_to_end(m.session)  # the LRU order member by member would leave
            f[0].results[m.seq] = result
            f[1].append(m.seq)
        for session, seqs, _, acked_below in found.values():
            self._forget(session, seqs, acked_below)
        return results

    def _in_session(self, session_id: int, seq: int, acked_below: int, op: Op,
                    timestamp: int, ok: Result, owner: str = "") -> Result | list[Result]:
        """A session's mutation (a row op, a Batch, or CloseSession) as `seq`: its result, and
        the session's kept results trimmed to what the client has not acknowledged. `ok` is
        the result of an ok write at `timestamp` (immutable, so shared). Another identity's
        op (`owner`) is refused and leaves the session untouched: no result kept at its seq,
        nothing forgotten."""
        session = self.sessions.get(session_id)
        if session is None or (session.owner != owner and not self.any_owner):
            probe("tablet.session.no_session") if session is None else probe(
                "tablet.session.not_owner")
            rejection = (Result(False, error=Rejection.NO_SESSION, detail=f"no session {session_id}")
                         if session is None else
                         Result(False, error=Rejection.NOT_OWNER,
                                detail=f"session {session_id} belongs to another identity"))
            return [rejection] * len(op.ops) if isinstance(op, Batch) else rejection
        if isinstance(op, CloseSession):
            del self.sessions[session_id]
            self._seqs.pop(session_id, None)
            return _OK
        self.sessions.move_to_end(session_id)
        seqs = self._seqs.get(session_id)
        if seqs is None:
            seqs = self._kept_seqs(session_id, session)
        if isinstance(op, Batch):
            result = self._batch(session, seqs, seq, op.ops, timestamp, ok)
        else:
            result = self._once(session, seqs, seq, op, timestamp, ok)
        self._forget(session, seqs, acked_below)
        return result

    def _kept_seqs(self, session_id: int, session: Session) -> list[int]:
        """The session's seqs with a result, sorted: built from its results the first time (after
        a restart or a snapshot), then kept in step with them."""
        seqs = self._seqs[session_id] = sorted(session.results)
        return seqs

    def _batch(self, session: Session, seqs: list[int], first: int, rows: list[Op],
               timestamp: int, ok: Result) -> list[Result]:
        """Op i of the batch as seq first + i, each exactly as `_once` would apply it. Kept
        results are trimmed once, after the whole batch (Limits.check_batch bounds it)."""
        above = not seqs or seqs[-1] < first
        if not above or (first < session.forgotten_below and not self.skip_dedup):
            probe("tablet.batch.row_by_row")
            # A retry, or seqs out of order: some may have results already. Row by row.
            return [self._once(session, seqs, first + i, row, timestamp, ok)
                    for i, row in enumerate(rows)]
        # The usual first attempt: every seq of it is above the kept ones (so none has a
        # result) and none was forgotten. One pass, no lookups.
        execute = self._execute
        results = [execute(row, ok, timestamp) for row in rows]
        seq_range = range(first, first + len(rows))
        session.results.update(zip(seq_range, results, strict=True))
        seqs.extend(seq_range)
        return results

    def _once(self, session: Session, seqs: list[int], seq: int, op: Op, timestamp: int,
              ok: Result) -> Result:
        """Apply `op` as `seq` of `session` unless that seq was applied: then its first result
        (or STALE_SEQ if that result is forgotten). Applied ops keep their result at `seq`."""
        result = None if self.skip_dedup else session.results.get(seq)
        if result is not None:
            probe("tablet.dedup.retry_answered")
            return result
        if seq < session.forgotten_below and not self.skip_dedup:
            probe("tablet.session.stale_seq")
            return Result(
                False,
                error=Rejection.STALE_SEQ,
                detail=f"seq {seq} < {session.forgotten_below}: its result is forgotten",
            )
        result = self._execute(op, ok, timestamp)
        session.results[seq] = result
        if not seqs or seq > seqs[-1]:
            seqs.append(seq)
        else:
            insort(seqs, seq)
        return result

    def _open_session(self, session_id: int, owner: str = "") -> None:
        if owner and not self.any_owner:  # its own least recently used first, past its bound
            own = [s.session_id for s in self.sessions.values() if s.owner == owner]
            for evicted in own[: max(0, len(own) - self.limits.max_sessions_per_owner + 1)]:
                probe("tablet.session.evicted_own_oldest")
                del self.sessions[evicted]
                self._seqs.pop(evicted, None)
        self.sessions[session_id] = Session(session_id, owner=owner)
        if len(self.sessions) > self.limits.max_sessions:
            probe("tablet.session.evicted_lru")
            evicted, _ = self.sessions.popitem(last=False)
            self._seqs.pop(evicted, None)

    def _forget(self, session: Session, seqs: list[int], acked_below: int) -> None:
        """Drop the results the client acknowledged, then the oldest beyond the bound."""
        results = session.results
        if acked_below > session.forgotten_below:
            session.forgotten_below = acked_below
            cut = bisect_left(seqs, acked_below)
            for seq in seqs[:cut]:
                results.pop(seq, None)
            del seqs[:cut]
        bound = self.limits.max_results_per_session
        while len(results) > bound:
            probe("tablet.session.results_over_bound_forgotten")
            excess = len(results) - bound
            oldest = seqs[:excess]
            if not oldest:  # every result has its seq here: losing one is a bug, never data
                raise RuntimeError(f"session {session.session_id}: results without seqs")
            del seqs[:excess]
            for seq in oldest:
                if results.pop(seq, None) is not None:
                    session.forgotten_below = max(session.forgotten_below, seq + 1)

    # -- operations ----------------------------------------------------------------------------

    def _execute(self, op: Op, ok: Result = _OK, timestamp: int = 0) -> Result:
        """`op`'s result on the current data; an ok mutation answers `ok` (its command's
        stamped result) and a transaction carries `timestamp`."""
        kind = type(op)
        if kind is Write:  # the common op first, by type: a match tries each case in turn
            self.data[op.key] = op.value
            return ok
        if kind is Read:
            return Result(True, self.data.get(op.key))
        if kind is Cas:
            key, current = op.key, self.data.get(op.key)
            if current != op.expected:
                return Result(False, current, Rejection.CAS_MISMATCH, f"{key!r} is {current!r}")
            self.data[key] = op.new
            return ok
        if kind is Append:
            key, current = op.key, self.data.get(op.key)
            if current is not None and not isinstance(current, list):
                return Result(False, 0, Rejection.WRONG_TYPE, f"{key!r} holds no list")
            self.data[key] = [*(current or ()), op.element]
            return ok
        if kind is Txn:
            return self._transaction(op.ops, timestamp)
        raise TypeError(f"not a state-machine op: {op!r}")

    def _transaction(self, micro_ops: list[MicroOp], timestamp: int = 0) -> Result:
        """All micro-ops or none: writes go to an overlay that is merged only at the end."""
        overlay: dict[str, Any] = {}
        completed = []
        for i, m in enumerate(micro_ops):
            current = overlay[m.key] if m.key in overlay else self.data.get(m.key)
            if m.f == "r":
                completed.append([m.f, m.key, current])
                continue
            if m.f == "w":
                overlay[m.key] = m.value
            elif m.f == "append":
                if current is not None and not isinstance(current, list):
                    return Result(
                        False, i, Rejection.WRONG_TYPE, f"micro-op {i}: {m.key!r} holds no list"
                    )
                overlay[m.key] = [*(current or ()), m.value]
            else:  # add, require_ge: integer arithmetic, a missing key counts as 0
                current = 0 if current is None else current
                if not (_is_int(current) and _is_int(m.value)):
                    return Result(
                        False, i, Rejection.WRONG_TYPE, f"micro-op {i}: {m.f} needs integers"
                    )
                if m.f == "add":
                    overlay[m.key] = current + m.value
                elif current < m.value:
                    return Result(
                        False,
                        i,
                        Rejection.PRECONDITION_FAILED,
                        f"micro-op {i}: {m.key!r} is {current} < {m.value}",
                    )
            completed.append([m.f, m.key, m.value])
        self.data.update(overlay)
        return Result(True, completed, timestamp=timestamp)
