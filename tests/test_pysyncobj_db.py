"""The PySyncObj adapter (harness/systems/pysyncobj/deployment.py) against real node processes
(harness/systems/pysyncobj/node.py) on loopback addresses: the client's ops and how it classifies
failures, the overload warning the log checker notes, the convergence rule, and what the CLI
refuses before touching a host. The end-to-end run on netns hosts is in test_harness_e2e.py."""

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time

import pytest

from harness.cluster import Host
from harness.systems.pysyncobj.deployment import NodeClient, PySyncObjDB, compare_nodes
from reports.checkers.logs import check_logs, scan_log
from workloads.outcomes import OpFailed, OpUnknown

_subnet = itertools.count(30)


@pytest.fixture
def cluster(tmp_path):
    """start(conf) -> (db, logs): three nodes on 127.0.0.N1..N3, killed at the end."""
    procs = []

    def start(conf=None, reads="log"):
        base = next(_subnet) * 3
        hosts = [Host(f"n{i}", f"127.0.0.{base + i}") for i in range(1, 4)]
        db = PySyncObjDB(hosts, [], {}, flags={**(conf or {}), "reads": reads}, log=lambda m: None)
        logs = {}
        for h in hosts:
            cfg = {**db.config(h), "data_dir": str(tmp_path / h.name)}
            os.makedirs(cfg["data_dir"])
            (tmp_path / f"{h.name}.json").write_text(json.dumps(cfg))
            logs[h.name] = tmp_path / "nodes" / h.name / "node.log"
            logs[h.name].parent.mkdir(parents=True)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "harness.systems.pysyncobj.node", "--config",
                 str(tmp_path / f"{h.name}.json")], stderr=open(logs[h.name], "w")))
        deadline = time.monotonic() + 60
        while db.leader_master() is None:
            assert time.monotonic() < deadline, "no leader in 60 s"
            time.sleep(0.1)
        return db, procs, logs

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.mark.slow  # real node processes, each op ~200 ms
def test_ops_and_their_results(cluster):
    db, _, _ = cluster()

    async def ops(r: str, s: str):
        c = NodeClient(db.hosts[0].address, "n1", 10.0)  # a follower or the leader: either works
        try:
            assert await c.read(r) is None
            await c.write(r, 3)
            assert await c.cas(r, 3, 4) is True
            assert await c.cas(r, 3, 5) is False
            assert await c.read(r) == 4
            await c.append(s, 1)
            await c.append(s, 2)
            return await c.read(s)
        finally:
            await c.close()

    # PySyncObj discards a command its leader had not committed when leadership moves (an
    # election on a loaded machine), an outcome unknown: such a pass is run again on new keys,
    # so one pass shows every op's result
    for attempt in range(3):
        try:
            assert asyncio.run(ops(f"r{attempt}", f"s{attempt}")) == [1, 2]
            break
        except OpUnknown:
            if attempt == 2:
                raise
    result = db.converge()
    assert result["verdict"] == "valid" and not result["unreachable"], result


@pytest.mark.slow  # real node processes, each op ~200 ms
def test_failures_are_definite_only_before_the_command_left(cluster):
    db, procs, _ = cluster()

    async def ops():
        c = NodeClient(db.hosts[1].address, "n2", 10.0)
        await c.write("k", 1)  # connected
        procs[1].kill()
        procs[1].wait()
        with pytest.raises(OpUnknown):  # the request may have been sent: outcome unknown
            await c.write("k", 2)
        with pytest.raises(OpFailed, match="cannot connect"):  # nothing was sent
            await c.write("k", 3)

    asyncio.run(ops())


@pytest.mark.slow  # real node processes, each op ~200 ms
def test_a_bad_request_is_refused_and_the_connection_still_serves(cluster):
    import socket

    db, _, _ = cluster()
    with socket.create_connection((db.hosts[0].address, 7061), timeout=10) as s:
        f = s.makefile("rwb")
        for line in (b"{not json\n", b'{"f": "cas", "key": "x"}\n', b'{"f": "drop"}\n',
                     b'{"f": "read", "key": "x"}\n'):
            f.write(line)
            f.flush()
            reply = json.loads(f.readline())
            if line.startswith(b'{"f": "read"'):
                assert reply == {"ok": None}
            else:
                assert reply["definite"] is True and reply["error"], reply


