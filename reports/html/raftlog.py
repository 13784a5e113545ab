"""The Raft leader/term track per tablet, from the one line per role change that every daemon
logs, e.g. `2026-11-22 14:15:56,123 tserver INFO node.replica.replica: T T P U: raft tablet=T term=3
role=LEADER leader=U` (the `T <tablet> P <uuid>: ` prefix is on every replica's line). Times are
the nodes' wall clocks; the run record's `started_at` (outcome.json) places them on the history's
time axis (skewed clocks shift their own host's events, which the clock plot shows)."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\S+) \S+ .*?raft tablet=(\S+) term=(\d+) "
                  r"role=(\S+) leader=(\S+)")


def raft_events(run_dir: Path) -> list[dict]:
    """[{time (epoch s), host, daemon, tablet, term, role}] from nodes/<host>/*.log, time-ordered."""
    events = []
    for log in sorted((run_dir / "nodes").glob("*/*.log")):
        host = log.parent.name
        try:
            text = log.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            m = LINE.match(line)
            if m:
                t = datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                events.append({"time": t, "host": host, "daemon": m[2], "tablet": m[3],
                               "term": int(m[4]), "role": m[5]})
    return sorted(events, key=lambda e: e["time"])


def leader_tracks(events: list[dict]) -> dict[str, list[dict]]:
    """Per tablet, the leadership segments [{host, term, start, end}]: a segment starts when a
    host logs LEADER and ends when it logs another role or another host leads."""
    end = events[-1]["time"] if events else 0.0
    tracks: dict[str, list[dict]] = {}
    current: dict[str, dict] = {}
    for e in events:
        tab = e["tablet"]
        seg = current.get(tab)
        if e["role"] == "LEADER":
            if seg is not None and seg["host"] == e["host"] and seg["term"] == e["term"]:
                continue
            if seg is not None:
                seg["end"] = e["time"]
            current[tab] = {"host": e["host"], "term": e["term"], "start": e["time"], "end": None}
            tracks.setdefault(tab, []).append(current[tab])
        elif seg is not None and seg["host"] == e["host"]:
            seg["end"] = e["time"]
            del current[tab]
        else:
            tracks.setdefault(tab, [])
    for seg in current.values():
        seg["end"] = end
    return tracks
