"""The simulator's event loop and network: virtual time, the real RPC stack over simulated TCP,
partitions, crashes without cleanup, and bit-for-bit replay of a seed."""

import asyncio
import gc
import random
import threading
import time

import msgspec
import pytest

from harness.sim.loop import SimDeadlock, SimLoop
from harness.sim.network import SimNetwork
from node.rpc import ErrorCode, RpcClient, RpcError, RpcServer
from node.rpc.deadlines import GRANULARITY
from node.security.acl import ALL_ROLES

SERVER, CLIENT = "10.77.0.101", "10.77.0.102"


class Echo(msgspec.Struct):
    text: str
    delay: float = 0.0


class EchoReply(msgspec.Struct):
    text: str


async def _echo(req: Echo) -> EchoReply:
    await asyncio.sleep(req.delay)
    return EchoReply(req.text.upper())


async def _serve(port=7000, handler=_echo):
    srv = RpcServer("srv", rules={"echo": ALL_ROLES})
    srv.register("echo", Echo, handler)
    return srv, await srv.start(SERVER, port)


def _sim(seed=0, **kw):
    net = SimNetwork(seed, **kw)
    return SimLoop(net), net


def _call(cli, addr, text="x", delay=0.0, timeout=5.0):
    return cli.call(addr, "echo", Echo(text, delay), EchoReply, to_uuid="srv", timeout=timeout)


def test_sleep_jumps_virtual_time_instantly():
    loop, _ = _sim()
    fired = []
    for i in range(3):  # equal deadlines fire in the order they were set
        loop.call_later(10, fired.append, i)
    wall = time.monotonic()
    loop.run_until_complete(asyncio.sleep(3600))
    assert time.monotonic() - wall < 1
    assert loop.time() == 3600
    assert fired == [0, 1, 2]

    async def slow():
        await asyncio.sleep(100)

    async def bounded():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow(), 2.5)
        return loop.time()

    assert loop.run_until_complete(bounded()) == 3602.5
    loop.close()


def test_waiting_for_the_impossible_is_a_deadlock():
    loop, _ = _sim()
    with pytest.raises(SimDeadlock):
        loop.run_until_complete(loop.create_future())
    loop.close()


def test_to_thread_runs_inline_without_threads():
    loop, _ = _sim()
    caller = threading.get_ident()
    threads = threading.active_count()

    def work(x):
        assert threading.get_ident() == caller
        if x < 0:
            raise ValueError(x)
        return x * 2

    async def go():
        assert await asyncio.to_thread(work, 21) == 42
        fut = loop.run_in_executor(None, work, 1)
        assert fut.done() and fut.result() == 2  # already resolved when returned
        with pytest.raises(ValueError):
            await asyncio.to_thread(work, -1)
        return loop.time()

    assert loop.run_until_complete(go()) == 0.0
    assert threading.active_count() == threads
    loop.close()


def test_rpc_over_the_sim_network_partition_then_heal():
    loop, net = _sim(1)

    async def go():
        _, addr = await loop.spawn(SERVER, _serve())
        assert addr == (SERVER, 7000)
        cli = RpcClient(local_host=CLIENT)
        assert (await _call(cli, addr, "hi", delay=1.0)).text == "HI"
        assert 1.0 < loop.time() < 1.02

        net.partition([[SERVER], [CLIENT]])
        t0 = loop.time()
        with pytest.raises(RpcError) as ei:
            await _call(cli, addr, timeout=2.0)
        assert ei.value.code == ErrorCode.DEADLINE_EXCEEDED
        assert 2.0 <= loop.time() - t0 <= 2.0 + GRANULARITY  # deadlines fire in buckets
        assert net.stats["held"] >= 1

        net.heal()
        assert (await _call(cli, addr, "again")).text == "AGAIN"
        await cli.close()

    loop.run_until_complete(loop.spawn(CLIENT, go()))
    assert net.stats["connections"] == 1  # the partition held bytes; it did not break TCP
    loop.close()


