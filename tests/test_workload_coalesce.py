"""How the workers' writes reach the client (Workload.writes, `--writes`), and the harness
driving the client's coalescing (writes=shared): threads bound to one node share one handle's
client sessions, so the writes they issue in one loop turn leave as one ts.write_batch, each op
still one op of the history. A run under faults in the whole-stack simulator comes out valid with
real multi-op batches in it, and the same run with a client that hands a batch's results to the
wrong callers comes out invalid: chaos runs now reach the coalesced path, and would catch a bug
in it."""

import asyncio
import subprocess
import sys

import pytest

import node.client as client_module
from harness.sim.stack import StackConfig, StackSim, replay_command
from harness.spec import TestSpec
from harness.systems.tessera.clients import session_options, workload_clients
from harness.validate import check
from node.client import FlushMode, TesseraClient
from reports.history import read_jsonl
from workloads import make
from workloads.base import WRITE_MODES


def test_shared_threads_of_one_node_share_sessions_and_keep_their_own_handles():
    client = TesseraClient([("127.0.0.1", 7051)])
    clients, close = workload_clients(client, "test", {}, ["a", "b"],
                                      make("register", writes="shared"))
    handles = [clients(t).table for t in range(5)]
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
    clients, _ = workload_clients(client, "test", {}, None, make("list-append", writes="shared"))
    assert clients(0).table.sessions is clients(7).table.sessions  # a smart client: one for all
    clients, close = workload_clients(client, "test", {}, None, make("list-append"))
    assert clients(0).table.sessions is not clients(7).table.sessions  # own: one each
    assert asyncio.run(close()) is None


def test_each_mode_makes_its_clients():
    """own and shared: handles without a batching session; the batching session modes: one
    session per node, AUTO_FLUSH_BACKGROUND or MANUAL_FLUSH, closed (flushed) by close();
    session-sync: one AUTO_FLUSH_SYNC session per worker."""
    client = TesseraClient([("127.0.0.1", 7051)])
    for writes in WRITE_MODES:
        clients, close = workload_clients(client, "test", {}, ["a", "b"],
                                          make("register", writes=writes))
        handles = [clients(t).table for t in range(4)]
        sessions = [h.session for h in handles]
        if writes in ("own", "shared"):
            assert sessions == [None] * 4, writes
            assert (handles[0].sessions is handles[2].sessions) == (writes == "shared")
            continue
        assert sessions[0].options == session_options(make("register", writes=writes))
        if writes == "session-sync":
            assert len({id(s) for s in sessions}) == 4 and sessions[2].bind == ("a", None)
            assert sessions[0].options.mode == FlushMode.AUTO_FLUSH_SYNC
            assert asyncio.run(close()) == {"mode": writes, "sessions": 4, "rows_ok": 0}
            continue
        assert sessions[0] is sessions[2] and sessions[1] is sessions[3]
        assert sessions[0] is not sessions[1] and sessions[0].bind == ("a", None)
        assert sessions[0].options == session_options(make("register", writes=writes))
        stats = asyncio.run(close())
        assert stats == {"mode": writes, "sessions": 2, "batches": 0, "ops": 0,
                         "mean_ops_per_batch": 0.0, "cut_by": {}}
        assert all(s._closed for s in sessions)


def test_session_options_per_mode():
    assert session_options(make("register")) is None
    assert session_options(make("register", writes="shared")) is None
    background = make("register", writes="session-background", batch_interval_ms=20)
    o = session_options(background)
    assert (o.mode, o.max_batch_ops, o.flush_interval_s) == (
        FlushMode.AUTO_FLUSH_BACKGROUND, 16, 0.02)  # batch 0: 16 ops a batch
    o = session_options(make("list-append", writes="session-manual", batch=4))
    assert (o.mode, o.max_batch_ops) == (FlushMode.MANUAL_FLUSH, 4)
    o = session_options(make("register", writes="session-background", batch=64))
    assert (o.mode, o.max_batch_ops) == (FlushMode.AUTO_FLUSH_BACKGROUND, 64)


