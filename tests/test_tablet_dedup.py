"""Properties: replaying a log with client retries is deterministic and applies each op once."""

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from node.entry import Entry, EntryType
from node.tablet.ops import (
    Append,
    Batch,
    Cas,
    MicroOp,
    OpenSession,
    Read,
    Rejection,
    Result,
    Txn,
    Write,
    encode_command,
    is_read_only,
)
from node.tablet.state import Limits, Snapshot, StateMachine

CLIENTS = ("a", "b", "c")
KEYS = st.sampled_from(["k0", "k1", "k2"])
SMALL = st.integers(-3, 3)
micro_ops = st.one_of(
    st.builds(MicroOp, st.just("r"), KEYS),
    st.builds(MicroOp, st.just("w"), KEYS, SMALL),
    st.builds(MicroOp, st.just("append"), KEYS, SMALL),
    st.builds(MicroOp, st.just("add"), KEYS, SMALL),
    st.builds(MicroOp, st.just("require_ge"), KEYS, SMALL),
)
ops = st.one_of(
    st.builds(Read, KEYS),
    st.builds(Write, KEYS, SMALL),
    st.builds(Cas, KEYS, st.one_of(st.none(), SMALL), SMALL),
    st.builds(Append, KEYS, SMALL),
    st.builds(Txn, st.lists(micro_ops, max_size=5)),
)


@st.composite
def schedules(draw):
    """Committed commands in log order: each client's ops in seq order, interleaved, and some
    re-delivered later (a client retrying after a lost reply or a leader change)."""
    pending = {c: draw(st.lists(ops, max_size=12)) for c in CLIENTS}
    log = [(c, 0, OpenSession()) for c in CLIENTS]
    sent = []
    next_seq = dict.fromkeys(CLIENTS, 1)
    while any(pending.values()):
        if sent and draw(st.integers(0, 3)) == 0:
            log.append(draw(st.sampled_from(sent)))
            continue
        client = draw(st.sampled_from([c for c in CLIENTS if pending[c]]))
        command = (client, next_seq[client], pending[client].pop(0))
        next_seq[client] += 1
        log.append(command)
        sent.append(command)
    return log


def replay(commands, sm=None, first_index=1, ids=None):
    """Apply (client, seq, op) commands; `ids` maps each client to the session id it was given."""
    sm = sm or StateMachine("t")
    ids = {} if ids is None else dict(ids)
    results = []
    for i, (client, seq, op) in enumerate(commands, first_index):
        # interleave the log's other entry kinds, which must not disturb the state
        if i % 7 == 0:
            sm.apply(Entry(1, 2 * i, EntryType.NO_OP))
        payload = encode_command(op, session=ids.get(client, 0), seq=seq)
        result = sm.apply(Entry(1, 2 * i + 1, EntryType.REPLICATE, payload))
        if isinstance(op, OpenSession):
            ids[client] = result.value
        results.append(result)
    return sm, results, ids


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_replicas_replaying_the_same_log_agree(log):
    sm1, results1, _ = replay(log)
    sm2, results2, _ = replay(log)
    assert results1 == results2
    assert sm1.snapshot() == sm2.snapshot()


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_retries_return_the_original_result_and_never_reapply(log):
    first_position = {}
    for position, (client, seq, _) in enumerate(log):
        first_position.setdefault((client, seq), position)
    first_deliveries = [log[p] for p in sorted(first_position.values())]
    once, once_results, _ = replay(first_deliveries)
    original = {(c, s): r for (c, s, _), r in zip(first_deliveries, once_results, strict=True)}
    retried, results, _ = replay(log)
    assert retried.data == once.data
    for (client, seq, op), result in zip(log, results, strict=True):
        if not is_read_only(op) and not isinstance(op, OpenSession):
            assert result == original[client, seq], (client, seq, op)


@settings(max_examples=100, deadline=None)
@given(schedules(), st.data())
def test_snapshot_restore_then_replay_equals_the_live_replica(log, data):
    cut = data.draw(st.integers(0, len(log)))
    live, live_results, _ = replay(log)
    head, _, ids = replay(log[:cut])
    wire = msgspec.msgpack.encode(head.snapshot())  # what the snapshot file holds
    restored = StateMachine.from_snapshot(msgspec.msgpack.decode(wire, type=Snapshot))
    assert restored.snapshot() == head.snapshot()
    restored, tail_results, _ = replay(log[cut:], restored, first_index=cut + 1, ids=ids)
    assert tail_results == live_results[cut:]
    assert restored.snapshot() == live.snapshot()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(CLIENTS), st.integers(0, 5), st.booleans()), max_size=80))