def test_connecting_across_a_partition_waits_for_the_connect_timeout():
    loop, net = _sim(2)

    async def go():
        _, addr = await loop.spawn(SERVER, _serve())
        net.partition([[SERVER], [CLIENT]])
        cli = RpcClient(local_host=CLIENT, connect_timeout=3.0)
        with pytest.raises(RpcError) as ei:
            await _call(cli, addr)
        assert ei.value.code == ErrorCode.NETWORK and "cannot connect" in ei.value.message
        assert loop.time() == pytest.approx(3.0)
        net.heal()
        assert (await _call(cli, addr, "late")).text == "LATE"
        await cli.close()

    loop.run_until_complete(loop.spawn(CLIENT, go()))
    loop.close()


def test_a_crashed_host_runs_no_cleanup_and_refuses_until_restarted():
    loop, net = _sim(3)
    cleaned, started = [], []

    async def handler(req: Echo) -> EchoReply:
        started.append(loop.time())
        loop.call_later(2.0, cleaned.append, "timer")  # pending when the host dies
        try:
            await asyncio.sleep(10)
            return EchoReply("late")
        finally:
            cleaned.append(req.text)

    async def go():
        _, addr = await loop.spawn(SERVER, _serve(handler=handler))
        cli = RpcClient(local_host=CLIENT)
        call = asyncio.ensure_future(_call(cli, addr, "doomed", timeout=5.0))
        await asyncio.sleep(1.0)
        assert len(started) == 1
        loop.crash_host(SERVER)
        with pytest.raises(RpcError) as ei:
            await call
        assert ei.value.code == ErrorCode.NETWORK  # reset by the crash, before the deadline
        assert loop.time() < 1.1

        with pytest.raises(RpcError) as ei:
            await _call(cli, addr)
        assert ei.value.code == ErrorCode.NETWORK and "Connect call failed" in ei.value.message

        await asyncio.sleep(20)  # the handler's sleep would have ended long ago
        gc.collect()
        assert cleaned == []

        _, again = await loop.spawn(SERVER, _serve(handler=_echo))  # restart on the same port
        assert again == addr
        assert (await _call(cli, addr, "back")).text == "BACK"
        await cli.close()

    loop.run_until_complete(loop.spawn(CLIENT, go()))
    assert [p.host for p in loop.graveyard] == [SERVER]
    assert net.stats["refused"] == 1
    loop.close()


def test_reset_connection_fails_pending_calls_and_the_client_reconnects():
    loop, net = _sim(4)

    async def go():
        _, addr = await loop.spawn(SERVER, _serve())
        cli = RpcClient(local_host=CLIENT)
        call = asyncio.ensure_future(_call(cli, addr, delay=3.0))
        await asyncio.sleep(0.5)
        assert net.reset_random_connection() is not None
        with pytest.raises(RpcError) as ei:
            await call
        assert ei.value.code == ErrorCode.NETWORK
        assert net.stats["resets"] == 2  # both ends saw ConnectionResetError
        assert (await _call(cli, addr, "new")).text == "NEW"
        assert net.stats["connections"] == 2
        await cli.close()

    loop.run_until_complete(loop.spawn(CLIENT, go()))
    loop.close()


def test_addresses_ports_and_refusals():
    loop, _ = _sim()

    async def go():
        await loop.spawn(SERVER, _serve())
        _, picked = await loop.spawn(SERVER, _serve(port=0))
        assert picked[0] == SERVER and picked[1] not in (0, 7000)
        with pytest.raises(OSError, match="in use"):
            await loop.spawn(SERVER, _serve())
        with pytest.raises(ValueError, match="local_addr"):
            await asyncio.open_connection(SERVER, 7000)
        with pytest.raises(OSError, match="cannot use address"):
            await asyncio.open_connection(SERVER, 7000, local_addr=(SERVER, 0))
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(SERVER, 7001, local_addr=(CLIENT, 0))

    loop.run_until_complete(loop.spawn(CLIENT, go()))
    loop.close()


