"""Batching client sessions (node.client.session): Kudu's flush modes, one ts.write_batch per
tablet per flush, a result per op, exactly-once retries with the same session and seqs.

Scripted-RPC tests pin down when batches are cut (each bound with a test that fails if that
bound does nothing) and what a retry resends; tests on a real loopback cluster show row errors,
a lost reply and a leader change end to end."""

import asyncio

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loopback_cluster import loopback_cluster

from node import probes
from node.client import (
    CONNECT_TIMEOUT,
    BufferFull,
    FlushMode,
    SessionOptions,
    TesseraClient,
)
from node.errors import OpFailed, OpUnknown
from node.protocol import (
    Ack,
    BatchResult,
    LeaderStepDown,
    OpResult,
    Peer,
    TableLocations,
    TabletLocation,
)
from node.rpc import ErrorCode, RpcClient, RpcError
from node.tablet.ops import Append, Cas, OpenSession, Rejection, Result, Write
from node.tablet.superblock import HashBucket
from node.tools.local_cluster import LocalCluster


def run(coro, timeout=30):
    return asyncio.run(asyncio.wait_for(coro, timeout))


# -- scripted servers ------------------------------------------------------------------------

class Tablets:
    """One replica per tablet (uuid = tablet id), answering writes like a tablet would: ok, or
    CAS_MISMATCH for a Cas expecting "bad"; sessions 1, 2, ... Records every request."""

    def __init__(self, tablets=1, no_session_first=False, stale_first=False):
        self.n = tablets
        self.batches: list = []  # WriteBatch requests, in order
        self.writes: list = []  # single-op Write requests
        self.sessions = 0
        self.no_session_first = no_session_first
        self.stale_first = stale_first  # the first write and batch refused as stale seqs

    def locations(self):
        return TableLocations("t", "id", [
            TabletLocation(f"tab{i}", HashBucket(i, self.n), [Peer(f"tab{i}", f"h{i}", 1)])
            for i in range(self.n)])

    def answer(self, op):
        if isinstance(op, Cas) and op.expected == "bad":
            return Result(False, None, Rejection.CAS_MISMATCH, "mismatch")
        return Result(True, timestamp=42)

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        if method == "master.table_locations":
            return self.locations()
        if method == "ts.write" and isinstance(request.op, OpenSession):
            self.sessions += 1
            return OpResult(Result(True, self.sessions))
        if method == "ts.write":
            self.writes.append(request)
            if self.stale_first and len(self.writes) == 1:
                return OpResult(Result(False, error=Rejection.STALE_SEQ), request.seq)
            return OpResult(self.answer(request.op), request.seq)
        if method == "ts.write_batch":
            self.batches.append(request)
            if self.stale_first and len(self.batches) == 1:
                return BatchResult([Result(False, error=Rejection.STALE_SEQ)] * len(request.ops))
            if self.no_session_first:
                self.no_session_first = False
                return BatchResult([Result(False, error=Rejection.NO_SESSION)] * len(request.ops))
            return BatchResult([self.answer(op) for op in request.ops], request.seq)
        raise RpcError(ErrorCode.NETWORK, f"unexpected {method}")

    async def close(self):
        pass


def client_of(rpc, timeout=3.0):
    return TesseraClient([("m", 1)], timeout=timeout, rpc=rpc)


def background(**kw):
    kw = {"flush_interval_s": 60.0, **kw}  # no interval flush unless a test asks for one
    return SessionOptions(FlushMode.AUTO_FLUSH_BACKGROUND, **kw)


async def settled(futures, timeout=1.0):
    done, _ = await asyncio.wait(futures, timeout=timeout)
    return len(done)


def test_sync_mode_sends_each_op_alone_at_once():
    async def go():
        rpc = Tablets()
        session = client_of(rpc).new_session("t")  # Kudu's default mode: AUTO_FLUSH_SYNC
        fut = await session.apply("k", Write("k", 1))
        assert fut.done() and fut.result().result.ok
        assert len(rpc.writes) == 1 and rpc.batches == []
    run(go())


def test_every_flush_mode_writes_in_its_sessions_own_consistency_mode():
    """A session's options name its external consistency mode (Kudu's per-session setting).
    The background and manual modes sent it; the sync mode, Kudu's default, sent the client's
    instead, so a COMMIT_WAIT session on a CLIENT_PROPAGATED client was answered without
    commit-wait. Found by a review of the client."""
    from node.protocol import CLIENT_PROPAGATED, COMMIT_WAIT

    async def go():
        rpc = Tablets()
        client = TesseraClient([("m", 1)], timeout=3.0, rpc=rpc,
                               external_consistency=CLIENT_PROPAGATED)
        for mode in FlushMode:
            session = client.new_session("t", SessionOptions(mode,
                                                             external_consistency=COMMIT_WAIT))
            fut = await session.apply("k", Write("k", 1))
            await session.flush()
            assert (await fut).result.ok
        sent = [r.external_consistency for r in rpc.writes + rpc.batches]
        assert len(sent) == len(FlushMode) and set(sent) == {COMMIT_WAIT}, sent
    run(go())


