"""The tablet state machine: op semantics, sessions and exactly-once, log-order checks."""

import msgspec
import pytest

from node import probes
from node.entry import Entry, EntryType
from node.tablet.ops import (
    COMMAND_VERSION,
    Append,
    Cas,
    CloseSession,
    Command,
    MicroOp,
    OpenSession,
    Read,
    Rejection,
    Txn,
    UnsupportedCommand,
    Write,
    encode_command,
    is_read_only,
)
from node.tablet.state import Limits, StateMachine


class Log:
    """Feeds commands to a state machine as consecutive committed REPLICATE entries."""

    def __init__(self, limits=None):
        self.sm = StateMachine("t", limits)
        self.index = 0

    def apply(self, session, seq, op, acked_below=0, timestamp=0):
        self.index += 1
        payload = encode_command(
            op, session=session, seq=seq, acked_below=acked_below, timestamp=timestamp
        )
        return self.sm.apply(Entry(2, self.index, EntryType.REPLICATE, payload))

    def session(self):
        result = self.apply(0, 0, OpenSession())
        assert result.ok and result.value == self.index  # the id is the entry's index
        return result.value


@pytest.fixture
def log():
    log = Log()
    log.c = log.session()
    return log


def test_read_write(log):
    assert log.apply(log.c, 1, Read("k")).value is None
    assert log.apply(log.c, 2, Write("k", {"any": [1, "msgpack", b"value"]})).ok
    assert log.sm.query(Read("k")).value == {"any": [1, "msgpack", b"value"]}


def test_cas(log):
    assert log.apply(log.c, 1, Cas("k", None, 1)).ok  # None matches a missing key
    r = log.apply(log.c, 2, Cas("k", 5, 6))
    assert (r.ok, r.error, r.value) == (False, Rejection.CAS_MISMATCH, 1)
    assert log.apply(log.c, 3, Cas("k", 1, 2)).ok
    assert log.sm.data["k"] == 2


def test_append_builds_lists_and_refuses_non_lists(log):
    log.apply(log.c, 1, Append("l", 1))
    log.apply(log.c, 2, Append("l", 2))
    assert log.sm.data["l"] == [1, 2]
    log.apply(log.c, 3, Write("s", "text"))
    r = log.apply(log.c, 4, Append("s", 1))
    assert (r.ok, r.error) == (False, Rejection.WRONG_TYPE)
    assert log.sm.data["s"] == "text"


def test_results_are_not_changed_by_later_appends(log):
    first = log.sm.query(Txn([MicroOp("r", "l")]))
    log.apply(log.c, 1, Append("l", 1))
    seen = log.sm.query(Read("l")).value
    log.apply(log.c, 2, Append("l", 2))
    assert first.value == [["r", "l", None]] and seen == [1]


def test_txn_reads_its_own_writes_and_returns_elle_style_micro_ops(log):
    log.apply(log.c, 1, Write("x", 1))
    r = log.apply(
        log.c,
        2,
        Txn(
            [
                MicroOp("r", "x"),
                MicroOp("w", "x", 2),
                MicroOp("r", "x"),
                MicroOp("append", "l", 9),
                MicroOp("r", "l"),
            ]
        ),
    )
    assert r.ok
    assert r.value == [
        ["r", "x", 1],
        ["w", "x", 2],
        ["r", "x", 2],
        ["append", "l", 9],
        ["r", "l", [9]],
    ]
    assert log.sm.data == {"x": 2, "l": [9]}


def test_a_failing_micro_op_aborts_the_whole_txn(log):
    log.apply(log.c, 1, Write("s", "text"))
    r = log.apply(log.c, 2, Txn([MicroOp("w", "x", 1), MicroOp("append", "s", 1)]))
    assert (r.ok, r.error, r.value) == (False, Rejection.WRONG_TYPE, 1)
    r = log.apply(log.c, 3, Txn([MicroOp("add", "x", 1), MicroOp("require_ge", "x", 2)]))
    assert (r.ok, r.error, r.value) == (False, Rejection.PRECONDITION_FAILED, 1)
    r = log.apply(log.c, 4, Txn([MicroOp("add", "s", 1)]))
    assert r.error is Rejection.WRONG_TYPE
    r = log.apply(log.c, 5, Txn([MicroOp("add", "x", True)]))  # bools are not integers
    assert r.error is Rejection.WRONG_TYPE
    assert log.sm.data == {"s": "text"}


def test_unknown_micro_op_is_refused_at_decode():
    bad = msgspec.msgpack.encode(
        {
            "version": 1,
            "op": {"type": "txn", "ops": [["delete", "k", None]]},
            "session": 1,
            "seq": 1,
        }
    )
    with pytest.raises(UnsupportedCommand):
        StateMachine("t").apply(Entry(1, 1, EntryType.REPLICATE, bad))


def test_a_retry_returns_the_original_result_and_applies_once(log):
    first = log.apply(log.c, 1, Append("l", "x"))
    log.apply(log.c, 2, Cas("k", None, 1))
    log.apply(log.c, 3, Write("k", 7))
    with probes.expect("tablet.dedup.retry_answered"):
        assert log.apply(log.c, 1, Append("l", "x")) == first
    cas_retry = log.apply(log.c, 2, Cas("k", None, 1))
    assert cas_retry.ok  # the original success, although k is 7 now
    assert log.sm.data == {"l": ["x"], "k": 7}


