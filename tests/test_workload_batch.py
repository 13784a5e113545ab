"""The harness drives batched sessions (Workload.writes session-background, batches of
Workload.batch ops): threads bound to one node share one AUTO_FLUSH_BACKGROUND session, each op
stays one op of the history, and a run under faults in the whole-stack simulator (the production
servers and client on virtual time, network and disks) comes out valid with real multi-op
batches in it."""

import asyncio
from collections import Counter

import pytest

from harness.sim.stack import StackConfig, StackSim, replay_command
from harness.systems.tessera.clients import workload_clients
from node.client import FlushMode
from reports.history import read_jsonl
from workloads import make


class FakeClient:
    def __init__(self):
        self.sessions = []

    def new_session(self, table, options, bind=None):
        s = FakeSession(table, options, bind)
        self.sessions.append(s)
        return s

    def table(self, table, names, bind=None, session=None):
        return (table, bind, session)


class FakeSession:
    def __init__(self, table, options, bind):
        self.table, self.options, self.bind, self.closed = table, options, bind, False
        self.flush_reasons, self.ops_cut = Counter(), 0

    async def close(self):
        self.closed = True
        self.flush_reasons["close"] += 1  # as if it flushed 3 ops buffered
        self.ops_cut += 3


def test_batched_threads_of_one_node_share_one_background_session():
    client = FakeClient()
    workload = make("register", writes="session-background", batch=16, batch_interval_ms=20)
    clients, close = workload_clients(client, "test", {}, ["a", "b"], workload)
    handles = [clients(t).table for t in range(5)]  # the adapter's Table, here a tuple
    assert [h[1] for h in handles] == ["a", "b", "a", "b", "a"]
    assert handles[0][2] is handles[2][2] is handles[4][2] and handles[1][2] is handles[3][2]
    assert handles[0][2] is not handles[1][2]
    options = handles[0][2].options
    assert (options.mode, options.max_batch_ops, options.flush_interval_s) == (
        FlushMode.AUTO_FLUSH_BACKGROUND, 16, 0.02)
    stats = asyncio.run(close())
    assert all(s.closed for s in client.sessions)
    assert stats == {"mode": "session-background", "sessions": 2, "batches": 2, "ops": 6,
                     "mean_ops_per_batch": 3.0, "cut_by": {"close": 2}}


class FakeTable:
    """A Table handle: its client and session, and writes that succeed at once (or once the
    client's `gate` opens)."""

    def __init__(self, client, table, bind, session):
        self.client, self.session, self.bind = client, session, bind

    async def write(self, key, value):
        gate = getattr(self.client, "gate", None)
        if gate is not None:
            await gate.wait()
        return 1

    async def append(self, key, element):
        return None

    async def txn(self, ops):
        return ops


class TableMaker(FakeClient):
    def table(self, table, names, bind=None, session=None):
        return FakeTable(self, table, bind, session)


class ClosingClient(TableMaker):
    """A client that says when it was closed."""

    def __init__(self):
        super().__init__()
        self.closed, self.gate = False, None

    async def close(self):
        self.closed = True


def test_a_shared_session_is_closed_and_replaced_after_its_writes_for_every_handle_sharing_it():
    """Workload.session_ops: the writer about to make the Nth write through a shared session
    closes it (in the background) and every handle sharing it goes on with a new one."""
    client = TableMaker()
    workload = make("register", writes="session-manual", batch=4, session_ops=3)
    clients, close = workload_clients(client, "test", {}, ["a", "b"], workload)

    async def go():
        workers = [clients(t) for t in range(4)]  # a, b, a, b
        first = workers[0].table.session
        for _ in range(2):
            await workers[0].write("k", 1)
            await workers[2].write("k", 1)
        await asyncio.sleep(0)  # the close runs in the background
        assert first.closed and workers[0].table.session is workers[2].table.session
        assert workers[0].table.session is not first and not workers[1].table.session.closed
        await workers[1].txn([["r", "k", None]])  # a read is no write: nothing renewed
        return await close()

    stats = asyncio.run(go())
    assert len(client.sessions) == 3 and all(s.closed for s in client.sessions)
    assert stats["sessions"] == 3 and stats["renewed"] == 1 and stats["cut_by"] == {"close": 3}


def test_with_fresh_clients_each_renewed_session_opens_on_a_new_client_closed_once_done_with():
    """Workload.fresh_clients: a renewal makes a client for the new session and moves every
    handle sharing the old one to both; the client made for a session is closed once that
    session's close has ended and no op runs on it, and the run's own client is left to its
    caller."""
    made = []

    def new_client():
        made.append(ClosingClient())
        return made[-1]

    first = ClosingClient()
    workload = make("register", writes="session-manual", session_ops=2, fresh_clients=True)
    clients, close = workload_clients(first, "test", {}, ["a"], workload, new_client)

    async def go():
        w0, w1 = clients(0), clients(1)  # both bound to a: one shared session
        await w0.write("k", 1)
        await w1.write("k", 1)  # the second write: a new session, on a new client
        await asyncio.sleep(0)  # the close runs in the background
        assert len(made) == 1 and w0.table.client is w1.table.client is made[0]
        assert made[0].sessions == [w0.table.session] and first.sessions[0].closed
        made[0].gate = asyncio.Event()  # w1's next write holds made[0] open
        slow = asyncio.ensure_future(w1.write("k", 1))
        await asyncio.sleep(0)
        await w0.write("k", 1)  # the fourth: made[0]'s session is retired
        for _ in range(3):
            await asyncio.sleep(0)
        assert made[0].sessions[0].closed and not made[0].closed  # w1's write runs on it
        made[0].gate.set()
        await slow
        for _ in range(3):
            await asyncio.sleep(0)
        assert made[0].closed and not made[1].closed
        return await close()

    stats = asyncio.run(go())
    assert len(made) == 2 and made[1].closed and not first.closed
    assert stats["renewed"] == 2 and stats["sessions"] == 3


