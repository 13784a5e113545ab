"""Membership change, like Jepsen's membership nemesis: remove a replica from one tablet's Raft
config, then add it back. The master tombstones the removed replica; adding it back makes the
leader copy the tablet onto that tombstone (seeds 03 and 05). Changes go through the leader
master (`master.change_replica`), one at a time and compare-and-set guarded, so a change that
races another is retried, never applied twice.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from nemeses.base import Nemesis
from nemeses.registry import Package, register


@dataclass
class Membership(Nemesis):
    name: str = "membership"
    db: object = None  # harness.db.TesseraDB
    timeout: float = 30.0  # per change, retrying while another change is pending
    _removed: list[tuple[str, str, str]] = field(default_factory=list)  # (tablet, uuid, host)
    _hosts: dict[str, str] = field(default_factory=dict)  # tablet-server uuid -> host, as seen

    def start(self, choice: dict) -> dict:
        """Remove one replica: a running one, or the replica on a host that is down or paused
        (the eviction an operator would do). Only from a tablet whose config is settled, has
        three voters, and whose other members all run, so the removal alone costs no quorum.
        Polls for such a tablet for a while: other faults may be holding every one of them. The
        plan's `pick` chooses among the candidates found then (a rule on live state)."""
        deadline = time.monotonic() + min(10.0, self.timeout)
        while True:
            candidates = self._candidates()
            if candidates or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        if not candidates:
            return {"skipped": "no tablet with a settled three-voter config whose members run"}
        tablet, uuid, host = candidates[choice["pick"] % len(candidates)]
        members = self.change(tablet, "remove", uuid)
        self._removed.append((tablet, uuid, host))
        self.active = True
        return {"removed": host, "tablet": tablet, "config": members}

    def _candidates(self) -> list[tuple[str, str, str]]:
        """(tablet, uuid, host) that may be removed now."""
        from node.protocol import ServerStatus

        statuses = self.db.ask_each(self.db.hosts, "tserver", "ts.status", ServerStatus)
        self._hosts.update({st.uuid: host for host, st in statuses.items()})
        running: dict[str, set[str]] = {}
        for st in statuses.values():
            for t in st.tablets:
                if t.state == "RUNNING":
                    running.setdefault(t.tablet_id, set()).add(st.uuid)
        answered = {st.uuid for st in statuses.values()}
        out = []
        for st in statuses.values():
            for t in st.tablets:
                if (t.role != "LEADER" or t.config != t.committed_config
                        or sum(kind == "VOTER" for _, kind in t.committed_config) < 3):
                    continue
                members = {uuid for uuid, _ in t.committed_config}
                for uuid in sorted(members):
                    others_run = members - {uuid} <= running[t.tablet_id]
                    target_ok = uuid in running[t.tablet_id] or uuid not in answered
                    if others_run and target_ok and uuid in self._hosts:
                        out.append((t.tablet_id, uuid, self._hosts[uuid]))
        return sorted(out)

    def stop(self) -> dict:
        added = []
        while self._removed:
            tablet, uuid, host = self._removed[0]
            self.change(tablet, "add", uuid)  # raises after `timeout`: heal tries again
            self._removed.pop(0)
            added.append({"added": host, "tablet": tablet})
        self.active = False
        return {"added": added}

    def change(self, tablet: str, op: str, uuid: str) -> list[list]:
        """Apply one change through the master; retried while another is pending or the
        leader moves. Already applied (a retry after a lost reply) counts as done."""
        from node.rpc import ErrorCode, RpcError

        done_already = "already a member" if op == "add" else "is not a member"
        deadline = time.monotonic() + self.timeout

        async def once() -> list[list]:
            return await change_replica(self.db, tablet, op, uuid)

        while True:
            try:
                return asyncio.run(once())
            except RpcError as e:
                if e.code == ErrorCode.ILLEGAL_STATE and done_already in str(e):
                    return []
                if time.monotonic() > deadline:
                    raise
            time.sleep(1.0)


async def change_replica(db, tablet: str, op: str, uuid: str, timeout: float = 10.0) -> list[list]:
    """One change through the leader master, no retries; returns the committed config."""
    from node.client import TesseraClient

    client = TesseraClient(db.master_addrs, timeout=timeout)
    try:
        return (await client.change_replica(tablet, op, uuid)).members
    finally:
        await client.close()


register(Package("membership", heal_rank=60, needs=frozenset({"tablets"}), draw=lambda rng, hosts: {"pick": rng.randrange(1 << 16)},
                 build=lambda ctx: Membership(db=ctx.db)))
