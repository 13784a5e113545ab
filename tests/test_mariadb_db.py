"""MariaDB as a system under test, against a real mariadbd (Debian's, installed by `make setup`)
on loopback: the SQL client's list-append transactions and how each ending is classed, the
server options each topology gets, and `--flag`s refused before any host is touched."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from harness.cluster import Host
from harness.systems import system
from harness.systems.mariadb.clients import DATABASE, PASSWORD, SCHEMA, USER, SqlClient, ending
from harness.systems.mariadb.deployment import MARIADBD, MariaDB, init_sql
from workloads.outcomes import OpFailed, OpUnknown

pytestmark = [pytest.mark.e2e]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def mariadbd():
    """A mariadbd on 127.0.0.1 with the harness's init file, in a data dir of its own that its
    `mysql` user can reach (pytest's temporary dirs are root's alone): (port, process), killed
    and removed at the end."""
    root = Path(tempfile.mkdtemp(prefix="tessera-mariadb-"))
    os.chmod(root, 0o755)
    data, init = root / "data", root / "init.sql"
    init.write_text(init_sql())
    proc = None
    try:
        subprocess.run(["mariadb-install-db", "--no-defaults", "--user=mysql", f"--datadir={data}",
                        "--auth-root-authentication-method=normal", "--skip-test-db"],
                       check=True, capture_output=True, timeout=300)
        port = _free_port()
        with open(root / "err.log", "wb") as err:
            proc = subprocess.Popen([MARIADBD, "--no-defaults", "--user=mysql", f"--datadir={data}",
                                     "--bind-address=127.0.0.1", f"--port={port}",
                                     f"--socket={data}/mysqld.sock", f"--init-file={init}",
                                     "--skip-name-resolve"], stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                asyncio.run(_once(SqlClient("127.0.0.1", "n1", 5, port=port), "_probe"))
                break
            except OpFailed:
                time.sleep(0.3)
        else:
            pytest.fail("mariadbd did not answer: " + (root / "err.log").read_text()[-2000:])
        yield port, proc
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def server():
    with mariadbd() as running:
        yield running


async def _once(client: SqlClient, key: str):
    try:
        return await client.read(key)
    finally:
        await client.close()


def test_appends_and_reads_are_one_transaction_at_every_isolation(server):
    port, _ = server
    for i, level in enumerate(("read-uncommitted", "read-committed", "repeatable-read",
                               "serializable")):
        c = SqlClient("127.0.0.1", "n1", 5, isolation=level, port=port)
        key = f"iso{i}"

        async def go(c=c, key=key):
            try:
                return await c.txn([["r", key, None], ["append", key, 1], ["append", key, 2],
                                    ["r", key, None]])
            finally:
                await c.close()
        done = asyncio.run(go())
        assert done == [["r", key, []], ["append", key, 1], ["append", key, 2], ["r", key, [1, 2]]]


def test_a_deadlock_is_a_definite_failure_and_the_connection_lives_on(server):
    """Two transactions each append to the key the other appended first: InnoDB kills one with
    ER_LOCK_DEADLOCK (1213), rolled back: `fail`, and its client goes on working."""
    port, _ = server
    a = SqlClient("127.0.0.1", "n1", 10, port=port)
    b = SqlClient("127.0.0.1", "n1", 10, port=port)

    async def crossing():
        await a.txn([["append", "ex", 0], ["append", "ey", 0]])
        ca = await a._connection("127.0.0.1")
        async with ca.cursor() as x:
            await x.execute("START TRANSACTION")
            # the heavier transaction: InnoDB rolls back the lighter one of a deadlock
            for i in range(20):
                await x.execute("INSERT INTO lists (id, val) VALUES (%s, '0')", (f"weight{i}",))
            await x.execute("UPDATE lists SET val = CONCAT(val, ',1') WHERE id = 'ex'")
            later = asyncio.ensure_future(b.txn([["append", "ey", 2], ["append", "ex", 2]]))
            await asyncio.sleep(0.5)
            await x.execute("UPDATE lists SET val = CONCAT(val, ',1') WHERE id = 'ey'")
            await ca.commit()
        try:
            await later
            return None, None
        except OpFailed as e:
            return str(e), await b.read("ey")  # b's client works on
        finally:
            await a.close()
            await b.close()

    why, after = asyncio.run(crossing())
    assert why is not None and "1213" in why, why
    assert after == [0, 1]  # the failed transaction left nothing


def test_endings_follow_what_the_server_can_have_done():
    assert ending(False, False, None) is OpFailed  # COMMIT never sent: rolled back
    assert ending(True, True, 2013) is OpFailed  # a read changes nothing
    assert ending(True, False, 1213) is OpFailed  # deadlock or Galera certification failure
    assert ending(True, False, 1205) is OpFailed
    assert ending(True, False, 2013) is OpUnknown  # the connection died during COMMIT
    assert ending(True, False, None) is OpUnknown  # a timeout during COMMIT


def test_a_dead_server_is_a_definite_failure_to_connect():
    port = _free_port()
    with pytest.raises(OpFailed, match="connect 127.0.0.1"):
        asyncio.run(SqlClient("127.0.0.1", "n1", 2, port=port).txn([["append", "k", 1]]))


def test_a_server_killed_between_transactions_fails_the_next_one():
    """A second server, SIGKILLed: the next transaction over the old connection fails
    definitely (its COMMIT was never sent), and nothing hangs."""
    with mariadbd() as (port, proc):
        c = SqlClient("127.0.0.1", "n1", 5, port=port)

        async def go():
            try:
                await c.txn([["append", "k", 1]])
                assert await c.read("k") == [1]
                proc.send_signal(signal.SIGKILL)
                await asyncio.to_thread(proc.wait)
                with pytest.raises(OpFailed):
                    await c.txn([["append", "k", 2], ["r", "k", None]])
            finally:
                await c.close()
        asyncio.run(go())


HOSTS = [Host(f"n{i}", f"10.77.0.{10 + i}") for i in (1, 2, 3)]


def _db(**flags) -> MariaDB:
    return MariaDB(hosts=HOSTS, wheels=[], remotes={}, flags=flags)


def test_each_topology_runs_its_servers_with_its_own_options():
    single = _db()
    assert [single.daemons(h.name) for h in HOSTS] == [["mariadb"], [], []]
    assert "--user=mysql" in single.args(HOSTS[0]) and "--bind-address=10.77.0.11" in single.args(HOSTS[0])

    replicas = _db(topology="replicas")
    assert "--read-only=ON" not in replicas.args(HOSTS[0])
    assert {"--read-only=ON", "--server-id=2", "--log-bin=mariadb-bin"} <= set(replicas.args(HOSTS[1]))
    assert replicas.leader_master() == "n1"

    galera = _db(topology="galera", innodb_flush_log_at_trx_commit=0)
    args = galera.args(HOSTS[2])
    assert "--wsrep-cluster-address=gcomm://10.77.0.11,10.77.0.12,10.77.0.13" in args
    assert "--wsrep-new-cluster" not in args  # only the first node, and only at setup
    assert args[-1] == "--innodb-flush-log-at-trx-commit=0"  # a --flag comes last and wins
    assert galera.leader_master() is None and all(galera.daemons(h.name) for h in HOSTS)


@pytest.mark.parametrize("flags, message", [
    ({"topology": "ring"}, "topology=ring: one of single, replicas, galera"),
    ({"isolation": "snapshot"}, "isolation=snapshot: one of read-uncommitted"),
    ({"datadir": "/x"}, "--flag datadir: set by the harness"),
    ({"topology": "replicas", "gtid_domains": "many"}, "gtid_domains=many: one of one, per-client"),
    ({"gtid_domains": "per-client"}, "only with --flag topology=replicas"),
    ({"no_such_option": 1}, "--flag no_such_option: not an option `mariadbd --verbose --help`"),
])
def test_a_flag_mariadbd_would_not_take_is_refused_before_any_host(flags, message):
    with pytest.raises(ValueError, match=message):
        system("mariadb").check_flags(flags)


def test_options_mariadbd_lists_are_taken():
    system("mariadb").check_flags({"innodb_flush_log_at_trx_commit": 2,
                                   "innodb_snapshot_isolation": "ON", "topology": "galera",
                                   "isolation": "serializable"})
    system("mariadb").check_flags({"topology": "replicas", "gtid_domains": "per-client",
                                   "slave_parallel_threads": 4})


def test_the_package_says_what_the_machine_needs():
    pkg = Path(system("mariadb").__module__.replace(".", "/")).parent
    root = Path(__file__).resolve().parent.parent
    assert {"mariadb-server", "galera-4", "rsync"} <= set((root / pkg / "debian-packages").read_text().split())
    assert "aiomysql" in (root / pkg / "requirements.txt").read_text()


def test_a_bank_transfer_is_one_transaction_and_an_overdraft_rolls_it_back(server):
    port, _ = server
    c = SqlClient("127.0.0.1", "n1", 5, port=port, workload="bank")

    async def go():
        try:
            await c.txn([["w", "acct0", 3], ["w", "acct1", 0]])
            done = await c.txn([["add", "acct0", -2], ["require_ge", "acct0", 0],
                                ["add", "acct1", 2]])
            with pytest.raises(OpFailed, match="require_ge acct0 0: the balance is -1"):
                await c.txn([["add", "acct0", -2], ["require_ge", "acct0", 0],
                             ["add", "acct1", 2]])
            return done, await c.txn([["r", "acct0", None], ["r", "acct1", None],
                                      ["r", "acct9", None]])
        finally:
            await c.close()

    done, balances = asyncio.run(go())
    assert done == [["add", "acct0", -2], ["require_ge", "acct0", 0], ["add", "acct1", 2]]
    assert balances == [["r", "acct0", 1], ["r", "acct1", 2], ["r", "acct9", None]]


@pytest.mark.parametrize("line, rule", [
    ("2026-11-30 10:15:52 0 [ERROR] InnoDB: Cannot apply log to [page id: space=9, page number=3] "
     "of corrupted file './jepsen/lists.ibd'", "innodb-refused"),
    ("2026-11-30 10:46:36 2 [ERROR] WSREP: Inconsistency detected: Inconsistent by consensus on "
     "00000000-0000-0000-0000-000000000000:9", "inconsistency"),
    ("2026-11-30 10:16:38 0 [ERROR] Aborting", "aborted"),
    ("2026-11-30 17:04:11 11 [ERROR] Slave SQL: Could not execute Update_rows_v1 event on table "
     "jepsen.lists; Can't find record in 'lists', Error_code: 1032; handler error "
     "HA_ERR_KEY_NOT_FOUND", "replication-stopped"),
    ("2026-11-30 17:04:11 11 [ERROR] Error running query, slave SQL thread aborted. Fix the "
     "problem, and restart the slave SQL thread", "replication-stopped"),
    # a temporary error the applier retries: a clean-clone run logged this and converged
    ("2026-12-01  4:41:19 8 [ERROR] Slave SQL: Could not execute Update_rows_v1 event on table "
     "jepsen.lists; Deadlock found when trying to get lock; try restarting transaction, "
     "Error_code: 1213; handler error HA_ERR_LOCK_DEADLOCK", "replica-retried"),
    ("2026-12-01  4:41:19 8 [ERROR] Slave SQL thread retried transaction 10 time(s) in vain, "
     "giving up. Consider raising the value of the slave_transaction_retries variable.",
     "replication-stopped"),
    # a replica whose master.info a power loss emptied: it never replicates again
    ("2026-12-03  6:24:55 0 [ERROR] Failed to initialize the master info structure",
     "replication-stopped"),
    ("251130 10:01:02 [ERROR] mariadbd got signal 11 ;", "crash"),
    ("2026-11-30 10:15:23 0 [Note] /usr/sbin/mariadbd: ready for connections.", None),
])
def test_the_log_rules_name_what_mariadbd_logs_when_it_refuses_its_data(line, rule):
    import re

    hits = [r["type"] for r in MariaDB.log_rules if re.search(r["regex"], line)]
    assert hits == ([rule] if rule else []), hits


def test_a_client_with_a_gtid_domain_writes_its_transactions_in_it(server):
    """--flag gtid_domains=per-client: the worker's connection to the primary binlogs its
    transactions under its own GTID domain, which a parallel replica applies independently."""
    port, _ = server

    async def go():
        c = SqlClient("127.0.0.1", "n1", 5, port=port, gtid_domain=7)
        try:
            await c.txn([["append", "gtid-k", 1]])
            conn = await c._connection("127.0.0.1")
            async with conn.cursor() as cur:
                await cur.execute("SELECT @@session.gtid_domain_id")
                return (await cur.fetchone())[0]
        finally:
            await c.close()
    assert asyncio.run(go()) == 7


def _rw_register_run(port: int, isolation: str, tmp_path: Path, seconds: float = 6.0) -> dict:
    """The harness's rw-register workload through the runner and the SQL client, ten workers on
    two registers at `isolation`, as fast as they go; its history judged as the workload's
    checker would (claimed serializable). The registers start empty, as in a fresh deployment:
    the workload's values are unique within a run only, so a value left by an earlier run would
    read as one this run's failed transaction wrote (a false G1a)."""
    import pymysql

    from harness.recorder import Recorder
    from harness.runner import RunOptions, run
    from reports.history import read_jsonl
    from workloads.rw_register import RwRegister

    workload = RwRegister(consistency_model="serializable", active_keys=2, max_txn_len=3,
                          threads_per_key=10, ops_per_key=100_000)
    clients: dict[int, SqlClient] = {}

    def client(thread: int) -> SqlClient:
        return clients.setdefault(thread, SqlClient("127.0.0.1", f"n{thread}", 5, isolation,
                                                    port=port, workload="rw-register"))

    async def go():
        try:
            await run(workload, client, rec, RunOptions(concurrency=10, time_limit=seconds,
                                                         rate=0, seed=7))
        finally:
            for c in clients.values():
                await c.close()

    with pymysql.connect(host="127.0.0.1", port=port, user=USER, password=PASSWORD,
                         database=DATABASE) as conn, conn.cursor() as cur:
        cur.execute(SCHEMA[1])
        cur.execute("TRUNCATE TABLE registers")
    rec = Recorder(tmp_path / f"{isolation}.jsonl")
    asyncio.run(go())
    rec.close()
    ops = read_jsonl(tmp_path / f"{isolation}.jsonl")
    assert sum(o.type == "ok" for o in ops) > 100, "too few transactions to judge"
    return workload.checker.check(ops)


