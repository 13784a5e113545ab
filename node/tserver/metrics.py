"""Prometheus metrics of a server's tablets, read from live state at scrape time: nothing to
update on the hot path."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

from node.tserver.tablet_manager import TabletManager, TabletState


class TabletMetrics:
    def __init__(self, tablets: TabletManager):
        self.tablets = tablets

    def collect(self):
        term = GaugeMetricFamily("tessera_raft_term", "current Raft term", labels=["tablet"])
        leader = GaugeMetricFamily("tessera_raft_is_leader", "1 if this replica leads",
                                   labels=["tablet"])
        commit = GaugeMetricFamily("tessera_raft_commit_index", "commit index", labels=["tablet"])
        lag = GaugeMetricFamily("tessera_replica_lag_entries",
                                "leader: entries a peer is behind", labels=["tablet", "peer"])
        changes = CounterMetricFamily("tessera_leader_changes", "leader changes seen",
                                      labels=["tablet"])
        applied = CounterMetricFamily("tessera_ops_applied", "entries applied", labels=["tablet"])
        wal = SummaryMetricFamily("tessera_wal_append_seconds",
                                  "time to write and sync one WAL group", labels=["tablet"])
        entries = CounterMetricFamily("tessera_wal_entries", "WAL entries (entries / groups = "
                                      "mean group size)", labels=["tablet"])
        copy = GaugeMetricFamily("tessera_peer_needs_tablet_copy",
                                 "leader: 1 if a peer is behind the retained log",
                                 labels=["tablet", "peer"])
        snaps = CounterMetricFamily("tessera_snapshots", "state-machine snapshots taken",
                                    labels=["tablet"])
        failed = GaugeMetricFamily("tessera_tablets_failed", "replicas that failed")
        for tid, r in self.tablets.replicas.items():
            st = r.status()
            term.add_metric([tid], st["term"])
            leader.add_metric([tid], 1 if st["role"] == "LEADER" else 0)
            commit.add_metric([tid], st["commit"])
            for peer, p in st["peers"].items():
                lag.add_metric([tid, peer], max(0, st["last_index"] - p["match"]))
                copy.add_metric([tid, peer], 1 if p["needs_tablet_copy"] else 0)
            changes.add_metric([tid], r.stats["leader_changes"])
            applied.add_metric([tid], r.stats["applied"])
            wal.add_metric([tid], r.stats["wal_groups"], r.stats["wal_seconds"])
            entries.add_metric([tid], r.stats["wal_entries"])
            snaps.add_metric([tid], r.stats["snapshots"])
        failed.add_metric([], sum(1 for e in self.tablets.entries.values()
                                  if e.state == TabletState.FAILED))
        yield from (term, leader, commit, lag, copy, changes, applied, wal, entries, snaps, failed)
