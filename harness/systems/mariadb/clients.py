"""The workloads' client for MariaDB: list-append, rw-register and bank transactions in SQL, as
Jepsen's MySQL and Galera suites write them (jepsen-io/mysql's append, rw and bank workloads),
over aiomysql (PyMySQL's asyncio form), so the harness's workers stay coroutines on one event
loop.

list-append: a list is one row, `lists(id, val)`, its elements a comma-joined text: an append is
`INSERT ... ON DUPLICATE KEY UPDATE val = CONCAT(val, ',', v)`, a read `SELECT val`.
rw-register: a register is one row, `registers(id, val)`: a write is `INSERT ... ON DUPLICATE KEY
UPDATE val = v`, a read `SELECT val` (nil for a register never written). bank: an
account is one row, `accounts(id, balance)`: `w` sets it, `add` adds to it (a missing account
counts as 0), `require_ge` reads it and rolls the transaction back, a definite failure, if it is
below the bound. Each transaction runs at the test's isolation level, set for that transaction
(`SET TRANSACTION ISOLATION LEVEL`, then `START TRANSACTION`).

How an op ended, in Jepsen's classes (workloads.outcomes):
- an error before COMMIT was sent, or any error of a read-only transaction: a definite failure
  (the server rolls back a transaction whose COMMIT it never got, and a read changes nothing);
- at COMMIT, the errors MariaDB documents as a rollback: a deadlock or a Galera certification
  failure (1213), a lock wait timeout (1205), a node that is not ready (1047): definite;
- any other end of a COMMIT, a lost connection or a timeout among them: indeterminate.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from workloads.outcomes import OpFailed, OpUnknown

PORT = 3306
USER = PASSWORD = "jepsen"
DATABASE = "jepsen"
# The isolation levels a test may ask for (`--flag isolation=`), in SQL's words.
ISOLATION = {"read-uncommitted": "READ UNCOMMITTED", "read-committed": "READ COMMITTED",
             "repeatable-read": "REPEATABLE READ", "serializable": "SERIALIZABLE"}
# Errors at COMMIT after which the transaction certainly rolled back: ER_LOCK_DEADLOCK (also
# Galera's certification failure), ER_LOCK_WAIT_TIMEOUT, ER_UNKNOWN_COM_ERROR (1047: WSREP has
# not yet prepared the node for application use).
ROLLED_BACK = frozenset({1213, 1205, 1047})
# Client errors for a connection that is gone: CR_SERVER_GONE_ERROR, CR_SERVER_LOST,
# CR_COMMANDS_OUT_OF_SYNC.
LOST = frozenset({2006, 2013, 2014})
SCHEMA = ("CREATE TABLE IF NOT EXISTS jepsen.lists "
          "(id VARCHAR(64) PRIMARY KEY, val MEDIUMTEXT NOT NULL) ENGINE=InnoDB",
          "CREATE TABLE IF NOT EXISTS jepsen.registers "
          "(id VARCHAR(64) PRIMARY KEY, val BIGINT NOT NULL) ENGINE=InnoDB",
          "CREATE TABLE IF NOT EXISTS jepsen.accounts "
          "(id VARCHAR(64) PRIMARY KEY, balance BIGINT NOT NULL) ENGINE=InnoDB")


class Refused(Exception):
    """A bank transfer's `require_ge` found too little: the transaction was rolled back."""


def ending(at_commit: bool, read_only: bool, code: int | None) -> type[OpFailed | OpUnknown]:
    """How a transaction that raised ended: `code` is MariaDB's error number, None for an
    error with none (a timeout, a socket error)."""
    if not at_commit or read_only or code in ROLLED_BACK:
        return OpFailed
    return OpUnknown


def _code(e: BaseException) -> int | None:
    import pymysql

    if isinstance(e, pymysql.MySQLError) and e.args and isinstance(e.args[0], int):
        return e.args[0]
    return None


def elements(val: str | None) -> list[int]:
    """A list row's elements; a key no append reached reads as the empty list."""
    return [int(x) for x in val.split(",")] if val else []