def test_a_bad_mode_or_a_batch_without_a_session_is_refused_when_the_workload_is_made():
    with pytest.raises(ValueError, match="writes='coalesce': one of own, shared, "
                                         "session-background, session-manual"):
        make("register", writes="coalesce")
    for writes in ("own", "shared"):
        with pytest.raises(ValueError, match=f"batch=4 sizes .* not {writes}"):
            make("register", writes=writes, batch=4)
    with pytest.raises(ValueError, match="number of ops"):
        make("register", writes="session-manual", batch=True)
    with pytest.raises(ValueError, match="max_batch_ops must be 1..128"):  # Tessera's bound
        check(TestSpec(workload="register", writes="session-manual",
                       workload_options={"batch": 129}))
    with pytest.raises(TypeError, match="coalesce"):  # the old option is gone
        make("register", coalesce=True)


@pytest.mark.parametrize("spec, says", [
    (TestSpec(db="etcd", workload="register", writes="shared"),
     "--writes shared groups Tessera's client writes; --db etcd has no such client"),
    (TestSpec(db="etcd", workload="register", writes="session-manual"),
     "--writes session-manual groups Tessera's client writes"),
    (TestSpec(workload="register", workload_options={"writes": "shared"}),
     "--workload-option writes=shared: how the workers write is --writes "
     "own|shared|session-background|session-manual"),
    (TestSpec(workload="register", workload_options={"coalesce": True}),
     "coalesce=true is now --writes shared"),
    (TestSpec(workload="register", workload_options={"batch": 4}),
     "--workload-option batch=4 sizes a batching session's batches: it takes --writes "
     "session-background or session-manual, not own"),
    (TestSpec(db="etcd", workload="register", workload_options={"batch": 4}),
     "--workload-option batch=4 sizes"),
    (TestSpec(workload="register", writes="bogus"), "--writes 'bogus': not one of own,"),
    (TestSpec(db="etcd", workload="register",
              workload_options={"value_sizes": "zeros", "value_buffers": True}),
     "value_buffers=true hands values to Tessera's client in reused buffers: --db etcd's "
     "client takes none"),
    (TestSpec(workload="register", workload_options={"value_buffers": True}),
     "value_buffers=true reuses the buffers of string values: it takes value_sizes=wide or zeros"),
    (TestSpec(workload="list-append", workload_options={"value_buffers": True}),
     "it takes value_sizes=wide or zeros (--workload register)"),
])
def test_writes_is_refused_where_it_cannot_mean_anything(spec, says):
    with pytest.raises(ValueError) as e:
        check(spec)
    assert says in str(e.value)


def test_every_mode_is_checked_and_made_for_tessera():
    buffered = check(TestSpec(workload="register", workload_options={
        "value_sizes": "zeros", "value_buffers": True}))
    assert buffered.make_workload().value_buffers
    for writes in WRITE_MODES:
        spec = check(TestSpec(db="tessera", workload="list-append", writes=writes))
        assert spec.make_workload().writes == writes
    spec = check(TestSpec(workload="register", writes="session-manual",
                          workload_options={"batch": 8}))
    assert session_options(spec.make_workload()).max_batch_ops == 8
    assert TestSpec.from_dict(spec.to_dict()) == spec  # test.json keeps it; replay reads it


def test_tessera_test_takes_writes_and_refuses_a_bad_one(tmp_path):
    import argparse

    from harness.chaos_cli import configure, spec_from_args

    p = argparse.ArgumentParser()
    configure(p)
    spec = spec_from_args(p.parse_args(["--writes", "session-manual", "--workload-option",
                                        "batch=8", "--seed", "1"]))
    assert (spec.writes, spec.workload_options) == ("session-manual", {"batch": 8})
    assert spec.to_dict()["writes"] == "session-manual"
    assert spec_from_args(p.parse_args(["--seed", "1"])).writes == "own"
    for argv, says in ((["--writes", "coalesce"], "invalid choice: 'coalesce'"),
                       (["--workload-option", "coalesce=true"], "is now --writes shared"),
                       (["--writes", "shared", "--db", "etcd"], "--db etcd has no such client")):
        out = subprocess.run([sys.executable, "-m", "harness.cli", "test", "--store",
                              str(tmp_path), *argv], capture_output=True, text=True, timeout=60)
        assert out.returncode == 254 and says in out.stderr, (argv, out.stderr)
    assert not list(tmp_path.iterdir())