@pytest.mark.slow  # real node processes, each op ~200 ms
def test_a_full_queue_is_a_definite_failure_and_a_noted_warning(cluster, tmp_path):
    db, _, logs = cluster({"commandsQueueSize": 1})

    async def flood():
        clients = [NodeClient(db.hosts[0].address, "n1", 6.0) for _ in range(60)]
        try:
            return await asyncio.gather(*(c.write(f"k{i}", i) for i, c in enumerate(clients)),
                                        return_exceptions=True)
        finally:
            await asyncio.gather(*(c.close() for c in clients))

    results = asyncio.run(flood())
    refused = [r for r in results if isinstance(r, OpFailed) and "QUEUE_FULL" in str(r)]
    assert refused and any(r is None for r in results), results
    deadline = time.monotonic() + 10
    while "overloaded" not in logs["n1"].read_text():
        assert time.monotonic() < deadline, logs["n1"].read_text()
        time.sleep(0.1)
    (tmp_path / "test.json").write_text(json.dumps({"log_rules": list(PySyncObjDB.log_rules)}))
    result = check_logs(tmp_path)
    assert result["verdict"] == "valid", result  # an overload violates nothing...
    assert {n["type"] for n in result["notes"]} == {"overload"}  # ...but is noted


def test_pysyncobj_log_rules():
    text = ("2026-11-24 04:20:06,168 CRITICAL pysyncobj.syncobj: truncating already-applied log "
            "entries from index 7 (last applied: 9) - state machine may have diverged from other "
            "cluster members\n"
            "2026-11-24 04:20:07,000 WARNING pysyncobj.syncobj: raftCommitIndex (40) exceeds "
            "journal end (3) after loading dump, clamping\n"
            "pysyncobj node: cannot start: KeyError: 'self'\n")
    found = [f["type"] for f in scan_log(text, PySyncObjDB.log_rules)]
    assert found == ["divergence", "data-loss", "start-failure"]
    assert scan_log(text) == []  # Tessera's rules know none of these lines


def test_convergence_rule():
    st = {"n1": {"last_applied": 9, "term": 2, "digest": "a", "state": 2},
          "n2": {"last_applied": 9, "term": 2, "digest": "a", "state": 0}}
    assert compare_nodes(st, ["n1", "n2"])["verdict"] == "valid"
    assert compare_nodes(st, ["n1", "n2", "n3"])["verdict"] == "unknown"  # n3 did not answer
    behind = {**st, "n2": {**st["n2"], "last_applied": 8, "digest": "b"}}
    assert compare_nodes(behind, ["n1", "n2"])["verdict"] == "unknown"  # not caught up yet
    split = {**st, "n2": {**st["n2"], "digest": "b"}}
    bad = compare_nodes(split, ["n1", "n2"])
    assert bad["verdict"] == "invalid" and bad["errors"][0]["groups"] == {"a": ["n1"], "b": ["n2"]}


def test_what_the_cli_refuses_for_pysyncobj():
    def run(*argv):
        return subprocess.run([sys.executable, "-m", "harness.cli", "test", "--db", "pysyncobj",
                               *argv], capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)

    for argv, words in [(["--workload", "bank"], "runs the workloads register, set"),
                        (["--client", "smart"], "takes --client node-bound"),
                        (["--nemesis", "disk"], "does not apply to this system: it needs disk (data files"),
                        (["--nemesis", "clock"], "needs faketime"),
                        (["--flag", "journalFile=/x"], "not a SyncObjConf keyword"),
                        (["--flag", "reads=quorum"], "takes log or local"),
                        (["--fast-failure-detection"], "sets Tessera's daemon flags")]:
        out = run(*argv)
        assert out.returncode == 254 and words in out.stderr, (argv, out.stderr)


def test_nemesis_groups_keep_what_applies():
    from nemeses.registry import select

    applies = select("all,raft", PySyncObjDB.offers)
    assert {"partition", "packet", "pause", "kill", "lose-unfsynced", "leader-isolate",
            "kill-after-heal", "majority-kill", "all-kill"} == set(applies)
    assert {"disk", "membership", "clock"} <= set(select("all"))  # Tessera keeps every fault


def test_differing_digests_count_only_once_they_hold_still(monkeypatch):
    """A digest read while the tick thread applies an entry may differ for a moment: invalid
    needs two polls in a row with the same digests; a real divergence is still found."""
    db = PySyncObjDB([Host("n1", "127.0.0.1"), Host("n2", "127.0.0.2")], [], {}, log=print)
    a = {"last_applied": 9, "term": 1, "digest": "a", "state": 2}
    polls = iter([{"n1": a, "n2": {**a, "digest": "mid-apply"}},  # one odd read: not yet
                  {"n1": a, "n2": a}])
    monkeypatch.setattr(db, "statuses", lambda: next(polls))
    assert db.converge(interval=0)["verdict"] == "valid"
    split = {"n1": a, "n2": {**a, "digest": "b"}}
    polls = iter([split, split])
    monkeypatch.setattr(db, "statuses", lambda: next(polls))
    assert db.converge(interval=0)["verdict"] == "invalid"