def test_background_flushes_a_tablet_when_its_count_bound_is_reached():
    async def go():
        rpc = Tablets()
        session = client_of(rpc).new_session("t", background(max_batch_ops=3))
        futs = [await session.apply(f"k{i}", Write(f"k{i}", i)) for i in range(2)]
        await asyncio.sleep(0.05)
        assert rpc.batches == [] and await settled(futs, 0.01) == 0
        futs.append(await session.apply("k2", Write("k2", 2)))
        assert await settled(futs) == 3  # no flush(), no interval: the count bound sent them
        [batch] = rpc.batches
        assert [op.key for op in batch.ops] == ["k0", "k1", "k2"] and batch.seq == 1
        assert session.flush_reasons == {"count": 1} and session.ops_cut == 3
    run(go())


def test_background_flushes_every_tablet_when_the_byte_watermark_is_reached():
    async def go():
        rpc = Tablets(tablets=2)
        size = len(msgspec.msgpack.encode(Write("k0", "x" * 30)))
        # the watermark (50 %) at 1.5 ops: the first op stays buffered, the second flushes
        session = client_of(rpc).new_session("t", background(buffer_bytes=3 * size))
        keys = ["k0", "k1"]
        assert {rpc.locations().tablets[i].partition.contains(k) for i, k in enumerate(keys)} \
            == {True}  # one key in each tablet
        first = await session.apply("k0", Write("k0", "x" * 30))
        await asyncio.sleep(0.05)
        assert rpc.batches == [] and session.buffered == 1
        futs = [first, await session.apply("k1", Write("k1", "x" * 30))]
        assert await settled(futs) == 2
        assert session.flush_reasons == {"bytes": 2} and session.buffered == 0
        assert sorted(b.tablet_id for b in rpc.batches) == ["tab0", "tab1"]
    run(go())


def test_background_flushes_a_buffer_when_its_oldest_op_is_older_than_the_interval():
    async def go():
        rpc = Tablets()
        session = client_of(rpc).new_session("t", background(flush_interval_s=0.2))
        loop = asyncio.get_running_loop()
        started = loop.time()
        fut = await session.apply("k", Write("k", 1))
        await asyncio.sleep(0.1)
        fut2 = await session.apply("j", Write("j", 2))  # joins the buffer: no new interval
        assert rpc.batches == []
        assert await settled([fut, fut2]) == 2
        assert 0.2 <= loop.time() - started < 0.5
        assert len(rpc.batches) == 1 and session.flush_reasons == {"interval": 1}
    run(go())


def test_manual_flush_sends_nothing_until_flush_then_one_batch_per_tablet():
    async def go():
        rpc = Tablets(tablets=2)
        session = client_of(rpc).new_session("t", SessionOptions(FlushMode.MANUAL_FLUSH))
        futs = [await session.apply(f"k{i}", Append(f"k{i}", i)) for i in range(10)]
        await asyncio.sleep(0.1)
        assert rpc.batches == [] and session.buffered == 10
        await session.flush()
        assert all(f.done() and f.result().result.ok for f in futs)
        assert sorted(b.tablet_id for b in rpc.batches) == ["tab0", "tab1"]
        assert sum(len(b.ops) for b in rpc.batches) == 10
    run(go())


def test_a_buffered_op_keeps_the_value_it_was_applied_with():
    """A caller whose write waits in a background session's buffer, and who meanwhile reuses
    its list (or dict; or a transaction's steps), must not change what is sent: Kudu's Apply
    takes the row as it is then. Before, the buffered op held the caller's list and sent what
    the caller appended later. Each op still gets its own reply (tied to it by identity)."""
    from node import probes
    from node.tablet.ops import MicroOp

    async def go():
        rpc = Tablets()
        client = client_of(rpc)
        table = client.table("t", session=client.new_session("t", background()))
        value, doc, steps = [1], {"a": 1}, [["w", "k3", [7]]]
        with probes.expect("client.op.value_copied"):
            tasks = [asyncio.create_task(table.write("k1", value)),
                     asyncio.create_task(table.cas("k2", None, doc)),
                     asyncio.create_task(table.txn(steps)),
                     asyncio.create_task(table.write("k4", "text"))]
            await asyncio.sleep(0.05)  # applied and buffered, not sent
        assert rpc.batches == []
        value.append(2)
        doc["a"] = 2
        steps[0][2].append(8)
        steps.append(["r", "k3", None])
        await table.session.flush()
        await asyncio.gather(*tasks, return_exceptions=True)  # the scripted txn reads nothing
        assert all(t.result() for t in (tasks[0], tasks[3]))
        sent = rpc.batches[0].ops
        assert sent[0].value == [1] and sent[1].new == {"a": 1}, sent
        assert sent[2].ops == [MicroOp("w", "k3", [7])] and sent[3].value == "text", sent
    run(go())