@dataclass
class SqlClient:
    """One worker's connection: writes and mixed transactions to `address`, read-only ones to
    `read_address` (a binlog replica, as Jepsen's tests read from them) when it is given."""

    address: str
    node: str
    op_timeout: float
    isolation: str = "repeatable-read"
    read_address: str | None = None
    port: int = PORT
    workload: str = "list-append"  # whose table the micro-ops work on (SqlClient.WORKLOADS)
    gtid_domain: int | None = None  # the connection's own GTID domain (--flag gtid_domains)
    _conns: dict[str, Any] = field(default_factory=dict)

    async def _connection(self, address: str):
        import aiomysql

        if (conn := self._conns.get(address)) is not None:
            return conn
        try:
            conn = await asyncio.wait_for(aiomysql.connect(
                host=address, port=self.port, user=USER, password=PASSWORD, db=DATABASE,
                autocommit=False, connect_timeout=self.op_timeout), self.op_timeout)
        except (TimeoutError, OSError, aiomysql.Error) as e:
            raise OpFailed(f"connect {address}: {_text(e)}") from None
        if self.gtid_domain is not None and address == self.address:  # the primary's binlog
            try:
                async with asyncio.timeout(self.op_timeout), conn.cursor() as cur:
                    await cur.execute("SET SESSION gtid_domain_id = %s", (self.gtid_domain,))
            except (TimeoutError, OSError, aiomysql.Error) as e:
                conn.close()
                raise OpFailed(f"set gtid_domain_id on {address}: {_text(e)}") from None
        self._conns[address] = conn
        return conn

    def _drop(self, address: str) -> None:
        """Forget the connection after an error that may have left it mid-statement."""
        if (conn := self._conns.pop(address, None)) is not None:
            conn.close()

    async def txn(self, ops: list[list]) -> list[list]:
        read_only = all(f == "r" for f, _, _ in ops)
        address = self.read_address if read_only and self.read_address else self.address
        conn = await self._connection(address)
        phase = "statements"
        try:
            async with asyncio.timeout(self.op_timeout):
                async with conn.cursor() as cur:
                    await cur.execute(f"SET TRANSACTION ISOLATION LEVEL {ISOLATION[self.isolation]}")
                    await cur.execute("START TRANSACTION")
                    micro_op = getattr(self, self.WORKLOADS[self.workload])
                    done = [await micro_op(cur, *op) for op in ops]
                phase = "commit"
                await conn.commit()
                return done
        except Refused as e:
            await self._rollback(address, conn)
            raise OpFailed(f"{address}: {e}") from None
        except Exception as e:  # every error is classified; none escapes unnamed
            code = _code(e)
            if code is None or code in LOST:
                self._drop(address)
            else:
                await self._rollback(address, conn)
            raise ending(phase == "commit", read_only, code)(f"{address}: {_text(e)}") from None

    # The workloads this client runs, each with the method that runs one of its micro-ops.
    WORKLOADS = {"list-append": "_list", "rw-register": "_register", "bank": "_account"}

    @staticmethod
    async def _list(cur, f: str, key: str, value: Any) -> list:
        if f == "r":
            await cur.execute("SELECT val FROM lists WHERE id = %s", (key,))
            row = await cur.fetchone()
            return ["r", key, elements(row[0] if row else None)]
        await cur.execute("INSERT INTO lists (id, val) VALUES (%s, %s) "
                          "ON DUPLICATE KEY UPDATE val = CONCAT(val, ',', %s)",
                          (key, str(value), str(value)))
        return [f, key, value]

    @staticmethod
    async def _register(cur, f: str, key: str, value: Any) -> list:
        if f == "r":
            await cur.execute("SELECT val FROM registers WHERE id = %s", (key,))
            row = await cur.fetchone()
            return ["r", key, int(row[0]) if row else None]
        await cur.execute("INSERT INTO registers (id, val) VALUES (%s, %s) "
                          "ON DUPLICATE KEY UPDATE val = %s", (key, int(value), int(value)))
        return [f, key, value]

    @staticmethod
    async def _account(cur, f: str, key: str, value: Any) -> list:
        if f in ("r", "require_ge"):
            await cur.execute("SELECT balance FROM accounts WHERE id = %s", (key,))
            row = await cur.fetchone()
            balance = int(row[0]) if row else None
            if f == "r":
                return ["r", key, balance]
            if (balance or 0) < value:
                raise Refused(f"require_ge {key} {value}: the balance is {balance or 0}")
            return [f, key, value]
        update = "balance = %s" if f == "w" else "balance = balance + %s"
        await cur.execute(f"INSERT INTO accounts (id, balance) VALUES (%s, %s) "
                          f"ON DUPLICATE KEY UPDATE {update}", (key, int(value), int(value)))
        return [f, key, value]

    async def _rollback(self, address: str, conn) -> None:
        try:
            await asyncio.wait_for(conn.rollback(), self.op_timeout)
        except Exception:  # the connection is no longer usable: a new one next time
            self._drop(address)

    async def write(self, key: str, value: Any) -> None:
        """The harness's readiness probe (harness.deployment.first_write): an append that
        commits, in a list of its own."""
        await self.txn([["append", key, value]])

    async def read(self, key: str) -> Any:
        return (await self.txn([["r", key, None]]))[0][2]

    async def cas(self, key: str, expected: Any, new: Any) -> bool:
        raise NotImplementedError("MariaDB runs list-append, rw-register and bank: no "
                                  "compare-and-set")

    async def append(self, key: str, element: Any) -> None:
        await self.txn([["append", key, element]])

    async def close(self) -> None:
        for address in list(self._conns):
            self._drop(address)


def _text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