def test_fresh_clients_need_renewals_and_a_way_to_open_a_client():
    with pytest.raises(ValueError, match="fresh_clients opens a client per renewed session"):
        make("register", writes="session-manual", fresh_clients=True)
    with pytest.raises(ValueError, match="true or false"):
        make("register", writes="session-manual", session_ops=2, fresh_clients="yes")
    workload = make("register", writes="session-manual", session_ops=2, fresh_clients=True)
    with pytest.raises(ValueError, match="no way to open one"):
        workload_clients(ClosingClient(), "test", {}, ["a"], workload)


def test_session_ops_takes_a_shared_batching_session():
    with pytest.raises(ValueError, match="session_ops=5 renews a shared batching session"):
        make("register", writes="session-sync", session_ops=5)
    with pytest.raises(ValueError, match="number of writes"):
        make("register", writes="session-manual", session_ops=-1)


def test_unbatched_and_smart_clients_are_as_before():
    client = FakeClient()
    clients, _ = workload_clients(client, "test", {}, ["a", "b"], make("list-append"))
    assert clients(3).table == ("test", "b", None) and client.sessions == []
    clients, _ = workload_clients(client, "test", {}, None,
                                  make("register", writes="session-background", batch=4))
    assert clients(0).table[1] is None and clients(0).table[2] is clients(7).table[2]  # one session


def test_a_batch_the_tablets_cannot_keep_is_refused_before_the_run():
    from harness.spec import TestSpec
    from harness.validate import check

    with pytest.raises(ValueError, match="max_batch_ops must be 1..128"):
        check(TestSpec(workload="register", writes="session-background",
                       workload_options={"batch": 129}))


def test_the_replay_command_carries_the_batch():
    assert " --writes session-background --batch 8 " in replay_command(
        StackConfig(seed=3, writes="session-background", batch=8)) + " "
    assert "--batch" not in replay_command(StackConfig(seed=3))


@pytest.mark.slow
@pytest.mark.parametrize("workload,seed", [("register", 4), ("list-append", 5)])
def test_a_batched_run_under_faults_in_the_full_stack_simulator_is_valid(
        tmp_path, batch_sizes, workload, seed):
    cfg = StackConfig(seed=seed, workload=workload, seconds=20.0, concurrency=30, rate=300.0,
                      writes="session-background", batch=8)
    result = StackSim(cfg, tmp_path).run()
    assert result.ok(), (result.violation, result.verdict, result.results.get("anomalies"))
    assert sum(result.nemesis.values()) >= 3, result.nemesis  # faults did happen
    assert any(n > 1 for n in batch_sizes), batch_sizes  # ops did share batches
    assert max(batch_sizes) <= 8
    ops = [o for o in read_jsonl(tmp_path / "history.jsonl") if o.process != "nemesis"]
    writes = [o for o in ops if o.f != "read" and not (o.f == "txn" and all(
        m[0] == "r" for m in o.value))]
    invoked = sum(o.type == "invoke" for o in writes)
    completed = sum(o.type != "invoke" for o in writes)
    assert invoked == completed  # every op invoked and completed on its own
    applied = sum(n * k for n, k in batch_sizes.items())
    # every ok write came back from a batch, and each op sent in a batch is one invoked op
    # (one whose caller timed out before its batch was cut is dropped, never sent)
    assert sum(o.type == "ok" for o in writes) <= applied <= invoked


def test_a_batched_seed_replays_bit_for_bit(tmp_path):
    cfg = dict(seed=6, workload="register", seconds=5.0, concurrency=20, rate=200.0,
               writes="session-background", batch=4)
    a = StackSim(StackConfig(**cfg), tmp_path / "a").run()
    b = StackSim(StackConfig(**cfg), tmp_path / "b").run()
    assert a.ok() and a.history_sha == b.history_sha and a.ops == b.ops


def test_list_append_key_sets_lie_in_tesseras_tablets_once_its_clients_place_them():
    """The workload knows no partitioning: Tessera's adapter gives it the hash placement when it
    opens the run's clients, and each key set then lies in one tablet (a transaction's keys
    must), set i in tablet i mod tablets; a system with no groups gets plain names."""
    from harness.systems.tessera.clients import hash_placement
    from node.tablet.superblock import HashBucket
    from workloads.list_append import key_set

    workload = make("list-append", tablets=4)
    assert workload.placement is None and key_set(5, 4, 3) == ("k5.0", "k5.1", "k5.2")
    workload_clients(FakeClient(), "test", {}, None, workload)
    assert workload.placement is hash_placement
    for i in range(12):
        keys = key_set(i, 4, 8, workload.placement)
        assert len(keys) == 8 and all(HashBucket(i % 4, 4).contains(k) for k in keys)
    assert key_set(3, 1, 2, hash_placement) == ("k3.0", "k3.1")  # one tablet: no hashing