def test_an_unbuffered_write_keeps_the_value_it_was_handed_while_it_waits():
    """A write through a handle with no session waits for its tablet's location and a session
    before it is sent; a caller reusing its bytearray meanwhile must not change what is sent.
    Before, only a buffering session's op was copied, and this one sent what the caller put in
    its buffer after (the harness's reused buffers found it: Workload.value_buffers)."""
    from node import probes

    async def go():
        rpc = Tablets()
        table = client_of(rpc).table("t")
        buf = bytearray(b"first")
        with probes.expect("client.op.value_copied"):
            task = asyncio.create_task(table.write("k1", buf))
            await asyncio.sleep(0)  # handed over; the location lookup still to come
            buf[:] = b"later"
            await task
        assert [w.op.value for w in rpc.writes] == [b"first"], rpc.writes
    run(go())


def test_manual_flush_refuses_an_op_beyond_the_buffer_bounds():
    async def go():
        rpc = Tablets()
        session = client_of(rpc).new_session(
            "t", SessionOptions(FlushMode.MANUAL_FLUSH, max_batch_ops=2, buffer_bytes=1000))
        await session.apply("a", Write("a", 1))
        await session.apply("b", Write("b", 1))
        with pytest.raises(BufferFull, match="flush first"):
            await session.apply("c", Write("c", 1))
        await session.flush()
        await session.apply("c", Write("c", 1))  # room again
        with pytest.raises(BufferFull, match="buffer space"):
            await session.apply("d", Write("d", "x" * 1000))
        assert len(rpc.batches) == 1
    run(go())


def test_close_flushes_and_then_refuses():
    async def go():
        rpc = Tablets()
        session = client_of(rpc).new_session("t", SessionOptions(FlushMode.MANUAL_FLUSH))
        fut = await session.apply("k", Write("k", 1))
        await session.close()
        assert fut.result().result.ok and len(rpc.batches) == 1
        assert session.flush_reasons == {"close": 1}
        with pytest.raises(OpFailed, match="closed"):
            await session.apply("k", Write("k", 2))
    run(go())


def test_each_op_gets_its_own_result_and_a_row_error_fails_only_its_row():
    async def go():
        rpc = Tablets()
        client = client_of(rpc)
        batched = client.table("t", session=client.new_session("t", background(max_batch_ops=3)))
        rows = await asyncio.gather(batched.write("a", 1), batched.cas("b", "bad", 2),
                                    batched.append("c", 3))
        assert rows == [42, False, 42]  # hybrid time, cas mismatch (not raised), hybrid time
        assert len(rpc.batches) == 1
    run(go())


@pytest.mark.parametrize("mode", [FlushMode.AUTO_FLUSH_SYNC, FlushMode.MANUAL_FLUSH])
def test_without_row_futures_errors_go_to_the_collector_and_the_rest_count(mode):
    """row_futures=False, Kudu's way: apply returns None, a row error is collected with its op
    (once: pending_errors() empties it), the ok rows are counted; with futures, rows_ok counts
    the same rows."""
    async def go():
        rpc = Tablets()
        ops = [Write("a", 1), Cas("b", "bad", 2), Append("c", 3), Cas("d", "bad", 4)]
        session = client_of(rpc).new_session("t", SessionOptions(mode, row_futures=False))
        assert [await session.apply(op.key, op) for op in ops] == [None] * 4
        await session.flush()
        assert session.rows_ok == 2 and session.count_pending_errors() == 2
        errors = session.pending_errors()
        assert [e.op for e in errors] == [ops[1], ops[3]]
        assert {e.error.error for e in errors} == {Rejection.CAS_MISMATCH}
        assert session.pending_errors() == [] and session.count_pending_errors() == 0
        assert (len(rpc.batches), len(rpc.writes)) == ((1, 0) if mode == FlushMode.MANUAL_FLUSH
                                                       else (0, 4))
        with_futures = client_of(Tablets()).new_session("t", SessionOptions(mode))
        futs = [await with_futures.apply(op.key, op) for op in ops]
        await with_futures.flush()
        assert with_futures.rows_ok == 2 and with_futures.count_pending_errors() == 0
        assert [f.result().result.ok for f in futs] == [True, False, True, False]
    run(go())


def test_without_row_futures_a_batch_nobody_answered_makes_every_row_an_error():
    class Down(Tablets):
        async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
            if method == "ts.write_batch":
                raise RpcError(ErrorCode.NETWORK, "connection refused")
            return await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                      timeout=timeout)

    async def go():
        session = client_of(Down(), timeout=0.3).new_session(
            "t", SessionOptions(FlushMode.MANUAL_FLUSH, row_futures=False))
        ops = [Write(f"k{i}", i) for i in range(3)]
        for op in ops:
            await session.apply(op.key, op)
        await session.flush()
        errors = session.pending_errors()
        assert [e.op for e in errors] == ops and session.rows_ok == 0
        assert all(isinstance(e.error, (OpFailed, OpUnknown)) for e in errors)
    run(go())


