"""The second system under test: PySyncObj, a Raft library, as a replicated key-value store
(harness/systems/pysyncobj/node.py) on every host. `tessera test --db pysyncobj` runs the register and
set workloads against it with every fault that applies: partitions, packet faults, clocks,
pauses and kills (leaders found by asking the nodes), majority kills, leader isolation, and
lose-unfsynced, which shows what its never-fsynced journal keeps after a power loss.

Clients are bound to nodes, thread t to host t mod n, as Jepsen binds them: PySyncObj forwards
a follower's command to its leader itself, so binding is how a user runs it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

from harness.cluster import Host
from harness.deployment import DATA, ROOT, Deployment, bound_clients, first_write
from reports.checkers.logs import rule
from workloads.outcomes import OpFailed, OpUnknown

RAFT_PORT, CLIENT_PORT = 7060, 7061
GROUP = "pysyncobj"  # its one replication group, as the nemeses' tablet rules name it
LEADER = 2  # PySyncObj's _RAFT_STATE.LEADER
# Keys the harness sets itself: the data dir's files, a fixed node set, the host's address.
OWN_CONF = {"journalFile", "fullDumpFile", "dynamicMembershipChange", "bindAddress"}


@dataclass
class PySyncObjDB(Deployment):
    name: ClassVar[str] = "pysyncobj"
    data_daemon: ClassVar[str] = "node"
    all_daemons: ClassVar[tuple[str, ...]] = ("node",)
    offers: ClassVar[frozenset[str]] = frozenset({"leaders"})
    workloads: ClassVar[tuple[str, ...]] = ("register", "set")
    log_rules: ClassVar[tuple[dict, ...]] = (
        rule("divergence", "state machine may have diverged",
             "PySyncObj truncated log entries it had already applied: its state diverged"),
        rule("data-loss", "exceeds journal end",
             "after a restart PySyncObj's commit index pointed past its journal: committed "
             "entries were gone from disk"),
        rule("start-failure", r"^pysyncobj node: ", "a node could not start"),
        rule("overload", r"overloaded: PySyncObj's command queue is full",
             "the leader refused commands: its queue was full", severity="note"),
        rule("dump-failure", "Failed to store full dump",
             "a node could not write its snapshot", severity="note"),
    )

    @classmethod
    def check_flags(cls, flags: dict) -> None:
        try:
            from pysyncobj import SyncObjConf
        except ImportError:
            raise ValueError("--db pysyncobj needs pysyncobj on this machine too, to check "
                             "--flag: pip install 'tessera[pysyncobj]'") from None
        known = set(vars(SyncObjConf())) - OWN_CONF
        for key, value in flags.items():
            if key == "reads":
                if value not in ("log", "local"):
                    raise ValueError(f"--flag reads= takes log or local, not {value!r}")
            elif key not in known:
                raise ValueError(f"--flag {key}: not a SyncObjConf keyword the harness leaves "
                                 f"to you (known: reads, {', '.join(sorted(known))})")

    def daemons(self, host: str) -> list[str]:
        return ["node"]

    def command(self, host: str, daemon: str) -> str:
        return f"{ROOT}/venv/bin/python -m harness.systems.pysyncobj.node --config {ROOT}/node.json"

    def config(self, h: Host) -> dict:
        conf = {k: v for k, v in self.flags.items() if k != "reads"}
        return {"self": f"{h.address}:{RAFT_PORT}", "client_port": CLIENT_PORT,
                "partners": [f"{o.address}:{RAFT_PORT}" for o in self.hosts if o is not h],
                "data_dir": self.data_dir("node"), "reads": self.flags.get("reads", "log"),
                "conf": conf}

    def configure(self, h: Host) -> None:
        r = self.remotes[h.name]
        r.run(["mkdir", "-p", self.data_dir("node"), f"{DATA}/logs"])
        r.write(f"{ROOT}/node.json", json.dumps(self.config(h), indent=1).encode())

    # -- asking the nodes --------------------------------------------------------------------
    def statuses(self) -> dict[str, dict]:
        """host name -> the node's status, for the nodes that answered within a second."""
        def ask(h: Host):
            try:
                with socket.create_connection((h.address, CLIENT_PORT), timeout=1.0) as s:
                    s.sendall(b'{"f": "status"}\n')
                    return h.name, json.loads(s.makefile().readline())["ok"]
            except (OSError, ValueError, KeyError):
                return h.name, None

        with ThreadPoolExecutor(len(self.hosts)) as pool:
            return {n: st for n, st in pool.map(ask, self.hosts) if st is not None}

    def leader_master(self) -> str | None:
        """The node that says it leads, in the highest term any does."""
        leaders = [(st["term"], host) for host, st in self.statuses().items()
                   if st["state"] == LEADER]
        return max(leaders)[1] if leaders else None

    def tablet_leaders(self) -> dict[str, str]:
        leader = self.leader_master()
        return {GROUP: leader} if leader else {}

    # -- clients -----------------------------------------------------------------------------
    async def open_clients(self, workload, names: dict[str, str], binds: list[str] | None,
                           op_timeout: float, timeout: float = 60.0):
        """Once a write through the first host commits: one connection per worker thread."""
        self.log("waiting for PySyncObj to elect a leader and commit a write")
        await first_write(NodeClient(self.hosts[0].address, self.hosts[0].name, op_timeout),
                          "PySyncObj", timeout)
        clients, close = bound_clients(
            binds, names, lambda address, node: NodeClient(address, node, op_timeout))
        return clients, close, {0: GROUP}

    # -- end of run --------------------------------------------------------------------------
    def end_checks(self) -> list[tuple[str, object]]:
        return [("convergence", self.converge)]

    def converge(self, timeout: float = 30.0, interval: float = 0.5) -> dict:
        """Every node's applied state, once all have applied the same index: equal, or not.
        A node's digest is read beside PySyncObj's tick thread, which may be applying the next
        entry, so differing digests count only when two polls in a row saw the same ones."""
        deadline = time.monotonic() + timeout
        before: dict = {}
        while True:
            now = self.statuses()
            result = compare_nodes(now, [h.name for h in self.hosts])
            settled = all(before.get(h, {}).get(k) == st.get(k)
                          for h, st in now.items() for k in ("last_applied", "digest"))
            if result["verdict"] == "invalid" and not settled:
                result = {**result, "verdict": "unknown", "errors": [],
                          "reason": "digests differ while the nodes may still be applying"}
            if result["verdict"] != "unknown" or time.monotonic() > deadline:
                return result
            before = now
            time.sleep(interval)