def test_streams_arrive_in_order_despite_random_latency_and_a_slow_reader():
    loop, net = _sim(5, latency=(0.001, 0.05))
    chunks = [bytes([i % 251]) * (1 + i * 97 % 5000) for i in range(400)]  # ~1 MB in all
    received = []

    async def slow_reader(reader, writer):
        while data := await reader.read(3000):
            received.append(data)
            await asyncio.sleep(0.001)  # the buffer fills up: reading pauses, then resumes
        writer.close()

    async def go():
        await loop.spawn(SERVER, asyncio.start_server(slow_reader, SERVER, 9000))
        reader, writer = await asyncio.open_connection(SERVER, 9000, local_addr=(CLIENT, 0))
        for chunk in chunks:
            writer.write(chunk)
        writer.write_eof()
        assert await reader.read() == b""  # the server saw EOF after every byte, then closed
        writer.close()

    loop.run_until_complete(loop.spawn(CLIENT, go()))
    assert b"".join(received) == b"".join(chunks)
    assert net.stats["messages"] == len(chunks)
    loop.close()


def test_a_delayed_flow_is_overtaken_by_the_other_connection_and_keeps_its_own_order():
    """`delay_flow`: what CLIENT sends SERVER on the connection CLIENT opened is late, what it
    sends on the connection SERVER opened is not, so a later send on the second overtakes an
    earlier one on the first; each connection stays in order, and a heal ends the delay."""
    loop, net = _sim(3, latency=(0.001, 0.002))
    arrived: list[tuple[float, bytes]] = []

    async def record(reader, writer):
        while data := await reader.read(100):
            arrived.append((loop.time(), data))

    async def go():
        await loop.spawn(SERVER, asyncio.start_server(record, SERVER, 9000))
        await loop.spawn(CLIENT, asyncio.start_server(record, CLIENT, 9001))
        _, own = await asyncio.open_connection(SERVER, 9000, local_addr=(CLIENT, 0))
        peer = await loop.spawn(SERVER, asyncio.open_connection(CLIENT, 9001,
                                                                 local_addr=(SERVER, 0)))
        loop.spawn(SERVER, record(peer[0], peer[1]))  # SERVER reads what CLIENT answers
        await asyncio.sleep(0.1)
        reply = next(ep for pair in net._conns.values() for ep in pair
                     if ep.host == CLIENT and ep.get_extra_info("sockname")[1] == 9001)
        net.delay_flow(CLIENT, SERVER, CLIENT, 1.0)
        assert net.flow_delayed(CLIENT, SERVER, CLIENT) == 1.0
        assert net.flow_delayed(CLIENT, SERVER, SERVER) == 0.0
        own.write(b"request")
        await asyncio.sleep(0.1)
        reply.write(b"answer")  # CLIENT answering on the connection SERVER opened
        own.write(b"second")
        await asyncio.sleep(2.0)
        net.heal()
        assert net.flow_delayed(CLIENT, SERVER, CLIENT) == 0.0
        own.write(b"after")
        arrived.append((loop.time(), b"<after written>"))
        await asyncio.sleep(0.1)
        own.close()
        peer[1].close()

    loop.run_until_complete(loop.spawn(CLIENT, go()))
    order = [data for _, data in arrived]
    assert order == [b"answer", b"request", b"second", b"<after written>", b"after"], arrived
    at = {data: t for t, data in arrived}
    assert at[b"request"] - 0.1 >= 1.0 and at[b"answer"] - 0.2 < 0.01
    assert at[b"after"] - at[b"<after written>"] < 0.01  # healed: no longer late
    loop.close()


def _scenario(seed: int) -> list[tuple]:
    """Three clients calling one server with random delays, through a partition and a heal."""
    loop, net = _sim(seed, record=True)
    rng = random.Random(seed)
    trace: list[tuple] = []

    async def client(host: str, addr):
        cli = RpcClient(local_host=host, connect_timeout=1.0)
        for i in range(8):
            await asyncio.sleep(rng.uniform(0, 0.5))
            try:
                r = await _call(cli, addr, f"{host}-{i}", delay=rng.uniform(0, 0.2), timeout=1.0)
                trace.append((loop.time(), host, r.text))
            except RpcError as e:
                trace.append((loop.time(), host, e.code.name))
        await cli.close()

    async def nemesis():
        await asyncio.sleep(1.0)
        net.partition([[SERVER, "10.77.0.103"], ["10.77.0.104", "10.77.0.105"]])
        trace.append((loop.time(), "partition"))
        await asyncio.sleep(1.5)
        net.heal()
        trace.append((loop.time(), "heal"))

    async def main():
        _, addr = await loop.spawn(SERVER, _serve())
        clients = [loop.spawn(f"10.0.0.{n}", client(f"10.0.0.{n}", addr)) for n in (3, 4, 5)]
        await asyncio.gather(nemesis(), *clients)

    loop.run_until_complete(main())
    loop.close()
    return trace + net.log + [tuple(sorted(net.stats.items()))]