def test_a_batch_on_a_session_evicted_before_any_attempt_is_resent_on_a_new_one():
    async def go():
        rpc = Tablets(no_session_first=True)
        session = client_of(rpc).new_session("t", SessionOptions(FlushMode.MANUAL_FLUSH))
        futs = [await session.apply(k, Write(k, 1)) for k in "ab"]
        await session.flush()
        assert [f.result().result.ok for f in futs] == [True, True]
        assert [(b.session, b.seq) for b in rpc.batches] == [(1, 1), (2, 1)]
    run(go())


def test_a_first_try_refused_as_a_stale_seq_goes_again_in_a_new_session():
    """A seq refused STALE_SEQ on its only attempt was never applied (the session's kept
    results moved past it while it waited): it goes again in a new session, as after an
    eviction, one write alone and a batch alike. Before, the write was reported unknown and
    the batch's ops too, though nothing had applied them."""
    async def go():
        rpc = Tablets(stale_first=True)
        client = client_of(rpc)
        row = await client.op("t", "a", Write("a", 1))
        assert row.result.ok and [(w.session, w.seq) for w in rpc.writes] == [(1, 1), (2, 1)]
        session = client.new_session("t", SessionOptions(FlushMode.MANUAL_FLUSH))
        futs = [await session.apply(k, Write(k, 1)) for k in "bc"]
        await session.flush()
        assert [f.result().result.ok for f in futs] == [True, True]
        assert len(rpc.batches) == 2 and rpc.batches[0].session != rpc.batches[1].session
    run(go())


class LosingTablets(Tablets):
    """Applies the first batch, then loses its reply; answers a retry from its dedup record."""

    def __init__(self):
        super().__init__()
        self.applied: dict = {}  # (session, seq) -> result
        self.lost = False

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        if method != "ts.write_batch":
            return await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                      timeout=timeout)
        self.batches.append(request)
        results = []
        for i in range(len(request.ops)):
            key = (request.session, request.seq + i)
            if key not in self.applied:
                self.applied[key] = Result(True, timestamp=len(self.applied) + 1)
            results.append(self.applied[key])
        if not self.lost:
            self.lost = True
            raise RpcError(ErrorCode.DEADLINE_EXCEEDED, "reply lost", maybe_delivered=True)
        return BatchResult(results, request.seq)


def test_a_lost_batch_reply_is_retried_with_the_same_session_and_seqs():
    async def go():
        rpc = LosingTablets()
        session = client_of(rpc).new_session("t", SessionOptions(FlushMode.MANUAL_FLUSH))
        futs = [await session.apply(k, Append(k, 1)) for k in "abc"]
        await session.flush()
        first, retry = rpc.batches
        assert first == retry  # unchanged: same session, seqs, ops, acked_below
        assert [f.result().result.timestamp for f in futs] == [1, 2, 3]  # first results
        assert len(rpc.applied) == 3
        # the next batch continues the seqs and acks the first one
        fut = await session.apply("d", Append("d", 1))
        await session.flush()
        assert (rpc.batches[-1].seq, rpc.batches[-1].acked_below) == (4, 4)
        assert fut.result().result.ok
    run(go())


def test_a_batch_nothing_answers_fails_each_op_unknown_or_failed():
    class Silent(Tablets):
        async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
            if method == "ts.write_batch":
                self.batches.append(request)
                raise RpcError(ErrorCode.DEADLINE_EXCEEDED, "no reply", maybe_delivered=True)
            return await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                      timeout=timeout)

    async def go():
        rpc = Silent()
        session = client_of(rpc, timeout=0.5).new_session(
            "t", SessionOptions(FlushMode.MANUAL_FLUSH))
        futs = [await session.apply(k, Write(k, 1)) for k in "ab"]
        await session.flush()
        for f in futs:
            with pytest.raises(OpUnknown):
                f.result()
        assert len({(b.session, b.seq) for b in rpc.batches}) == 1  # only ever the same seqs
    run(go())


class Held(Tablets):
    """Holds every batch until `release` is set."""

    def __init__(self):
        super().__init__()
        self.release = asyncio.Event()

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        if method == "ts.write_batch":
            await self.release.wait()
        return await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                  timeout=timeout)


def test_background_applies_wait_while_every_buffer_of_the_tablet_is_in_flight():
    async def go():
        rpc = Held()
        session = client_of(rpc).new_session("t", background(max_batch_ops=1, max_buffers=2))
        await session.apply("a", Write("a", 1))  # batch 1 in flight
        await session.apply("b", Write("b", 1))  # batch 2 queued behind it
        third = asyncio.ensure_future(session.apply("c", Write("c", 1)))
        await asyncio.sleep(0.1)
        assert not third.done()  # both buffers taken: Kudu's Apply blocks
        rpc.release.set()
        await asyncio.wait_for(third, 1)
        await session.flush()
        assert [b.seq for b in rpc.batches] == [1, 2, 3]  # in order, one at a time
    run(go())


# -- Table handles on a MANUAL_FLUSH session (Workload.writes session-manual) ---------------