def compare_nodes(statuses: dict[str, dict], hosts: list[str]) -> dict:
    """The convergence rule for a state-machine replica per node: with every node answering and
    all at one applied index, their state digests must be equal. Pure."""
    nodes = {h: {k: statuses[h].get(k) for k in ("last_applied", "term", "digest", "state")}
             for h in hosts if h in statuses}
    result = {"checker": "convergence", "nodes": nodes, "errors": [],
              "unreachable": [h for h in hosts if h not in statuses]}
    if result["unreachable"]:
        return {**result, "verdict": "unknown", "reason": "some nodes did not answer"}
    applied = {n["last_applied"] for n in nodes.values()}
    if len(applied) != 1:
        return {**result, "verdict": "unknown", "reason": f"applied indexes differ: {sorted(applied)}"}
    digests = {n["digest"] for n in nodes.values()}
    if len(digests) == 1:
        return {**result, "verdict": "valid"}
    by_digest: dict[str, list[str]] = {}
    for h, n in nodes.items():
        by_digest.setdefault(n["digest"], []).append(h)
    return {**result, "verdict": "invalid", "errors": [{
        "type": "divergent-state", "groups": by_digest,
        "explanation": f"at applied index {applied.pop()} the nodes hold different states: "
                       + "; ".join(f"{', '.join(hs)}: {d}" for d, hs in sorted(by_digest.items()))}]}


class NodeClient:
    """The workloads' client (workloads.base.KVClient) for one PySyncObj node: one connection,
    one request at a time. A failure before the request left is definite (OpFailed); after,
    the command may still commit (OpUnknown), unless the node says PySyncObj refused it."""

    def __init__(self, address: str, node: str, timeout: float):
        self.address, self.node, self.timeout = address, node, timeout
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def close(self) -> None:
        if self._conn is not None:
            _, writer = self._conn
            self._conn = None
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    async def _call(self, req: dict):
        if self._conn is None:
            try:
                self._conn = await asyncio.wait_for(
                    asyncio.open_connection(self.address, CLIENT_PORT), self.timeout)
            except (OSError, TimeoutError) as e:
                raise OpFailed(f"cannot connect to {self.node}: {e or type(e).__name__}") from None
        reader, writer = self._conn
        try:
            writer.write(json.dumps(req).encode() + b"\n")
            await writer.drain()
            line = await reader.readline()
        except BaseException as e:  # a cancelled or broken call leaves the stream unusable
            await self.close()
            if isinstance(e, OSError):
                raise OpUnknown(f"{self.node}: {e}") from None
            raise
        if not line:
            await self.close()
            raise OpUnknown(f"{self.node} closed the connection")
        reply = json.loads(line)
        if "error" in reply:
            raise (OpFailed if reply.get("definite") else OpUnknown)(reply["error"])
        return reply["ok"]

    async def read(self, key: str):
        return await self._call({"f": "read", "key": key})

    async def write(self, key: str, value) -> None:
        await self._call({"f": "write", "key": key, "value": value})

    async def cas(self, key: str, expected, new) -> bool:
        return await self._call({"f": "cas", "key": key, "value": [expected, new]})

    async def append(self, key: str, element) -> None:
        await self._call({"f": "add", "key": key, "value": element})
