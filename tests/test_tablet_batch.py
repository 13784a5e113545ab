"""Batch commands in the state machine: one entry, many row ops, each deduplicated at its own seq
(op i of a batch at seq s is seq s + i), each with its own result, row errors confined to
their row; and the bound that keeps a batch's results together."""

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tablet_state import Log

from node.entry import Entry, EntryType
from node.tablet.ops import (
    Append,
    Batch,
    Cas,
    OpenSession,
    Read,
    Rejection,
    Txn,
    UnsupportedCommand,
    Write,
    decode_command,
    encode_command,
)
from node.tablet.state import Limits, Snapshot, StateMachine

ROWS = [Write("a", 1), Cas("a", 0, 9), Append("l", "x"), Cas("a", 1, 2)]


def test_a_batch_applies_in_order_and_a_row_error_fails_only_its_row():
    log = Log()
    c = log.session()
    results = log.apply(c, 1, Batch(ROWS), timestamp=77)
    assert [r.ok for r in results] == [True, False, True, True]
    assert results[1].error == Rejection.CAS_MISMATCH and results[1].value == 1
    assert [r.timestamp for r in results] == [77, 0, 77, 77]  # all at the entry's time
    assert log.sm.data == {"a": 2, "l": ["x"]}
    assert sorted(log.sm.sessions[c].results) == [1, 2, 3, 4]  # op i at seq 1 + i


def test_a_wrong_type_row_fails_alone():
    log = Log()
    c = log.session()
    results = log.apply(c, 1, Batch([Write("k", 5), Append("k", "x"), Write("j", 1)]))
    assert [r.ok for r in results] == [True, False, True]
    assert results[1].error == Rejection.WRONG_TYPE
    assert log.sm.data == {"k": 5, "j": 1}


def test_a_retried_batch_gets_every_first_result_and_applies_nothing_again():
    log = Log()
    c = log.session()
    first = log.apply(c, 1, Batch(ROWS), timestamp=5)
    log.apply(c, 5, Write("a", 100))  # the state moved on: re-applying would differ
    again = log.apply(c, 1, Batch(ROWS), timestamp=9)
    assert again == first
    assert log.sm.data == {"a": 100, "l": ["x"]}


def test_a_retry_of_one_op_alone_gets_its_result_from_the_batch():
    log = Log()
    c = log.session()
    first = log.apply(c, 10, Batch(ROWS), timestamp=5)
    assert log.apply(c, 12, Append("l", "x")) == first[2]
    assert log.apply(c, 11, Cas("a", 0, 9)) == first[1]  # a rejection is a first result too
    assert log.sm.data["l"] == ["x"]


def test_a_batch_retrying_ops_sent_alone_before_gets_their_first_results():
    """The client sent seq 3 alone, lost the reply, and resent it inside a batch at seq 2."""
    log = Log()
    c = log.session()
    alone = log.apply(c, 3, Append("l", "x"), timestamp=4)
    results = log.apply(c, 2, Batch([Append("l", "w"), Append("l", "x")]), timestamp=8)
    assert results[1] == alone
    assert log.sm.data["l"] == ["x", "w"]


def test_forgotten_seqs_of_a_batch_are_stale_not_reapplied():
    log = Log()
    c = log.session()
    log.apply(c, 1, Batch([Append("l", 1), Append("l", 2)]))
    log.apply(c, 3, Append("l", 3), acked_below=3)  # the client has seqs 1 and 2
    stale = log.apply(c, 1, Batch([Append("l", 1), Append("l", 2)]))
    assert [r.error for r in stale] == [Rejection.STALE_SEQ] * 2
    assert all(r.error.outcome_unknown for r in stale)
    # a batch straddling the forgotten line: stale below it, deduplicated above it
    mixed = log.apply(c, 2, Batch([Append("l", 2), Append("l", 3)]))
    assert mixed[0].error == Rejection.STALE_SEQ and mixed[1].ok
    assert log.sm.data["l"] == [1, 2, 3]


def test_a_batch_on_an_unknown_session_is_refused_row_by_row():
    log = Log()
    results = log.apply(99, 1, Batch([Write("a", 1), Write("b", 2)]))
    assert [r.error for r in results] == [Rejection.NO_SESSION] * 2
    assert log.sm.data == {}


def test_the_session_bound_trims_after_the_whole_batch():
    """A batch as large as the bound keeps all its results (trimmed once, after the batch),
    older ones go; the bound check refuses anything larger before it is proposed."""
    limits = Limits(max_results_per_session=4)
    log = Log(limits)
    c = log.session()
    log.apply(c, 1, Write("old", 1))
    rows = [Append("l", i) for i in range(4)]
    first = log.apply(c, 2, Batch(rows))
    assert sorted(log.sm.sessions[c].results) == [2, 3, 4, 5]
    assert log.apply(c, 2, Batch(rows)) == first  # every result of the batch kept
    assert log.apply(c, 1, Write("old", 1)).error == Rejection.STALE_SEQ
    limits.check_batch(Batch(rows))
    with pytest.raises(ValueError, match="exceeds the 4 results"):
        limits.check_batch(Batch([*rows, Append("l", 4)]))


