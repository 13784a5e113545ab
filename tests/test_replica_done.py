"""A caller's result callback (a Done) runs in the replica's driver: one that raises is logged,
and the replica goes on serving (the driver stops on any exception it sees, as on a failed
fsync, so an unguarded callback bug would take the tablet down)."""

import asyncio

from tserver_helpers import TABLET, create, sole_leader, start_server, ts_write

from node.protocol import Write
from node.tablet.ops import OpenSession
from node.tablet.ops import Write as Put


def test_a_raising_done_is_logged_and_the_replica_serves_on(tmp_path, caplog):
    async def main():
        # No clock error bound: no commit-wait timer, so the callback runs in the driver itself.
        ts = await start_server(tmp_path / "a", clock_max_error_us=0)
        try:
            await create(ts, [ts.me])
            r = await sole_leader(ts)
            session = (await ts_write(ts, Write(TABLET, OpenSession()))).result.value
            called = asyncio.get_running_loop().create_future()

            def bad(result, error):
                called.set_result(result)
                raise RuntimeError("a caller's bug")

            r.submit(Put("a", 1), session, 1, 1, bad)
            assert (await called).ok
            res = await ts_write(ts, Write(TABLET, Put("b", 2), session=session, seq=2))
            assert res.result.ok and r.failed is None
            assert r.state.data == {"a": 1, "b": 2}
        finally:
            await ts.stop()

    asyncio.run(asyncio.wait_for(main(), 30))
    assert "a result callback raised" in caplog.text
