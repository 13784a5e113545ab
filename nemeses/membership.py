"""Membership change, like Jepsen's membership nemesis: remove a replica from one tablet's Raft
config, then add it back. The master tombstones the removed replica; adding it back makes the
leader copy the tablet onto that tombstone (seeds 03 and 05). Changes go through the leader
master (`master.change_replica`), one at a time and compare-and-set guarded, so a change that
races another is retried, never applied twice.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

from nemeses.base import Nemesis


@dataclass
class Membership(Nemesis):
    name: str = "membership"
    db: object = None  # harness.db.TesseraDB
    timeout: float = 30.0  # per change, retrying while another change is pending
    _removed: list[tuple[str, str, str]] = field(default_factory=list)  # (tablet, uuid, host)

    def start(self, rng: random.Random) -> dict:
        from node.protocol import ServerStatus

        statuses = self.db.ask_each(self.db.hosts, "tserver", "ts.status", ServerStatus)
        running: dict[str, set[str]] = {}
        for st in statuses.values():
            for t in st.tablets:
                if t.state == "RUNNING":
                    running.setdefault(t.tablet_id, set()).add(st.uuid)
        # Only a tablet whose config is settled (nothing pending), with three voters and every
        # member running: removing one then costs no availability by itself.
        settled = {t.tablet_id for st in statuses.values() for t in st.tablets
                   if t.role == "LEADER" and t.config == t.committed_config
                   and sum(kind == "VOTER" for _, kind in t.committed_config) >= 3
                   and {uuid for uuid, _ in t.committed_config} <= running[t.tablet_id]}
        candidates = sorted((t.tablet_id, st.uuid, host) for host, st in statuses.items()
                            for t in st.tablets
                            if t.tablet_id in settled and t.state == "RUNNING")
        if not candidates:
            return {"skipped": "no tablet has three voters and no change pending"}
        tablet, uuid, host = rng.choice(candidates)
        members = self._change(tablet, "remove", uuid)
        self._removed.append((tablet, uuid, host))
        self.active = True
        return {"removed": host, "tablet": tablet, "config": members}

    def stop(self) -> dict:
        added = []
        while self._removed:
            tablet, uuid, host = self._removed[0]
            self._change(tablet, "add", uuid)  # raises after `timeout`: heal tries again
            self._removed.pop(0)
            added.append({"added": host, "tablet": tablet})
        self.active = False
        return {"added": added}

    def _change(self, tablet: str, op: str, uuid: str) -> list[list]:
        """Apply one change through the master; retried while another is pending or the
        leader moves. Already applied (a retry after a lost reply) counts as done."""
        from node.client import TesseraClient
        from node.rpc import ErrorCode, RpcError

        done_already = "already a member" if op == "add" else "is not a member"
        deadline = time.monotonic() + self.timeout

        async def once() -> list[list]:
            client = TesseraClient(self.db.master_addrs, timeout=10.0)
            try:
                return (await client.change_replica(tablet, op, uuid)).members
            finally:
                await client.close()

        while True:
            try:
                return asyncio.run(once())
            except RpcError as e:
                if e.code == ErrorCode.ILLEGAL_STATE and done_already in str(e):
                    return []
                if time.monotonic() > deadline:
                    raise
            time.sleep(1.0)