def test_callers_of_one_manual_session_flush_their_ops_together_and_each_gets_its_own_result():
    """A handle on a MANUAL_FLUSH session applies its write and flushes it itself (Table._op):
    two callers woken in one turn share one batch, one cas told its mismatch, the other its
    success, as if each had written alone."""
    async def go():
        rpc = Tablets()
        client = client_of(rpc)
        session = client.new_session("t", SessionOptions(FlushMode.MANUAL_FLUSH))
        a, b = client.table("t", session=session), client.table("t", session=session)
        assert await a.write("z", 3) == 42 and a.node == "h0:1"  # alone: a batch of one
        # the location is cached now, so apply does not yield: only the turn yielded before
        # the flush lets b's op join a's batch
        assert await asyncio.gather(a.cas("x", "bad", 1), b.cas("y", None, 2)) == [False, True]
        assert [len(batch.ops) for batch in rpc.batches] == [1, 2] and rpc.writes == []
        assert session.buffered == 0 and session.flush_reasons == {"flush": 2}
    run(go())


def test_a_manual_session_caller_that_finds_the_buffer_full_flushes_and_applies_again():
    async def go():
        rpc = Tablets()
        client = client_of(rpc)
        session = client.new_session("t", SessionOptions(FlushMode.MANUAL_FLUSH, max_batch_ops=2,
                                                         buffer_bytes=200))
        tables = [client.table("t", session=session) for _ in range(5)]
        stamps = await asyncio.gather(*(t.append(f"k{i}", i) for i, t in enumerate(tables)))
        assert stamps == [42] * 5
        sizes = [len(batch.ops) for batch in rpc.batches]
        assert sum(sizes) == 5 and max(sizes) == 2, sizes
        # an op that alone exceeds the buffer space can never be applied: it fails, never sent
        with pytest.raises(OpFailed, match="buffer space"):
            await tables[0].write("big", "x" * 300)
        assert sum(len(batch.ops) for batch in rpc.batches) == 5
    run(go())


def test_a_manual_session_caller_that_gives_up_drops_its_op_and_not_the_others_batches():
    """A caller cancelled (its op timed out) while its batch waits behind another: its op is
    dropped, never sent; the flush it had started is not cancelled, so the batch carrying the
    other caller's op is answered."""
    async def go():
        rpc = Held()
        client = client_of(rpc)
        session = client.new_session("t", SessionOptions(FlushMode.MANUAL_FLUSH))
        a, b = client.table("t", session=session), client.table("t", session=session)
        first = asyncio.ensure_future(a.write("a", 1))
        await asyncio.sleep(0.05)  # a's batch sent, held
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(b.write("b", 2), 0.05)  # queued behind a's, then given up
        rpc.release.set()
        assert await asyncio.wait_for(first, 1) == 42
        await session.flush()
        assert [[op.key for op in batch.ops] for batch in rpc.batches] == [["a"]]
    run(go())


def test_options_keep_a_batch_within_the_tablets_session_bound():
    with pytest.raises(ValueError, match="max_batch_ops must be 1..128"):
        SessionOptions(max_batch_ops=129)
    assert SessionOptions().max_batch_ops == 64


# -- a real loopback cluster -----------------------------------------------------------------

class SpyRpc(RpcClient):
    """Counts write_batch calls; `on_first_batch_reply` runs once, after the first batch's
    reply arrived, and then that reply is lost."""

    def __init__(self):
        super().__init__(connect_timeout=CONNECT_TIMEOUT)
        self.batches: list = []
        self.on_first_batch_reply = None

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        res = await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                 timeout=timeout)
        if method == "ts.write_batch":
            self.batches.append((addr, request, res))
            if self.on_first_batch_reply is not None:
                hook, self.on_first_batch_reply = self.on_first_batch_reply, None
                await hook(addr)
                raise RpcError(ErrorCode.DEADLINE_EXCEEDED, "reply lost", maybe_delivered=True)
        return res


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from loopback_cluster(tmp_path_factory, "sessions")


async def _table(c: LocalCluster, name: str, spy: SpyRpc):
    client = TesseraClient(c.master_addrs, timeout=8.0, rpc=spy)
    locs = await client.create_table(name, num_tablets=1, replication_factor=3)
    await c.tablet_leader(client.rpc, locs.tablets[0].tablet_id, timeout=10)
    return client, client.table(name)


@pytest.mark.e2e
@pytest.mark.slow
def test_cluster_row_errors_fail_only_their_rows(cluster):
    async def go():
        spy = SpyRpc()
        client, table = await _table(cluster, "rows", spy)
        await table.write("x", 1)
        session = table.new_session(SessionOptions(FlushMode.MANUAL_FLUSH))
        ops = [Write("a", 1), Cas("x", 99, 2), Append("l", "e"), Cas("x", 1, 3), Append("x", 0)]
        futs = [await session.apply(op.key, op) for op in ops]
        await session.flush()
        results = [f.result().result for f in futs]
        assert [r.ok for r in results] == [True, False, True, True, False]
        assert results[1].error == Rejection.CAS_MISMATCH and results[1].value == 1
        assert results[4].error == Rejection.WRONG_TYPE
        assert len({r.timestamp for r in results if r.ok}) == 1  # one entry, one timestamp
        assert len(spy.batches) == 1
        assert [await table.read(k) for k in ("a", "x", "l")] == [1, 3, ["e"]]
        await client.close()
    run(go())


