"""The tablet's operations: the payload of a REPLICATE log entry, and the results of applying them.

Schema version 1. A Command carries its `version`; a replica refuses a newer version rather than
apply it wrongly. Fields added later must have defaults so that older payloads still decode.
`Batch` is a new op variant, not a new version: every payload written before it
decodes exactly as before, and a replica that predates it cannot decode a batch at all (an
unknown tag is an UnsupportedCommand, never a misread), so a bump would only make the old
replica refuse the single ops too.

Every mutating Command names its client session and a per-session sequence number, so that a
retried command is answered from the session's results instead of being applied twice (Raft
thesis §6.3). Sessions are opened and closed through the log like any other command; a session's
id is the log index of its OpenSession entry, so ids are never reused and a session the tablet
does not know is certainly one it forgot (closed or evicted), never one it has yet to see.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

import msgspec

from node.errors import TesseraError

COMMAND_VERSION = 1

Key = str
Value = Any  # any msgpack value; lists are what `append` builds
NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class Read(msgspec.Struct, frozen=True, tag="read"):
    key: Key


class Write(msgspec.Struct, frozen=True, tag="write"):
    key: Key
    value: Value


class Cas(msgspec.Struct, frozen=True, tag="cas"):
    """Set `new` if the current value equals `expected` (None matches a missing key)."""

    key: Key
    expected: Value
    new: Value


class Append(msgspec.Struct, frozen=True, tag="append"):
    """Append `element` to the list at `key` (a missing key is an empty list)."""

    key: Key
    element: Value


class MicroOp(msgspec.Struct, frozen=True, array_like=True):
    """One step of a transaction, encoded [f, key, value] as Elle writes them.

    r          read (value ignored; the result carries what was read)
    w          write value
    append     append value to the list at key
    add        add the integer value to the integer at key (missing is 0)
    require_ge abort the whole transaction unless the integer at key is >= value (missing is 0);
               with `add` this makes a bank transfer that refuses to overdraw:
               [add from -n] [require_ge from 0] [add to n]
    Later steps see earlier steps' writes.
    """

    f: Literal["r", "w", "append", "add", "require_ge"]
    key: Key
    value: Value = None


class Txn(msgspec.Struct, frozen=True, tag="txn"):
    """Micro-ops applied all or nothing."""

    ops: list[MicroOp]


class OpenSession(msgspec.Struct, frozen=True, tag="open_session"):
    """Start a session; the result's value is its id. A client opens one per tablet before its
    first write, and a new one (with a new id) whenever the tablet answers NO_SESSION. Retrying
    an OpenSession is harmless: the extra session is never used and is evicted in time."""


class CloseSession(msgspec.Struct, frozen=True, tag="close_session"):
    """Forget the command's session (its later retries get NO_SESSION)."""


RowOp = Write | Cas | Append | Txn  # what a Batch may carry: the session's mutations
ROW_OP_TYPES = (Write, Cas, Append, Txn)  # RowOp for isinstance: a union is rebuilt per call


class Batch(msgspec.Struct, frozen=True, tag="batch"):
    """Many row ops in one command, as Kudu replicates one WriteRequest as one Raft entry.

    Op i takes seq `command.seq + i`: each is deduplicated and answered on its own, exactly as
    if it had been sent alone with that seq (a retried batch, or a retry of one of its ops on
    its own, gets each op's first result back). A row error (a cas mismatch, a wrong type)
    fails that row only; the others apply, in order, at the command's timestamp. Sessions
    cannot be opened or closed inside a batch, and batches do not nest: the type refuses both
    when a payload is decoded, `__post_init__` when one is built.
    """

    ops: list[RowOp]

    def __post_init__(self) -> None:
        if not self.ops:
            raise ValueError("a Batch needs at least one op")
        for op in self.ops:
            if not isinstance(op, ROW_OP_TYPES):
                raise TypeError(f"a Batch carries Write, Cas, Append and Txn ops, not "
                                f"{type(op).__name__}")


class Member(msgspec.Struct, frozen=True, array_like=True):
    """One client's single row op inside a Group: its own session, seq and acked_below, exactly
    what a Command of its own would carry."""

    op: RowOp
    session: NonNegative
    seq: NonNegative
    acked_below: NonNegative = 0
    owner: str = ""  # the caller's identity, as Command.owner