def test_a_seed_replays_bit_for_bit():
    first, again = _scenario(7), _scenario(7)
    assert first == again
    assert any(e[-1] == "DEADLINE_EXCEEDED" or e[-1] == "NETWORK" for e in first if len(e) == 3)
    assert _scenario(8) != first


def test_slow_fsync_delays_a_blocking_calls_result_by_its_sampled_latency():
    """to_thread work that syncs a SimDisk with fsync latency returns that much later in virtual
    time, its error too; a crash meanwhile leaves the sync done and the caller never told."""
    from harness.sim.disk import SimDisk, SimFaults
    from node import durable

    loop, _ = _sim()
    disk = SimDisk(random.Random(1), SimFaults(fsync_latency=(0.25, 0.25)))
    disk.mkdir("/d")
    disk.fsync_dir("/")  # outside any blocking call: costs no virtual time

    async def go():
        t0 = loop.time()
        await asyncio.to_thread(durable.write_atomic, "/d/f", b"x", disk)
        took = loop.time() - t0  # a file fsync and a directory fsync
        disk.faults.fsync_eio_rate = 1.0
        t1 = loop.time()
        with pytest.raises(OSError):
            await asyncio.to_thread(durable.write_atomic, "/d/g", b"y", disk)
        return took, loop.time() - t1

    took, failed_after = loop.run_until_complete(go())
    assert took == pytest.approx(0.5) and failed_after == pytest.approx(0.25)
    disk.faults.fsync_eio_rate = 0.0
    resumed = []

    async def writer():
        await asyncio.to_thread(durable.write_atomic, "/d/h", b"z", disk)
        resumed.append(True)

    async def scenario():
        loop.spawn(SERVER, writer())
        await asyncio.sleep(0.1)
        loop.crash_host(SERVER)
        await asyncio.sleep(1.0)

    loop.run_until_complete(scenario())
    assert resumed == [] and durable.read_verified("/d/h", disk.crash()) == b"z"
    loop.close()


def test_a_loop_closed_while_another_runs_closes_quietly():
    """A SimLoop left unclosed is closed by its __del__ whenever the GC collects it, which may
    be while another loop runs in this thread (the next test's). It cannot run its tasks'
    cleanup then, and must not raise ("Cannot run the event loop while another loop is
    running", once printed as an unraisable exception in CI): it closes without them."""
    old, _ = _sim()
    task = old.create_task(asyncio.sleep(10))
    old.run_until_complete(asyncio.sleep(1))  # the task is waiting when the loop is dropped

    async def meanwhile():
        old.close()  # as __del__ would, from inside this running loop

    asyncio.run(meanwhile())
    assert old.is_closed() and not task.done()


def test_a_task_that_ends_with_an_error_no_one_reads_is_kept_not_just_printed():
    """A background task whose error nobody awaits is a failure only a log line would show (a
    WAL's queue task once died so, and its replica served on): the loop keeps it, and
    StackSim fails the seed on it. A plain future nobody reads is an abandoned call, counted."""
    loop, _ = _sim()

    async def dies():
        await asyncio.sleep(1)
        raise OSError(5, "Input/output error")

    async def main():
        loop.create_task(dies(), name="queue-held")
        fut = loop.create_future()
        fut.set_exception(TimeoutError())  # a caller that gave up: nobody reads it
        del fut
        await asyncio.sleep(2)
        gc.collect()

    loop.run_until_complete(main())
    assert len(loop.unread_task_errors) == 1, loop.unread_task_errors
    assert loop.unread_task_errors[0].startswith("task queue-held at 1.000 virtual s: OSError")
    assert loop.abandoned_futures == 1
    loop.close()