@pytest.mark.e2e
@pytest.mark.slow
def test_cluster_rows_without_futures_are_counted_collected_and_written(cluster):
    """row_futures=False on real servers: 300 rows in background batches, every ok one counted
    and readable after close(), the one row error collected with its op."""
    async def go():
        spy = SpyRpc()
        client, table = await _table(cluster, "nofutures", spy)
        await table.write("x", 1)
        session = table.new_session(SessionOptions(FlushMode.AUTO_FLUSH_BACKGROUND,
                                                   row_futures=False))
        for i in range(300):
            assert await session.apply(f"r{i}", Write(f"r{i}", i)) is None
        await session.apply("x", Cas("x", 99, 2))
        await session.close()
        assert session.rows_ok == 300 and len(spy.batches) >= 5
        [error] = session.pending_errors()
        assert error.op == Cas("x", 99, 2) and error.error.error == Rejection.CAS_MISMATCH
        assert [await table.read(f"r{i}") for i in range(0, 300, 7)] == list(range(0, 300, 7))
        await client.close()
    run(go())


@pytest.mark.e2e
@pytest.mark.slow
def test_cluster_a_lost_batch_reply_is_retried_exactly_once(cluster):
    async def go():
        spy = SpyRpc()
        client, table = await _table(cluster, "lost", spy)

        async def nothing(addr):
            pass

        spy.on_first_batch_reply = nothing
        session = table.new_session(SessionOptions(FlushMode.MANUAL_FLUSH))
        futs = [await session.apply("l", Append("l", i)) for i in range(5)]
        futs.append(await session.apply("c", Cas("c", None, "set")))
        await session.flush()
        (_, sent, first), (_, resent, second) = spy.batches
        assert sent == resent and first == second  # same seqs; every first result back
        assert [f.result().result for f in futs] == first.results
        assert await table.read("l") == [0, 1, 2, 3, 4] and await table.read("c") == "set"
        await client.close()
    run(go())


@pytest.mark.e2e
@pytest.mark.slow
def test_cluster_a_batch_retried_after_a_leader_change_applies_once(cluster):
    async def go():
        spy = SpyRpc()
        client, table = await _table(cluster, "moved", spy)
        tablet = (await client.locations("moved")).tablets[0]
        old = await cluster.tablet_leader(spy, tablet.tablet_id)
        others = [p for p in tablet.replicas if p.port != cluster.daemons[old].port]

        async def move_leader(addr):  # the batch applied; its reply is lost; leadership moves
            leader = next(p for p in tablet.replicas if p.addr == addr)
            await spy.call(addr, "consensus.leader_step_down",
                           LeaderStepDown(tablet.tablet_id, others[0].uuid), Ack,
                           to_uuid=leader.uuid, timeout=5)
            await cluster.tablet_leader(spy, tablet.tablet_id, exclude=(old,), timeout=10)

        spy.on_first_batch_reply = move_leader
        session = table.new_session(SessionOptions(FlushMode.MANUAL_FLUSH))
        futs = [await session.apply("l", Append("l", i)) for i in range(4)]
        await session.flush()
        addrs = [a for a, _, _ in spy.batches]
        assert addrs[0] == ("127.0.0.1", cluster.daemons[old].port)
        assert addrs[-1] != addrs[0]  # answered by the new leader
        first = spy.batches[0][2].results
        assert [f.result().result for f in futs] == first
        assert await table.read("l") == [0, 1, 2, 3]
        await client.close()
    run(go())


@pytest.mark.e2e
@pytest.mark.slow
def test_cluster_two_callers_of_one_manual_session_each_get_their_own_result(cluster):
    """Table._op on a MANUAL_FLUSH session against real servers: two handles sharing the
    session, each op applied and flushed by its caller; they leave as one batch (one Raft
    entry), and each caller gets its own answer: a cas mismatch for one, an append for the
    other."""
    async def go():
        spy = SpyRpc()
        client, table = await _table(cluster, "manual", spy)
        await table.write("x", 1)
        session = table.new_session(SessionOptions(FlushMode.MANUAL_FLUSH))
        a, b = client.table("manual", session=session), client.table("manual", session=session)
        mismatch, stamp = await asyncio.gather(a.cas("x", 99, 2), b.append("l", "e"))
        assert mismatch is False and stamp > 0
        assert [len(req.ops) for _, req, _ in spy.batches] == [2]
        assert b.hybrid_time == stamp and a.hybrid_time is None  # a's op did not apply
        assert await a.cas("x", 1, 3) is True and [len(r.ops) for _, r, _ in spy.batches] == [2, 1]
        assert [await table.read(k) for k in ("x", "l")] == [3, ["e"]]
        await client.close()
    run(go())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 4), st.integers(0, 50)), max_size=60))
