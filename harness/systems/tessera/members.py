"""Tessera's tablets for the membership nemeses (nemeses.membership.Members) and the replica-group
races (nemeses.groups.ReplicaGroups): a tablet's replicas, changed one at a time through the
leader master (`master.change_replica`), compare-and-set guarded, so a change that races another
is retried, never applied twice; a tablet as its newest replica reports it; a replica
tombstoned on its tablet server. A change is waited on only while its tablet could still elect a
leader: one whose voters are mostly FAILED (`stranded`) gets none until an operator steps in, and
waiting on it would only spend the run's budget."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nemeses.groups import GroupView
    from node.protocol import ServerStatus


@dataclass
class TabletMembers:
    db: object  # harness.systems.tessera.deployment.TesseraDB
    _hosts: dict[str, str] = field(default_factory=dict)  # tablet-server uuid -> host, as seen
    retry_s: float = 1.0  # between a change's tries
    # How long a tablet must stay stranded before a change gives up on it: a replica FAILED by
    # a fault that is healed with a restart may run again, and one look could catch it between.
    stranded_s: float = 5.0
    why_none: str = ""  # what the last `removable` found lacking, when it found nothing

    def removable(self) -> list[tuple[str, str, str]]:
        """(tablet, uuid, host) of replicas that may be removed now: a running one, or one on a
        host that is down or paused (the eviction an operator would do), of a tablet whose
        config is settled, has three voters, and whose other members all run. When there is
        none, `why_none` says what each tablet lacked."""
        from node.protocol import ServerStatus

        statuses = self.db.ask_each(self.db.hosts, "tserver", "ts.status", ServerStatus)
        self._hosts.update({st.uuid: host for host, st in statuses.items()})
        running: dict[str, set[str]] = {}
        for st in statuses.values():
            for t in st.tablets:
                if t.state == "RUNNING":
                    running.setdefault(t.tablet_id, set()).add(st.uuid)
        answered = {st.uuid for st in statuses.values()}
        out, lacks = [], {tid: "no leader reported" for tid in running}
        for st in statuses.values():
            for t in st.tablets:
                if t.role != "LEADER":
                    continue
                if t.config != t.committed_config:
                    lacks[t.tablet_id] = "a change pending"
                    continue
                if sum(kind == "VOTER" for _, kind in t.committed_config) < 3:
                    lacks[t.tablet_id] = "fewer than three voters"
                    continue
                members = {uuid for uuid, _ in t.committed_config}
                down = sorted(self._hosts.get(u, u) for u in members - running[t.tablet_id])
                lacks[t.tablet_id] = (f"members not running: {', '.join(down)}" if down else
                                      "no member whose host is known")
                for uuid in sorted(members):
                    others_run = members - {uuid} <= running[t.tablet_id]
                    target_ok = uuid in running[t.tablet_id] or uuid not in answered
                    if others_run and target_ok and uuid in self._hosts:
                        out.append((t.tablet_id, uuid, self._hosts[uuid]))
        self.why_none = "" if out else (
            "; ".join(f"{tid[-4:]}: {why}" for tid, why in sorted(lacks.items()))
            or f"no tablet server reports a running replica ({len(statuses)} answered)")
        return sorted(out)

    def remove(self, member: tuple[str, str, str], timeout: float = 30.0) -> dict:
        return {"tablet": member[0], "config": self.change(member[0], "remove", member[1], timeout)}

    def present(self, member: tuple[str, str, str]) -> bool | None:
        """Whether the tablet's newest committed config, asked of its running replicas on their
        tablet servers, still counts the member; None when no server reports a running
        replica of it."""
        view = self.view(member[0])
        return None if view is None else member[1] in view.members

    def view(self, tablet: str) -> GroupView | None:
        """The tablet as its newest term's running replica reports it (nemeses.groups)."""
        from nemeses.groups import GroupView
        from node.protocol import ServerStatus

        statuses = self.db.ask_each(self.db.hosts, "tserver", "ts.status", ServerStatus)
        hosts = {st.uuid: h for h, st in statuses.items()}
        self._hosts.update(hosts)
        reports = [(h, t) for h, st in statuses.items() for t in st.tablets
                   if t.tablet_id == tablet and t.state == "RUNNING"]
        if not reports:
            return None
        h, newest = max(reports, key=lambda r: (r[1].term, r[1].role == "LEADER"))
        # Committed configs form one chain, so the one at the highest index is the newest. The
        # newest term's replica may lack it: with the leader paused, a removed follower of the
        # same term, which no leader tells of the commit that removed it, still lists itself.
        committed = max((t for _, t in reports), key=lambda t: t.committed_config_index)
        return GroupView(leader=h if newest.role == "LEADER" else None,
                         members=dict(committed.committed_config), hosts=hosts)

    def change_once(self, tablet: str, op: str, uuid: str, timeout: float) -> str:
        """One change through the master, not retried: the master's compare-and-set guard may
        refuse it, and the refusal is the answer."""
        from node.rpc import RpcError

        try:
            asyncio.run(change_replica(self.db, tablet, op, uuid, timeout=timeout))
            return "ok"
        except RpcError as e:
            return f"refused: {e}"

    def tombstone(self, host: str, tablet: str) -> bool:
        """ts.delete_tablet on `host`'s tablet server, as a failed disk or an operator leaves a
        voter that is still in the config."""
        from node.protocol import Ack, DeleteTablet

        target = [h for h in self.db.hosts if h.name == host]
        acked = self.db.ask_each(target, "tserver", "ts.delete_tablet", Ack, DeleteTablet(tablet))
        return acked.get(host, Ack(False)).ok

    def add(self, member: tuple[str, str, str], timeout: float = 30.0) -> dict:
        self.change(member[0], "add", member[1], timeout)
        return {"tablet": member[0]}

    def change(self, tablet: str, op: str, uuid: str, timeout: float = 30.0) -> list[list]:
        """Apply one change through the master; retried while another is pending or the
        leader moves. Already applied (a retry after a lost reply) counts as done; a removal
        the leader refuses as unsafe (consensus.UnsafeChange) raises Refused at once, and a
        tablet `stranded` for `stranded_s` raises Stranded before the timeout."""
        from nemeses.membership import Refused, Stranded
        from node.client import TesseraClient
        from node.rpc import RpcError

        deadline = time.monotonic() + timeout
        stranded_since = None
        while True:
            # Looked at before each try: the master waits out its own retries for a leader
            # (ten seconds a call), and on a stranded tablet it could only say there is none.
            why = self.stranded(tablet)
            if why is not None:
                stranded_since = stranded_since or time.monotonic()
                if (time.monotonic() - stranded_since >= self.stranded_s
                        or time.monotonic() > deadline):
                    raise Stranded(f"{op} of {uuid} in tablet {tablet} given up: {why}")
                time.sleep(self.retry_s)
                continue
            stranded_since = None
            try:
                return asyncio.run(change_replica(self.db, tablet, op, uuid))
            except RpcError as e:
                if TesseraClient.change_already_made(e, op):
                    return []
                if refused_as_unsafe(e):
                    raise Refused(e.message) from None
                if time.monotonic() > deadline:
                    raise
            time.sleep(self.retry_s)

    def stranded(self, tablet: str) -> str | None:
        """Why `tablet` can elect no leader now, asked of every tablet server (`stranded`)."""
        from node.protocol import ServerStatus

        return stranded(self.db.ask_each(self.db.hosts, "tserver", "ts.status", ServerStatus), tablet)


