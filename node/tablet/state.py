"""The tablet replica's state machine: a key-value map plus the client sessions that deduplicate.

`apply` is deterministic: replicas that apply the same log end in the same state with the same
results, so everything that influences a result (data, sessions, their limits) is replicated
state and part of every snapshot. Stored values are never mutated in place (append builds a new
list), so results and snapshots can share them without copying.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Any

import msgspec

from node.entry import Entry, EntryType
from node.faults import NO_FAULTS, Faults
from node.tablet.ops import (
    Append,
    Batch,
    Cas,
    CloseSession,
    Command,
    Group,
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

    def copy(self) -> Session:
        return Session(self.session_id, self.forgotten_below, dict(self.results))


class Limits(msgspec.Struct, frozen=True):
    """Bounds of the dedup table. Replicated with the state: every replica must evict alike."""

    max_sessions: int = 1024  # least recently used sessions beyond this are evicted
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
        self.data: dict[str, Any] = {}
        self.sessions: OrderedDict[int, Session] = OrderedDict()
        self.last_applied_index = 0
        self.last_applied_term = 0
        self.last_timestamp = 0
        # session id -> heap of the seqs in its results: forgetting the oldest is O(log n) per
        # op, not a scan of up to max_results_per_session. Derived, never snapshotted: built
        # again from the results when missing. Every removal of a result goes through it.
        self._seq_heaps: dict[int, list[int]] = {}

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
            self._open_session(index)
            return Result(True, index)
        if isinstance(op, Group):  # each member as the Command it would be on its own
            return [self._in_session(m.session, m.seq, m.acked_below, m.op, c.timestamp)
                    for m in op.members]
        return self._in_session(c.session, c.seq, c.acked_below, op, c.timestamp)

    def _in_session(self, session_id: int, seq: int, acked_below: int, op: Op,
                    timestamp: int) -> Result | list[Result]:
        """A session's mutation (a row op, a Batch, or CloseSession) as `seq`: its result, and
        the session's kept results trimmed to what the client has not acknowledged."""
        session = self.sessions.get(session_id)
        if session is None:
            rejection = Result(False, error=Rejection.NO_SESSION, detail=f"no session {session_id}")
            return [rejection] * len(op.ops) if isinstance(op, Batch) else rejection
        if isinstance(op, CloseSession):
            del self.sessions[session_id]
            self._seq_heaps.pop(session_id, None)
            return _OK
        self.sessions.move_to_end(session_id)
        if isinstance(op, Batch):
            # Each op through the same per-seq path as a single op: op i is seq + i. Kept
            # results are trimmed once, after the whole batch (Limits.check_batch bounds it).
            result = [self._once(session, seq + i, row, timestamp)
                      for i, row in enumerate(op.ops)]
        else:
            result = self._once(session, seq, op, timestamp)
        self._forget(session, acked_below)
        return result

    def _once(self, session: Session, seq: int, op: Op, timestamp: int) -> Result:
        """Apply `op` as `seq` of `session` unless that seq was applied: then its first result
        (or STALE_SEQ if that result is forgotten). Applied ops keep their result at `seq`."""
        result = None if self.skip_dedup else session.results.get(seq)
        if result is not None:
            return result
        if seq < session.forgotten_below and not self.skip_dedup:
            return Result(
                False,
                error=Rejection.STALE_SEQ,
                detail=f"seq {seq} < {session.forgotten_below}: its result is forgotten",
            )
        result = self._execute(op)
        if result.ok and timestamp:
            result = msgspec.structs.replace(result, timestamp=timestamp)
        session.results[seq] = result
        heap = self._seq_heaps.get(session.session_id)
        if heap is not None:
            heapq.heappush(heap, seq)
        return result

    def _open_session(self, session_id: int) -> None:
        self.sessions[session_id] = Session(session_id)
        if len(self.sessions) > self.limits.max_sessions:
            evicted, _ = self.sessions.popitem(last=False)
            self._seq_heaps.pop(evicted, None)

    def _forget(self, session: Session, acked_below: int) -> None:
        results = session.results
        heap = self._seq_heaps.get(session.session_id)
        if heap is None:
            heap = self._seq_heaps[session.session_id] = list(results)
            heapq.heapify(heap)
        if acked_below > session.forgotten_below:
            session.forgotten_below = acked_below
            while heap and heap[0] < acked_below:
                results.pop(heapq.heappop(heap), None)
        while len(results) > self.limits.max_results_per_session:
            oldest = heapq.heappop(heap)
            if results.pop(oldest, None) is not None:
                session.forgotten_below = max(session.forgotten_below, oldest + 1)

    # -- operations ----------------------------------------------------------------------------

    def _execute(self, op: Op) -> Result:
        match op:
            case Read(key=key):
                return Result(True, self.data.get(key))
            case Write(key=key, value=value):
                self.data[key] = value
                return _OK
            case Cas(key=key, expected=expected, new=new):
                current = self.data.get(key)
                if current != expected:
                    return Result(False, current, Rejection.CAS_MISMATCH, f"{key!r} is {current!r}")
                self.data[key] = new
                return _OK
            case Append(key=key, element=element):
                current = self.data.get(key)
                if current is not None and not isinstance(current, list):
                    return Result(False, 0, Rejection.WRONG_TYPE, f"{key!r} holds no list")
                self.data[key] = [*(current or ()), element]
                return _OK
            case Txn(ops=micro_ops):
                return self._transaction(micro_ops)
        raise TypeError(f"not a state-machine op: {op!r}")

    def _transaction(self, micro_ops: list[MicroOp]) -> Result:
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
        return Result(True, completed)
