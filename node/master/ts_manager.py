"""Kudu's TSManager: the tablet servers a master has heard from, when, and what each reported
of its replicas; and which server last reported leading each tablet, by term. Every master keeps
one from the heartbeats it gets (tablet servers heartbeat to all masters), so a new leader
master knows the tablets at once. Time is the event loop's, given as `now`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from node.protocol import Peer, ServerStatus, TabletReport


@dataclass
class TServerState:
    peer: Peer
    last_seen: float
    tablets: dict[str, TabletReport]  # tablet id -> its last report


class TSManager:
    def __init__(self, unresponsive_after_s: float, now: Callable[[], float]):
        self.unresponsive_after_s = unresponsive_after_s
        self.now = now
        self.servers: dict[str, TServerState] = {}
        self.leaders: dict[str, tuple[int, str]] = {}  # tablet -> (term, leader's server uuid)

    def heard(self, st: ServerStatus) -> Peer:
        """A heartbeat's status: the server is alive now, with these replicas. A leader report
        replaces the known leader unless that one reported a higher term."""
        peer = Peer(st.uuid, st.host, st.port)
        self.servers[st.uuid] = TServerState(peer, self.now(), {t.tablet_id: t for t in st.tablets})
        for t in st.tablets:
            if t.role == "LEADER":
                known = self.leaders.get(t.tablet_id)
                if known is None or known[0] <= t.term:
                    self.leaders[t.tablet_id] = (t.term, st.uuid)
        return peer

    def live(self) -> list[TServerState]:
        """The servers heard from within `unresponsive_after_s`."""
        now = self.now()
        return [t for t in self.servers.values() if now - t.last_seen < self.unresponsive_after_s]

    def silent_for(self, uuid: str) -> float:
        return self.now() - self.servers[uuid].last_seen

    def leader_report(self, tablet_id: str) -> tuple[Peer, TabletReport] | None:
        """(peer, report) of the tablet's leader as last heartbeated, if its server is live."""
        known = self.leaders.get(tablet_id)
        ts = self.servers.get(known[1]) if known else None
        rep = ts.tablets.get(tablet_id) if ts else None
        if rep is None or rep.role != "LEADER" or ts not in self.live():
            return None
        return ts.peer, rep
