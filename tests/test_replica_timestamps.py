"""Hybrid timestamps on the production replica (in-process, tests/replica_net.py): writes return
them, they increase in log order also across a leader change to a replica whose clock is behind,
and commit-wait holds the ack until the clock minus its max error is past the timestamp."""

import asyncio
import time

from replica_net import Net, open_session

from node.clock import make, physical_us
from node.tablet.ops import Write


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def _write(r, session, seq, key, value):
    return await r.write(Write(key, value), session=session, seq=seq, acked_below=seq)


def test_commit_wait_acks_only_once_now_minus_max_error_is_past_the_timestamp(tmp_path):
    max_error_us = 150_000

    async def main():
        net = Net(tmp_path)
        net.start()
        try:
            for r in net.replicas.values():
                r.clock.max_error_us = max_error_us
            leader = await net.leader()
            session = await open_session(leader)
            for seq in (1, 2, 3):
                waits = leader.stats["commit_waits"]
                began_us = time.time_ns() // 1000
                res = await _write(leader, session, seq, "k", seq)
                # Measured right after the ack, on the same physical clock the leader uses: its
                # earliest possible now is already past the write's timestamp.
                now_us = time.time_ns() // 1000
                assert res.ok and res.timestamp > 0
                assert now_us - max_error_us > physical_us(res.timestamp)
                # The ack was held back, unless replicating alone took longer than the max
                # error (a loaded machine): a write answered sooner than that must have waited.
                assert leader.stats["commit_waits"] == waits + 1 or \
                    now_us - began_us >= max_error_us, (seq, now_us - began_us)
            # A retry of an acknowledged seq returns the first result, timestamp included.
            again = await _write(leader, session, 3, "k", 99)
            assert again.timestamp == res.timestamp and leader.state.data["k"] == 3
        finally:
            await net.stop()

    run(main())


def test_timestamps_increase_across_a_leader_change_to_a_lagging_clock(tmp_path):
    skew_ns = 50_000_000  # the followers' clocks run 50 ms behind the first leader's

    async def main():
        net = Net(tmp_path)
        net.start()
        try:
            first = await net.leader()
            for u, r in net.replicas.items():
                if u != first.uuid:
                    r.clock._now_ns = lambda: time.time_ns() - skew_ns
            session = await open_session(first)
            stamps = []
            for seq in range(1, 6):
                stamps.append((await _write(first, session, seq, f"k{seq}", seq)).timestamp)
            net.cut.add(first.uuid)  # the first leader is partitioned away
            second = await net.leader(among={u for u in net.replicas if u != first.uuid})
            # A new leader's clock has witnessed every timestamp in its log, whatever its
            # physical clock says.
            assert second.clock.now() > stamps[-1]
            for seq in range(6, 11):
                stamps.append((await _write(second, session, seq, f"k{seq}", seq)).timestamp)
            assert all(a < b for a, b in zip(stamps, stamps[1:], strict=False)), stamps
            # Every replica applied the same timestamps: a later leader, whichever, exceeds them.
            net.cut.clear()
            for r in net.replicas.values():
                for _ in range(500):
                    if r.state.last_applied_index >= second.state.last_applied_index:
                        break
                    await asyncio.sleep(0.01)
                assert r.state.last_timestamp == stamps[-1]
        finally:
            await net.stop()

    run(main())


def test_a_client_propagated_write_is_answered_without_commit_wait_above_what_it_propagated(
        tmp_path):
    """Kudu's CLIENT_PROPAGATED on the production replica: the write is answered once applied,
    however large the max error (COMMIT_WAIT would hold it 2 s), and its timestamp exceeds the
    one the client propagated, even one a minute ahead of the leader's clock (another leader's,
    skewed); single writes that share a Group entry are answered each in its own mode."""
    from node.probes import expect

    async def main():
        net = Net(tmp_path)
        net.start()
        try:
            leader = await net.leader()
            session = await open_session(leader)
            # one Group entry, one member each way: the client-propagated one is answered first
            for r in net.replicas.values():
                r.clock.max_error_us = 200_000
            done: list[str] = []

            async def one(seq, wait):
                r = await leader.write(Write(f"g{seq}", seq), session=session, seq=seq,
                                       acked_below=1, commit_wait=wait)
                done.append("waited" if wait else "propagated")
                return r

            with expect("replica.write.group_modes_mixed"):
                results = await asyncio.gather(one(1, True), one(2, False))
            assert all(r.ok for r in results) and done == ["propagated", "waited"]
            assert results[0].timestamp == results[1].timestamp  # one entry: one timestamp
            for r in net.replicas.values():
                r.clock.max_error_us = 2_000_000
            ahead = make(physical_us(leader.clock.now()) + 60_000_000)  # a minute ahead
            waits = leader.stats["commit_waits"]
            with expect("replica.write.client_propagated", "replica.clock.propagated_ahead"):
                res = await leader.write(Write("k", 1), session=session, seq=3, acked_below=3,
                                         propagated=ahead, commit_wait=False)
            assert res.ok and res.timestamp > ahead
            # no wait at all (a COMMIT_WAIT write would now wait a minute, past `ahead`)
            assert leader.stats["commit_waits"] == waits
        finally:
            await net.stop()

    run(main())