def test_rw_register_finds_lost_updates_under_repeatable_read_and_none_when_serializable(
        server, tmp_path):
    """Jepsen's MySQL finding on registers: under REPEATABLE READ two transactions read one
    version of a register and both overwrite it (lost-update, with the G-single it makes), so the
    claim of serializability fails; SERIALIZABLE on the same workload is valid."""
    port, _ = server
    repeatable = _rw_register_run(port, "repeatable-read", tmp_path)
    found = repeatable["results"][0]["anomaly_types"]
    assert repeatable["verdict"] == "invalid" and "lost-update" in found, found
    serializable = _rw_register_run(port, "serializable", tmp_path)
    assert serializable["verdict"] == "valid", serializable["results"][0]["anomaly_types"]


class _Scripted(MariaDB):
    """The convergence check's decisions over scripted server answers: n2 a replica whose
    GTID position reaches the primary's `at` after `lag` polls (or never, `lag` None), its
    tables the primary's once there unless `diverged`."""

    def __init__(self, lag, diverged=False):
        super().__init__(hosts=HOSTS[:2], wheels=[], remotes={}, flags={"topology": "replicas"})
        self.lag, self.diverged, self.polls = lag, diverged, 0

    def sql(self, host, statements, timeout=30.0):
        caught_up = self.lag is not None and self.polls >= self.lag
        if statements.startswith("CHECKSUM"):
            self.polls += host == "n2"
            same = caught_up and not self.diverged
            return "t\t1\n" if host == "n1" or same else "t\t2\n"
        if "gtid_binlog_pos" in statements:
            return "0-1-100\n"
        if "gtid_slave_pos" in statements:
            return "0-1-100\n" if caught_up else f"0-1-{self.polls}\n"
        return "Slave_running\tON\n"


def test_convergence_waits_for_a_replica_still_applying_and_judges_one_that_diverged():
    """A serial replica behind a primary that took writes at full rate is lag, not
    divergence: the check waits while its position moves (past its timeout), and is invalid
    only when the replica holds the primary's position and its tables still differ."""
    late = _Scripted(lag=5).converge(timeout=0, interval=0)
    assert late["verdict"] == "valid"
    diverged = _Scripted(lag=0, diverged=True).converge(timeout=0, interval=0)
    assert diverged["verdict"] == "invalid" and diverged["error"] == "the servers' tables differ"
    stuck = _Scripted(lag=None)
    stuck.sql = lambda host, st, timeout=30.0, orig=stuck.sql: (
        "0-1-7\n" if "gtid_slave_pos" in st else orig(host, st))
    out = stuck.converge(timeout=0, interval=0.01, stall=0.2)
    assert out["verdict"] == "unknown" and "n2 at 0-1-7" in out["error"]