def test_the_replay_command_carries_writes_and_the_batch():
    assert " --writes shared " in replay_command(StackConfig(seed=3, writes="shared")) + " "
    cmd = replay_command(StackConfig(seed=3, writes="session-manual", batch=8)) + " "
    assert " --writes session-manual --batch 8 " in cmd
    assert "--writes" not in replay_command(StackConfig(seed=3))
    with pytest.raises(ValueError, match="batch=8 sizes"):
        StackConfig(seed=3, batch=8)
    with pytest.raises(ValueError, match="writes='coalesce'"):
        StackConfig(seed=3, writes="coalesce")


@pytest.mark.parametrize("argv, says", [
    (["--writes", "bogus"], "invalid choice: 'bogus'"),
    (["--coalesce"], "unrecognized arguments: --coalesce"),
    (["--batch", "4"], "--batch sizes a batching session's batches: it takes --writes "
                       "session-background or session-manual, not own"),
    (["--batch", "4", "--writes", "shared"], "not shared"),
])
def test_tessera_sim_refuses_a_bad_writes_or_batch(argv, says):
    out = subprocess.run([sys.executable, "-m", "harness.cli", "sim", "--stack", "full",
                          "--seeds", "1", *argv], capture_output=True, text=True, timeout=60)
    assert out.returncode == 254 and says in out.stderr, out.stderr


def _run(tmp_path, seed, writes="shared"):
    """Workers back to back (rate 0): the answers one read of the connection brings wake
    several workers in one turn, and their next writes leave together (shared: one
    ts.write_batch; session-manual: one flush of the node's session). At a paced rate each
    worker wakes on its own timer, and writes rarely share a turn."""
    cfg = StackConfig(seed=seed, workload="register", seconds=20.0, concurrency=30, rate=0.0,
                      writes=writes)
    return StackSim(cfg, tmp_path).run()


@pytest.mark.slow
@pytest.mark.parametrize("writes", ["shared", "session-manual"])
def test_a_grouped_run_under_faults_in_the_full_stack_simulator_is_valid(tmp_path, batch_sizes,
                                                                          writes):
    result = _run(tmp_path, 4, writes)
    assert result.ok(), (result.violation, result.verdict, result.results.get("anomalies"))
    assert sum(result.nemesis.values()) >= 3, result.nemesis  # faults did happen
    assert any(n > 1 for n in batch_sizes), batch_sizes  # writes of one turn did travel together
    ops = [o for o in read_jsonl(tmp_path / "history.jsonl") if o.process != "nemesis"]
    writes_ = [o for o in ops if o.f != "read"]
    assert sum(o.type == "invoke" for o in writes_) == sum(o.type != "invoke" for o in writes_)


@pytest.mark.slow
@pytest.mark.parametrize("writes", ["shared", "session-manual"])
def test_the_same_run_catches_a_client_that_answers_a_batch_to_the_wrong_callers(
        tmp_path, monkeypatch, writes):
    """A planted bug in the grouped path: a batch's results come back to its callers in the
    reverse order, so one cas is told the outcome of another. Nothing else changes."""
    original = client_module.TesseraClient.write_batch

    async def reversed_results(self, table, t, ops, *args, **kwargs):
        answered = await original(self, table, t, ops, *args, **kwargs)
        return answered._replace(results=answered.results[::-1])

    monkeypatch.setattr(client_module.TesseraClient, "write_batch", reversed_results)
    result = _run(tmp_path, 4, writes)
    assert result.verdict == "invalid", (result.verdict, result.violation)
