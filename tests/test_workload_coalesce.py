"""The harness drives the client's coalescing (Workload.coalesce): threads bound to one node
share one handle's client sessions, so the writes they issue in one loop turn leave as one
ts.write_batch, each op still one op of the history. A run under faults in the whole-stack
simulator comes out valid with real multi-op batches in it, and the same run with a client that
hands a batch's results to the wrong callers comes out invalid: chaos runs now reach the
coalesced path, and would catch a bug in it."""

import asyncio

import pytest

import node.client as client_module
from harness.spec import TestSpec
from harness.tessera_clients import workload_clients
from harness.validate import check
from node.client import TesseraClient
from node.sim.stack import StackConfig, StackSim, replay_command
from reports.history import read_jsonl
from workloads import make


def test_coalescing_threads_of_one_node_share_sessions_and_keep_their_own_handles():
    client = TesseraClient([("127.0.0.1", 7051)])
    clients, close = workload_clients(client, "test", {}, ["a", "b"],
                                      make("register", coalesce=True))
    handles = [clients(t) for t in range(5)]
    assert len({id(h) for h in handles}) == 5  # each thread's `node` stays its own
    assert handles[0].sessions is handles[2].sessions is handles[4].sessions
    assert handles[1].sessions is handles[3].sessions
    assert handles[0].sessions is not handles[1].sessions
    assert all(h.session is None for h in handles)  # no batching session: nothing waits
    handles[0].sessions.sent.update({1: 5, 3: 2})  # as _uncork counts what it sends
    handles[1].sessions.sent.update({2: 1})
    assert asyncio.run(close()) == {"coalesced": {
        "handles_sharing": 2, "requests": 8, "writes": 13, "mean_writes_per_request": 1.62,
        "requests_with_several": 3}}
    clients, _ = workload_clients(client, "test", {}, None, make("list-append", coalesce=True))
    assert clients(0).sessions is clients(7).sessions  # a smart client: one for all
    clients, _ = workload_clients(client, "test", {}, None, make("list-append"))
    assert clients(0).sessions is not clients(7).sessions  # off: a session each, as before


def test_coalesce_is_refused_where_it_cannot_mean_anything():
    with pytest.raises(ValueError, match="two ways of grouping writes"):
        make("register", coalesce=True, batch=4)
    with pytest.raises(ValueError, match="true or false"):
        make("register", coalesce="yes")
    for option in ({"coalesce": True}, {"batch": 4}):
        with pytest.raises(ValueError, match="--db etcd has no such client"):
            check(TestSpec(db="etcd", workload="register", workload_options=option))
    check(TestSpec(db="tessera", workload="register", workload_options={"coalesce": True}))


def test_the_replay_command_carries_coalesce():
    assert " --coalesce " in replay_command(StackConfig(seed=3, coalesce=True)) + " "
    assert "--coalesce" not in replay_command(StackConfig(seed=3))


def _run(tmp_path, seed):
    """Workers back to back (rate 0): the answers one read of the connection brings wake
    several workers in one turn, and their next writes leave together. At a paced rate each
    worker wakes on its own timer, and writes rarely share a turn."""
    cfg = StackConfig(seed=seed, workload="register", seconds=20.0, concurrency=30, rate=0.0,
                      coalesce=True)
    return StackSim(cfg, tmp_path).run()


@pytest.mark.slow
def test_a_coalesced_run_under_faults_in_the_full_stack_simulator_is_valid(tmp_path,
                                                                            batch_sizes):
    result = _run(tmp_path, 4)
    assert result.ok(), (result.violation, result.verdict, result.results.get("anomalies"))
    assert sum(result.nemesis.values()) >= 3, result.nemesis  # faults did happen
    assert any(n > 1 for n in batch_sizes), batch_sizes  # writes of one turn did travel together
    ops = [o for o in read_jsonl(tmp_path / "history.jsonl") if o.process != "nemesis"]
    writes = [o for o in ops if o.f != "read"]
    assert sum(o.type == "invoke" for o in writes) == sum(o.type != "invoke" for o in writes)


@pytest.mark.slow
def test_the_same_run_catches_a_client_that_answers_a_batch_to_the_wrong_callers(
        tmp_path, monkeypatch):
    """A planted bug in the coalesced path: a batch's results come back to its callers in the
    reverse order, so one cas is told the outcome of another. Nothing else changes."""
    original = client_module.TesseraClient.write_batch

    async def reversed_results(self, table, t, ops, *args, **kwargs):
        results, peer = await original(self, table, t, ops, *args, **kwargs)
        return results[::-1], peer

    monkeypatch.setattr(client_module.TesseraClient, "write_batch", reversed_results)
    result = _run(tmp_path, 4)
    assert result.verdict == "invalid", (result.verdict, result.violation)