class Group(msgspec.Struct, frozen=True, tag="group"):
    """Single row ops of many sessions, proposed together as ONE entry by a leader: the writes
    that reached it in one turn of its driver (Replica.submit). Each member is applied, in
    order, exactly as if it were a Command of its own at this index and the group's timestamp
    (deduplicated by its session and seq, answered with its own Result), so grouping changes
    what an entry holds and never what an op does. Per-entry work (log bookkeeping, the WAL
    record, the followers' decode, commit-wait) is then paid once per group instead of once
    per op. A new op variant, as Batch was: older payloads decode as before."""

    members: list[Member]

    def __post_init__(self) -> None:
        if not self.members:
            raise ValueError("a Group needs at least one member")


Op = Read | Write | Cas | Append | Txn | OpenSession | CloseSession | Batch | Group


class Command(msgspec.Struct, frozen=True):
    version: int
    op: Op
    session: NonNegative = 0  # OpenSession's result; 0 for read-only ops and OpenSession
    seq: NonNegative = 0  # per session, increasing from 1
    # The client has the results of all its seqs below this one: the session may forget them.
    acked_below: NonNegative = 0
    # Hybrid time assigned by the leader when it proposed the command (node.clock).
    timestamp: NonNegative = 0
    # The identity the leader's RPC layer authenticated for the caller (a certificate's common
    # name; "" without authentication), set by the leader and never taken from the client: a
    # session belongs to the identity that opened it, and another's op in it is refused.
    owner: str = ""


class Rejection(enum.StrEnum):
    """Why an op had no effect. CAS_MISMATCH, PRECONDITION_FAILED, WRONG_TYPE and NOT_OWNER
    are definite failures; for NO_SESSION and STALE_SEQ the outcome of the original attempt is
    UNKNOWN (it may have been applied before its result was forgotten), so a client must report
    such an op as indeterminate, never as failed, unless no earlier attempt of it can have
    arrived (then nothing applied it, and it may go again in a new session)."""

    CAS_MISMATCH = "cas_mismatch"  # value = the current value
    PRECONDITION_FAILED = "precondition_failed"  # value = index of the failing micro-op
    WRONG_TYPE = "wrong_type"  # value = index of the failing micro-op (0 for single ops)
    NO_SESSION = "no_session"  # session closed or evicted: open a new one
    STALE_SEQ = "stale_seq"  # seq older than the results the session still keeps
    NOT_OWNER = "not_owner"  # the session was opened by another identity: nothing was done

    @property
    def outcome_unknown(self) -> bool:
        return self in (Rejection.NO_SESSION, Rejection.STALE_SEQ)


class Result(msgspec.Struct, frozen=True, omit_defaults=True):
    """ok=True: value is what a read returned (a txn returns its micro-ops with reads filled in).
    ok=False: `error` says why, `detail` says it in words."""

    ok: bool
    value: Value = None
    error: Rejection | None = None
    detail: str = ""
    # An ok mutation's hybrid time (its command's timestamp, node.clock); 0 for reads and
    # rejections. A retried seq gets its first result back, timestamp included.
    timestamp: int = 0


class UnsupportedCommand(TesseraError):
    """A REPLICATE payload this replica cannot decode: applying anything else would diverge."""


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Command)


def encode_command(
    op: Op, *, session: int = 0, seq: int = 0, acked_below: int = 0, timestamp: int = 0,
    owner: str = ""
) -> bytes:
    return command_payload(Command(COMMAND_VERSION, op, session, seq, acked_below, timestamp,
                                   owner))


def command_payload(command: Command) -> bytes:
    """The REPLICATE entry payload of `command` (decode_command reads it back)."""
    return _encoder.encode(command)


def decode_command(payload: bytes) -> Command:
    try:
        command = _decoder.decode(payload)
    except msgspec.DecodeError as e:
        raise UnsupportedCommand(f"undecodable tablet command: {e}") from e
    if command.version > COMMAND_VERSION:
        raise UnsupportedCommand(f"command version {command.version} > supported {COMMAND_VERSION}")
    return command


def is_read_only(op: Op) -> bool:
    """Read-only ops need no session and need not go through the log (ReadIndex / lease reads)."""
    return isinstance(op, Read) or (isinstance(op, Txn) and all(m.f == "r" for m in op.ops))
