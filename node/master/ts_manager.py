"""Kudu's TSManager: the tablet servers a master has heard from, when, and what each reported
of its replicas; and which server last reported leading each tablet, by term. Every master keeps
one from the heartbeats it gets (tablet servers heartbeat to all masters), so a new leader
master knows the tablets at once. Time is the event loop's, given as `now`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from node.probes import probe
from node.protocol import Peer, ServerStatus, TabletReport


@dataclass
class TServerState:
    peer: Peer
    last_seen: float
    tablets: dict[str, TabletReport]  # tablet id -> its last report


class TSManager:
    def __init__(self, unresponsive_after_s: float, now: Callable[[], float],
                 deaf_after_s: float = 3.0):
        self.unresponsive_after_s = unresponsive_after_s
        self.now = now
        self.servers: dict[str, TServerState] = {}
        self.leaders: dict[str, tuple[int, str]] = {}  # tablet -> (term, leader's server uuid)
        # This master's own hearing: no heartbeat from any server for `deaf_after_s` means
        # the master is cut off (or was paused), not that every server is down. When it last
        # heard one, and since when it has heard them with no such gap (-inf: since it started).
        self.deaf_after_s = deaf_after_s
        self._last_heard: float | None = None
        self._hearing_since = -math.inf

    def heard(self, st: ServerStatus) -> Peer:
        """A heartbeat's status: the server is alive now, with these replicas. A leader report
        replaces the known leader unless that one reported a higher term and still leads."""
        peer = Peer(st.uuid, st.host, st.port)
        now = self.now()
        if self._last_heard is not None and now - self._last_heard > self.deaf_after_s:
            probe("master.ts.hearing_resumed")
            self._hearing_since = now
        self._last_heard = now if self._last_heard is None else max(self._last_heard, now)
        self.servers[st.uuid] = TServerState(peer, now, {t.tablet_id: t for t in st.tablets})
        for t in st.tablets:
            if t.role == "LEADER":
                known = self.leaders.get(t.tablet_id)
                if known is None or known[0] <= t.term:
                    self.leaders[t.tablet_id] = (t.term, st.uuid)
                elif self.leader_report(t.tablet_id) is None:
                    # The leader known in a higher term is gone (its server not live) or no
                    # longer leads: this one is the leader there is. After an unsafe config
                    # change (Kudu's unsafe_change_config) the survivor leads in its own term,
                    # which may be below one a lost leader reported; kept by term alone, the
                    # tablet would have no leader for good. A deposed leader that has not heard
                    # of its successor steps down within an election timeout (check quorum).
                    probe("master.leader.lower_term_taken")
                    self.leaders[t.tablet_id] = (t.term, st.uuid)
        return peer

    def live(self) -> list[TServerState]:
        """The servers heard from within `unresponsive_after_s`."""
        now = self.now()
        return [t for t in self.servers.values() if now - t.last_seen < self.unresponsive_after_s]

    def silent_for(self, uuid: str) -> float:
        return self.now() - self.servers[uuid].last_seen

    def silence_heard(self, uuid: str) -> float:
        """How long the server has been silent while this master was hearing the others: none
        while it hears no server at all, and only since it hears them again. A master cut off
        from the tablet servers sees every one of them fall silent; once its links are back
        their heartbeats return one by one, and one not back yet is no sign its server failed."""
        now = self.now()
        if self._last_heard is None or now - self._last_heard > self.deaf_after_s:
            return 0.0
        return min(self.silent_for(uuid), now - self._hearing_since)

    def leader_report(self, tablet_id: str) -> tuple[Peer, TabletReport] | None:
        """(peer, report) of the tablet's leader as last heartbeated, if its server is live."""
        known = self.leaders.get(tablet_id)
        ts = self.servers.get(known[1]) if known else None
        rep = ts.tablets.get(tablet_id) if ts else None
        if rep is None or rep.role != "LEADER" or ts not in self.live():
            return None
        return ts.peer, rep