def test_with_tight_limits_an_op_applies_at_most_once_and_retries_are_original_or_unknown(steps):
    """Sessions forget (acks, the per-session bound, LRU eviction of sessions): a retry then gets
    an outcome-unknown rejection and the client opens a new session, but nothing applies twice."""
    sm = StateMachine("t", Limits(max_sessions=2, max_results_per_session=2))
    index = 0

    def apply(op, session=0, seq=0, acked_below=0):
        nonlocal index
        index += 1
        payload = encode_command(op, session=session, seq=seq, acked_below=acked_below)
        return sm.apply(Entry(1, index, EntryType.REPLICATE, payload))

    session = {c: apply(OpenSession()).value for c in CLIENTS}
    sent = {c: [] for c in CLIENTS}  # per client: (session, seq, first result)
    for client, back, ack in steps:
        history = sent[client]
        if back and len(history) >= back:  # retry an earlier op under the session it was sent in
            sid, seq, first = history[-back]
            result = apply(Append(client, seq), sid, seq)
            assert result == first or (not result.ok and result.error.outcome_unknown)
        else:  # a new op; acking everything before it when `ack`
            seq = len(history) + 1
            acked = seq if ack else 0
            result = apply(Append(client, seq), session[client], seq, acked_below=acked)
            history.append((session[client], seq, result))
        if not result.ok:
            assert result.error.outcome_unknown
            if result.error is Rejection.NO_SESSION:
                session[client] = apply(OpenSession()).value
    for client in CLIENTS:
        elements = sm.data.get(client, [])
        assert len(elements) == len(set(elements))  # no op applied twice


def _forget_by_scan(results: dict, forgotten_below: int, acked_below: int, bound: int):
    """The dedup table's forgetting, stated plainly: drop every seq below acked_below, then the
    oldest until `bound` remain. What StateMachine does with its sorted seqs must match it."""
    if acked_below > forgotten_below:
        forgotten_below = acked_below
        results = {s: r for s, r in results.items() if s >= acked_below}
    while len(results) > bound:
        oldest = min(results)
        del results[oldest]
        forgotten_below = max(forgotten_below, oldest + 1)
    return results, forgotten_below


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 45), st.integers(1, 4)),
                      max_size=80),
       bound=st.integers(1, 8))
def test_forgetting_results_matches_the_plain_scan_for_seqs_in_any_order(steps, bound):
    """One session shared by concurrent callers applies seqs out of order, repeats some and
    sends acked_below that may lag, alone or as batches of up to 4 (op i at seq + i, trimmed
    after the whole batch; a first attempt above every kept seq takes the batch's fast path):
    the table keeps exactly the results the scan keeps, each the first one, and does so again
    after a snapshot (the sorted seqs are rebuilt, not restored)."""
    sm = StateMachine("t", Limits(max_results_per_session=bound))
    idx = 1
    sm.apply(Entry(1, idx, EntryType.REPLICATE, encode_command(OpenSession())))
    session = 1
    want: dict = {}
    forgotten = 0
    for n, (seq, acked, k) in enumerate(steps):
        if n == len(steps) // 2:
            sm = StateMachine.from_snapshot(msgspec.msgpack.decode(
                msgspec.msgpack.encode(sm.snapshot()), type=Snapshot))
        idx += 1
        op = Write("k", n) if k == 1 else Batch([Write("k", (n, i)) for i in range(k)])
        res = sm.apply(Entry(1, idx, EntryType.REPLICATE, encode_command(
            op, session=session, seq=seq, acked_below=acked, timestamp=idx)))
        for i, r in enumerate([res] if k == 1 else res):
            s = seq + i
            if s in want:
                assert r == want[s]  # a retry gets the first result
            elif s < forgotten:
                assert r.error == Rejection.STALE_SEQ
            else:
                assert r == Result(True, timestamp=idx)
                want[s] = r
        want, forgotten = _forget_by_scan(want, forgotten, acked, bound)
        got = sm.sessions[session]
        assert dict(got.results) == want and got.forgotten_below == forgotten
        assert sm._seqs.get(session, sorted(want)) == sorted(want)  # no seq kept past its result


def test_every_ok_mutation_carries_its_commands_timestamp():
    """A write, a cas, an append and a transaction, alone and in a batch: an ok result is
    stamped with its command's hybrid time, a row error is not."""
    sm = StateMachine("t")
    sm.apply(Entry(1, 1, EntryType.REPLICATE, encode_command(OpenSession())))
    ops = [Write("a", 1), Cas("a", 1, 2), Append("l", 1), Txn([MicroOp("append", "l", 2)])]
    for i, op in enumerate(ops):
        res = sm.apply(Entry(1, 2 + i, EntryType.REPLICATE, encode_command(
            op, session=1, seq=1 + i, timestamp=100 + i)))
        assert res.ok and res.timestamp == 100 + i, op
    res = sm.apply(Entry(1, 6, EntryType.REPLICATE, encode_command(
        Batch([ops[0], Cas("a", 9, 3), *ops[2:]]), session=1, seq=10, timestamp=200)))
    assert [r.timestamp for r in res] == [200, 0, 200, 200]  # the cas mismatches: a is 1
    assert not res[1].ok