def test_mutations_need_an_open_session():
    log = Log()
    for session in (0, 7):
        r = log.apply(session, 1, Write("k", 1))
        assert (r.ok, r.error) == (False, Rejection.NO_SESSION)
        assert r.error.outcome_unknown
    assert log.sm.data == {}
    assert log.apply(0, 0, Read("k")).ok  # reads need no session


def test_each_open_session_gets_a_new_id(log):
    log.apply(log.c, 1, Append("l", 1))
    other = log.session()
    assert other != log.c
    assert log.apply(other, 1, Append("l", 2)).ok  # seqs are per session
    assert log.apply(log.c, 1, Append("l", 1)).ok  # the old session still dedups
    assert log.sm.data["l"] == [1, 2]


def test_closed_session_refuses_retries(log):
    log.apply(log.c, 1, Append("l", 1))
    assert log.apply(log.c, 0, CloseSession()).ok
    assert log.apply(log.c, 1, Append("l", 1)).error is Rejection.NO_SESSION
    assert log.apply(log.c, 0, CloseSession()).error is Rejection.NO_SESSION
    assert log.sm.data["l"] == [1]


def test_acked_results_are_forgotten_and_their_retries_are_stale(log):
    log.apply(log.c, 1, Append("l", 1))
    log.apply(log.c, 2, Append("l", 2), acked_below=2)
    assert set(log.sm.sessions[log.c].results) == {2}
    with probes.expect("tablet.session.stale_seq"):
        r = log.apply(log.c, 1, Append("l", 1))
    assert (r.ok, r.error) == (False, Rejection.STALE_SEQ) and r.error.outcome_unknown
    assert log.sm.data["l"] == [1, 2]


def test_results_per_session_are_bounded():
    log = Log(Limits(max_results_per_session=3))
    log.c = log.session()
    for seq in range(1, 11):
        log.apply(log.c, seq, Append("l", seq))
    assert sorted(log.sm.sessions[log.c].results) == [8, 9, 10]
    assert log.apply(log.c, 5, Append("l", 5)).error is Rejection.STALE_SEQ
    assert log.apply(log.c, 9, Append("l", 9)).ok
    assert log.sm.data["l"] == list(range(1, 11))


def test_least_recently_used_sessions_are_evicted():
    log = Log(Limits(max_sessions=2))
    a, b = log.session(), log.session()
    log.apply(a, 1, Append("a", 1))
    log.apply(b, 1, Append("b", 1))
    log.apply(a, 2, Append("a", 2))  # b is now the least recently used
    with probes.expect("tablet.session.evicted_lru", "tablet.session.no_session"):
        c = log.session()
        assert list(log.sm.sessions) == [a, c]
        assert log.apply(b, 1, Append("b", 1)).error is Rejection.NO_SESSION
    assert log.sm.data["b"] == [1]


def test_entries_must_come_in_increasing_index_order(log):
    entry = Entry(
        2, log.index, EntryType.REPLICATE, encode_command(Write("k", 1), session=log.c, seq=9)
    )
    with pytest.raises(ValueError, match="already applied"):
        log.sm.apply(entry)
    with pytest.raises(ValueError, match="COMMIT"):
        log.sm.apply(Entry(2, log.index + 1, EntryType.COMMIT))


def test_no_op_and_config_entries_advance_the_applied_index_only(log):
    before = dict(log.sm.data)
    assert log.sm.apply(Entry(3, 10, EntryType.NO_OP)) is None
    assert log.sm.apply(Entry(3, 11, EntryType.CONFIG_CHANGE, b"opaque")) is None
    assert (log.sm.last_applied_index, log.sm.last_applied_term, log.sm.data) == (11, 3, before)


def test_a_bad_payload_raises_and_changes_nothing(log):
    for payload in (b"\xc1garbage", encode_command(Write("k", 1), session=log.c, seq=1)[:-3]):
        with pytest.raises(UnsupportedCommand):
            log.sm.apply(Entry(2, 50, EntryType.REPLICATE, payload))
    assert log.sm.last_applied_index == log.index
    newer = msgspec.msgpack.encode(Command(COMMAND_VERSION + 1, Write("k", 1), log.c, 1))
    with pytest.raises(UnsupportedCommand, match="version"):
        log.sm.apply(Entry(2, 50, EntryType.REPLICATE, newer))


def test_last_timestamp_is_the_highest_applied(log):
    log.apply(log.c, 1, Write("k", 1), timestamp=500)
    log.apply(log.c, 2, Write("k", 2), timestamp=300)
    assert log.sm.last_timestamp == 500


def test_query_serves_only_read_only_ops(log):
    assert is_read_only(Txn([MicroOp("r", "a"), MicroOp("r", "b")]))
    for op in (
        Write("k", 1),
        Append("k", 1),
        Cas("k", 1, 2),
        Txn([MicroOp("r", "a"), MicroOp("w", "a", 1)]),
    ):
        assert not is_read_only(op)
        with pytest.raises(ValueError, match="through the log"):
            log.sm.query(op)