def test_a_tablet_sessions_acked_below_is_its_oldest_seq_in_flight(steps):
    """TabletSession against a model (the set of seqs in flight): runs of one and of many
    seqs, finished in any order; `acked_below` is always the lowest unfinished seq, or the
    next one when none is in flight, so a tablet forgets exactly the results nobody waits on."""
    from node.client.session import TabletSession

    s, flying, runs, issued = TabletSession(7), set(), [], 1
    for begin, n, pick in steps:
        if begin or not runs:
            first = s.begin(n)
            assert first == issued
            issued += n
            runs.append((first, n))
            flying.update(range(first, first + n))
        else:
            first, n = runs.pop(pick % len(runs))
            s.end(first)
            flying.difference_update(range(first, first + n))
        assert s.acked_below() == (min(flying) if flying else issued)


# -- what ties a reply to its request ------------------------------------------------------

class EchoesWrong(Tablets):
    """Answers each batch as if it were the request after it (echo seq + 1)."""

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        res = await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                 timeout=timeout)
        return msgspec.structs.replace(res, seq=res.seq + 1) if method == "ts.write_batch" \
            else res


@pytest.mark.parametrize("rpc,wrong", [(Tablets(), False), (EchoesWrong(), True)])
def test_a_write_is_told_what_it_went_as_and_an_answer_for_another_seq_is_a_wrong_reply(
        rpc, wrong):
    """Each write of a batch records its session, seq, batch and the seq its answer echoed; the
    handle refuses an answer for another seq as a WrongReply (its effect unknown)."""
    from node.errors import WrongReply

    async def go():
        client = client_of(rpc)
        manual = client.table("t", session=client.new_session(
            "t", SessionOptions(FlushMode.MANUAL_FLUSH)))
        handles = [client.table("t", session=manual.session) for _ in range(3)]
        outs = await asyncio.gather(*(h.write(f"k{i}", i) for i, h in enumerate(handles)),
                                    return_exceptions=True)
        return handles, outs

    handles, outs = run(go())
    if wrong:
        assert all(isinstance(o, WrongReply) for o in outs), outs
        assert outs[0].reply["sent"]["echo"] == outs[0].reply["sent"]["seq"] + 1
        return
    assert not any(isinstance(o, Exception) for o in outs), outs
    sent = [h.sent for h in handles]
    assert [s["seq"] for s in sent] == [1, 2, 3] and {s["batch"] for s in sent} == {1}
    assert all(s["ops"] == 3 and s["echo"] == s["seq"] and s["session"] == 1 for s in sent)


def _mutant(monkeypatch, name):
    from node.client import faults
    monkeypatch.setattr(faults, "FAULTS", faults.parse(name))


def test_the_misroute_fault_hands_each_caller_anothers_reply_and_the_handle_says_so(
        monkeypatch):
    from node.errors import WrongReply
    _mutant(monkeypatch, "misroute")

    async def go():
        client = client_of(Tablets())
        session = client.new_session("t", SessionOptions(FlushMode.MANUAL_FLUSH))
        handles = [client.table("t", session=session) for _ in range(2)]
        return await asyncio.gather(*(h.write(f"k{i}", i) for i, h in enumerate(handles)),
                                    return_exceptions=True)

    assert all(isinstance(o, WrongReply) for o in run(go()))


def test_the_drop_error_fault_answers_a_background_row_error_as_applied(monkeypatch):
    async def go():
        session = client_of(Tablets()).new_session("t", background())
        fut = await session.apply("k", Cas("k", "bad", 1))
        await session.flush()
        return fut.result().result

    assert not run(go()).ok
    _mutant(monkeypatch, "drop-error")
    assert run(go()).ok


def test_the_reuse_slot_fault_gives_a_cancelled_callers_outcome_to_the_next(monkeypatch):
    """Without the fault the caller after a cancelled one gets its own row; with it, the
    cancelled caller's."""
    class Slow(Tablets):
        async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
            await asyncio.sleep(0.05)
            return await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                      timeout=timeout)

    def go():
        async def inner():
            session = client_of(Slow()).new_session("t", background())
            futs = [await session.apply(f"k{i}", Write(f"k{i}", i)) for i in range(3)]
            session._cut(next(iter(session._buffers)), "flush")
            await asyncio.sleep(0.07)  # the batch is sent: its ops can no longer be dropped
            futs[0].cancel()
            await session.flush()
            return [f.result().sent.op.key for f in futs[1:]]
        return run(inner())

    assert go() == ["k1", "k2"]
    _mutant(monkeypatch, "reuse-slot")
    assert go() == ["k0", "k1"]


