"""ts.write_batch on a real tablet server (one replica, in process): one Raft entry per batch
with a result per op, and the refusals that happen before anything is proposed."""

import asyncio

import pytest
from tserver_helpers import TABLET, create, direct, sole_leader, start_server, ts_write

from node.protocol import Write, WriteBatch
from node.rpc import ErrorCode, RpcError
from node.tablet.ops import Append, Batch, Cas, OpenSession
from node.tablet.ops import Write as Put


def test_a_batch_is_one_entry_with_a_result_per_op_and_bad_batches_are_refused(tmp_path):
    async def main():
        ts = await start_server(tmp_path / "a")
        try:
            await create(ts, [ts.me])
            r = await sole_leader(ts)
            session = (await ts_write(ts, Write(TABLET, OpenSession()))).result.value
            before = r.state.last_applied_index
            ops = [Put("a", 1), Cas("a", 5, 6), Append("l", "x")]
            res = await direct(ts.service.on_write_batch, WriteBatch(TABLET, ops, session, 1))
            assert [x.ok for x in res.results] == [True, False, True]
            assert r.state.last_applied_index == before + 1  # ONE entry for the whole batch
            again = await direct(ts.service.on_write_batch, WriteBatch(TABLET, ops, session, 1))
            assert again == res and r.state.data == {"a": 1, "l": ["x"]}
            limit = r.state.limits.max_results_per_session
            too_many = [Append("l", i) for i in range(limit + 1)]
            with pytest.raises(RpcError) as e:
                await direct(ts.service.on_write_batch, WriteBatch(TABLET, too_many, session, 4))
            assert e.value.code == ErrorCode.INVALID_ARGUMENT and "exceeds" in str(e.value)
            with pytest.raises(RpcError) as e:
                await direct(ts.service.on_write_batch, WriteBatch(TABLET, [], session, 4))
            assert e.value.code == ErrorCode.INVALID_ARGUMENT
            with pytest.raises(RpcError) as e:
                await ts_write(ts, Write(TABLET, Batch(ops), session, 4))
            assert e.value.code == ErrorCode.INVALID_ARGUMENT
            assert r.state.last_applied_index == before + 2  # nothing refused was proposed
        finally:
            await ts.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