def test_batches_replay_deterministically_and_survive_a_snapshot():
    def run(sm_log, commands):
        return [sm_log.apply(*c) for c in commands]

    a = Log()
    c = a.session()
    commands = [(c, 1, Batch(ROWS), 0, 3), (c, 5, Batch([Txn([]), Append("l", "y")]), 0, 4),
                (c, 1, Batch(ROWS), 0, 5)]
    ra = run(a, commands)
    wire = msgspec.msgpack.encode(a.sm.snapshot())
    b = Log()
    b.session()
    rb = run(b, commands)
    assert ra == rb and a.sm.snapshot() == b.sm.snapshot()
    restored = StateMachine.from_snapshot(msgspec.msgpack.decode(wire, type=Snapshot))
    assert restored.snapshot() == a.sm.snapshot()


def test_a_batch_carries_row_ops_only():
    for bad in (OpenSession(), Read("k"), Batch([Write("k", 1)])):
        with pytest.raises(TypeError, match="carries Write, Cas, Append and Txn"):
            Batch([bad])
    with pytest.raises(ValueError, match="at least one op"):
        Batch([])
    nested = msgspec.msgpack.encode(
        {"version": 1, "op": {"type": "batch", "ops": [{"type": "open_session"}]}})
    with pytest.raises(UnsupportedCommand):
        decode_command(nested)


def test_single_op_payloads_decode_as_before():
    """No version bump: a command written before batches existed decodes unchanged."""
    old = msgspec.msgpack.encode({"version": 1, "op": {"type": "write", "key": "k", "value": 1},
                                  "session": 3, "seq": 4})
    command = decode_command(old)
    assert command.op == Write("k", 1) and (command.session, command.seq) == (3, 4)


# -- property: batches and retries of any shape apply each op once ------------------------------

KEYS = st.sampled_from(["k0", "k1", "k2"])
ROW_OPS = st.one_of(st.builds(Write, KEYS, st.integers(0, 3)),
                    st.builds(Cas, KEYS, st.one_of(st.none(), st.integers(0, 3)),
                              st.integers(0, 3)),
                    st.builds(Append, KEYS, st.integers(0, 3)))


@st.composite
def batched_schedules(draw):
    """Per client: ops cut into batches of consecutive seqs; the log interleaves the clients'
    first sends with re-sends of an earlier batch whole, or of one of its ops alone."""
    clients = ("a", "b")
    pending = {c: draw(st.lists(ROW_OPS, max_size=10)) for c in clients}
    next_seq = dict.fromkeys(clients, 1)
    sent, log = [], []
    while any(pending.values()):
        if sent and draw(st.integers(0, 3)) == 0:
            client, seq, ops = draw(st.sampled_from(sent))
            if draw(st.booleans()):
                log.append((client, seq, Batch(ops)))
            else:
                i = draw(st.integers(0, len(ops) - 1))
                log.append((client, seq + i, ops[i]))
            continue
        client = draw(st.sampled_from([c for c in clients if pending[c]]))
        n = draw(st.integers(1, len(pending[client])))
        ops, pending[client] = pending[client][:n], pending[client][n:]
        sent.append((client, next_seq[client], ops))
        log.append((client, next_seq[client], Batch(ops)))
        next_seq[client] += n
    return log


@settings(max_examples=150, deadline=None)
@given(batched_schedules())
def test_every_op_applies_once_and_every_retry_gets_its_first_result(log):
    """The reference: each op applied alone, once, in the order of its first send."""
    def run(commands):
        sm, ids, out = StateMachine("t"), {}, []
        index = 0
        for client, seq, op in commands:
            if client not in ids:
                index += 1
                ids[client] = sm.apply(Entry(1, index, EntryType.REPLICATE,
                                             encode_command(OpenSession()))).value
            index += 1
            payload = encode_command(op, session=ids[client], seq=seq)
            out.append(sm.apply(Entry(1, index, EntryType.REPLICATE, payload)))
        return sm, out

    singles, seen = [], set()
    for client, seq, op in log:
        rows = op.ops if isinstance(op, Batch) else [op]
        for i, row in enumerate(rows):
            if (client, seq + i) not in seen:
                seen.add((client, seq + i))
                singles.append((client, seq + i, row))
    reference, ref_results = run(singles)
    first = {(c, s): r for (c, s, _), r in zip(singles, ref_results, strict=True)}
    batched, results = run(log)
    assert batched.data == reference.data
    for (client, seq, op), result in zip(log, results, strict=True):
        got = result if isinstance(result, list) else [result]
        assert got == [first[client, seq + i] for i in range(len(got))], (client, seq, op)