def test_the_new_seqs_fault_sends_a_retry_as_a_new_request(monkeypatch):
    """A lost answer: the fixed client resends the same seqs, the fault new ones."""
    class LosesFirst(Tablets):
        lost = False

        async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
            res = await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                     timeout=timeout)
            if method == "ts.write_batch" and not self.lost:
                self.lost = True
                raise RpcError(ErrorCode.DEADLINE_EXCEEDED, "lost", maybe_delivered=True)
            return res

    def seqs():
        rpc = LosesFirst()

        async def inner():
            session = client_of(rpc).new_session("t", background())
            for i in range(2):
                await session.apply(f"k{i}", Write(f"k{i}", i))
            await session.flush()
        run(inner())
        return [b.seq for b in rpc.batches]

    assert seqs() == [1, 1]
    _mutant(monkeypatch, "new-seqs")
    assert seqs() == [1, 3]


def test_a_failed_batch_leaves_no_reference_cycle_holding_its_frames():
    """A batch whose every attempt failed is freed by reference counting. Kept past its except
    clause with its traceback, an exception formed cycles (exception -> traceback -> frame ->
    the exception, or the futures failed with it) that held the batch's encoded ops until a
    full collection; with the rare full collections the simulator and the daemons run, a load
    of wide values under faults outgrew memory."""
    import gc
    import types

    class Silent(Tablets):
        async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
            if method == "ts.write_batch":
                raise RpcError(ErrorCode.NETWORK, "refused", maybe_delivered=False)
            return await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                      timeout=timeout)

    async def go():
        session = client_of(Silent(), timeout=0.3).new_session(
            "t", SessionOptions(FlushMode.MANUAL_FLUSH))
        futs = [await session.apply(k, Write(k, 1)) for k in "ab"]
        await session.flush()
        assert all(isinstance(f.exception(), OpFailed) for f in futs)

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        run(go())
        gc.collect()
        cycled = {o.f_code.co_name for o in gc.garbage if isinstance(o, types.FrameType)}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not cycled & {"_retry", "_to_leader", "write_batch", "_send", "call"}, cycled


# -- a caller that gives up on a flush, or closes while an apply looks up its tablet ---------

async def flush_given_up(session) -> None:
    """What a user bounding its own flush does: wait_for cancels the flush at 0.1 s."""
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(session.flush(), 0.1)


def test_a_flush_its_caller_gives_up_on_still_answers_every_op_of_its_batch():
    """The batch went out and applied; before, giving up on the flush cancelled it in flight
    and its op's future never ended."""
    async def go():
        rpc = Held()
        session = client_of(rpc).new_session("t", background())
        fut = await session.apply("a", Write("a", 1))
        await flush_given_up(session)
        rpc.release.set()  # the tablet answers: applied
        assert await settled([fut], timeout=5) == 1, "the op never got an outcome"
        assert fut.result().result.ok
    run(go())


def test_a_flush_its_caller_gives_up_on_still_counts_every_row_without_row_futures():
    async def go():
        rpc = Held()
        session = client_of(rpc).new_session("t", background(row_futures=False))
        await session.apply("a", Write("a", 1))
        await flush_given_up(session)
        rpc.release.set()
        await session.flush()
        assert (session.rows_ok, session.count_pending_errors()) == (1, 0)
    run(go())


def test_a_batch_cancelled_in_flight_raises_the_alarm_and_a_flush_given_up_does_not():
    """The alarm the whole-stack simulator fails a seed on (node.probes.ALARMS): a batch task
    cancelled, as the flush's old `gather` cancelled every batch when its caller gave up."""
    cancelled = "client.session.batch_cancelled_in_flight"

    async def go():
        rpc = Held()
        session = client_of(rpc).new_session("t", background())
        with probes.counting() as counted:
            await session.apply("a", Write("a", 1))
            await flush_given_up(session)
            rpc.release.set()
            await session.flush()
            assert not counted[cancelled]
            rpc.release.clear()
            fut = await session.apply("b", Write("b", 1))
            waiting = asyncio.ensure_future(session.flush())
            await asyncio.sleep(0.05)
            for batch in list(session._flushes):
                batch.cancel()  # what gather did to them when its caller was cancelled
            await asyncio.wait_for(waiting, 5)
            assert counted[cancelled] == 1 and not fut.done()
            assert probes.ALARMS[cancelled]
    run(go())


class SlowLocations(Tablets):
    """The master takes 0.1 s to answer for the table's locations."""

    async def call(self, addr, method, request, response_type, *, to_uuid, timeout):
        if method == "master.table_locations":
            await asyncio.sleep(0.1)
        return await super().call(addr, method, request, response_type, to_uuid=to_uuid,
                                  timeout=timeout)


def test_an_apply_still_locating_its_tablet_when_the_session_closes_is_refused():
    """Before, it was buffered after close() returned: in MANUAL_FLUSH never sent, its future
    never ended."""
    async def go():
        session = client_of(SlowLocations()).new_session(
            "t", SessionOptions(FlushMode.MANUAL_FLUSH))
        applying = asyncio.ensure_future(session.apply("k", Write("k", 1)))
        await asyncio.sleep(0.01)  # the apply awaits the table's locations
        with probes.expect("client.session.apply_closed_while_locating"):
            await session.close()
            with pytest.raises(OpFailed, match="session closed"):
                await applying
        assert session.buffered == 0
    run(go())