def stranded(statuses: dict[str, ServerStatus], tablet: str) -> str | None:
    """Why `tablet` can elect no leader until an operator steps in, or None when it may. It is
    stranded when no replica leads and every RUNNING voter's config in effect (a pending change
    included: a Raft config counts from its append) has half its voters or more FAILED, as
    their own servers report: no candidate can win a vote then (Raft's limit; Kudu leaves it
    to an operator's unsafe config change), and with no leader the master replaces no FAILED
    replica. A voter on a host that did not answer, or that is copying or tombstoned, is
    counted as one that may vote, and a tablet no RUNNING voter reports is not judged."""
    by_uuid = {st.uuid: t for st in statuses.values() for t in st.tablets if t.tablet_id == tablet}
    if any(t.role == "LEADER" for t in by_uuid.values()):
        return None
    failed = {uuid for uuid, t in by_uuid.items() if t.state == "FAILED"}
    configs = {}
    for uuid, t in by_uuid.items():
        voters = frozenset(u for u, kind in t.config if kind == "VOTER")
        if t.state == "RUNNING" and uuid in voters:
            configs[uuid] = voters
    if not configs or any(len(v - failed) > len(v) // 2 for v in configs.values()):
        return None
    said = "; ".join(f"{u}'s has {len(v & failed)} of {len(v)} FAILED ({', '.join(sorted(v & failed))})"
                     for u, v in sorted(configs.items()))
    return f"no replica leads, and every running voter's config in effect has no live majority: {said}"


def refused_as_unsafe(e: Exception) -> bool:
    """Whether a config change failed because the leader refused it as unsafe now
    (consensus.UnsafeChange: too few live voters would remain) and did nothing."""
    from node.rpc import ErrorCode, RpcError

    return isinstance(e, RpcError) and e.code == ErrorCode.ILLEGAL_STATE and "UnsafeChange" in str(e)


async def change_replica(db, tablet: str, op: str, uuid: str, timeout: float = 10.0) -> list[list]:
    """One change through the leader master, no retries; returns the committed config."""
    from node.client import TesseraClient

    client = TesseraClient(db.master_addrs, timeout=timeout * db.time_scale, tls=db.tls(),
                           time_scale=db.time_scale)
    try:
        return (await client.change_replica(tablet, op, uuid)).members
    finally:
        await client.close()
