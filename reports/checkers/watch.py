"""The watch checker (Jepsen's etcd watch test): every watcher sees every change to a key, in
order, with no gaps, no duplicates and nothing that was not written.

The history's ok `watch` ops carry {"thread", "from", "events": [[revision, value], ...]}: one
watcher thread's watch from revision `from`, whose events the thread's next watch continues
after. The ok `final-watch` (after the heal, from revision 1 to the revision current when it
began) carries every event of the key: the canonical log. Then, for each thread, its watches'
events in order must be exactly the canonical events from its first watch's start up to its
last event: any other event is `phantom-event` (a revision the key never had, or another value
at it), one out of order or repeated is `nonmonotonic-watch`, and a canonical event skipped
between two it saw is `missed-event`. Every acknowledged write must be in the canonical log
(`lost-write`). Without an ok final watch there is nothing to compare with: unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reports.checkers.registry import Model, register
from reports.history import NEMESIS, Op

CHECKER = "watch"


def check_watch(ops: Iterable[Op]) -> dict[str, Any]:
    ops = [o for o in ops if o.process != NEMESIS and o.type == "ok"]
    finals = [o for o in ops if o.f == "final-watch"]
    result: dict[str, Any] = {"checker": CHECKER}
    if not finals:
        return {**result, "verdict": "unknown", "anomalies": [],
                "reason": "no ok final-watch: no complete log of the key to compare with"}
    canonical = [tuple(e) for e in finals[-1].value["events"]]
    at = dict(canonical)
    revisions = [r for r, _ in canonical]
    anomalies: list[dict[str, Any]] = []
    for i in range(1, len(revisions)):
        if revisions[i] <= revisions[i - 1]:
            anomalies.append({"type": "nonmonotonic-watch", "thread": "final",
                              "explanation": f"the final watch saw revision {revisions[i]} "
                                             f"after {revisions[i - 1]}"})
    threads: dict[Any, list[Op]] = {}  # watcher thread -> its watches
    for o in ops:
        if o.f == "watch":
            threads.setdefault(o.value["thread"], []).append(o)
    watched = 0
    for thread, watches in sorted(threads.items(), key=lambda kv: str(kv[0])):
        events = [tuple(e) for w in watches for e in w.value["events"]]
        watched += len(events)
        anomalies += _thread_anomalies(thread, watches[0].value["from"], events, at, revisions)
    written = {o.value for o in ops if o.f == "write"}
    lost = sorted(written - {v for _, v in canonical}, key=str)
    if lost:
        anomalies.append({"type": "lost-write", "values": lost,
                          "explanation": f"{len(lost)} acknowledged write(s) never appeared in "
                                         f"the key's log: {lost[:10]}"})
    return {**result, "verdict": "invalid" if anomalies else "valid", "anomalies": anomalies,
            "threads": len(threads), "events_watched": watched,
            "canonical_events": len(canonical), "writes": len(written)}


def _thread_anomalies(thread: Any, start: int, events: list[tuple[Any, ...]], at: dict[Any, Any],
                      revisions: list[int]) -> list[dict[str, Any]]:
    """One thread's events against the canonical log, from revision `start` on."""
    import bisect

    out = []
    last = start - 1
    for rev, value in events:
        if rev <= last:
            out.append({"type": "nonmonotonic-watch", "thread": thread,
                        "explanation": f"thread {thread} saw revision {rev} after {last}"})
            continue
        if at.get(rev, _ABSENT) != value:
            out.append({"type": "phantom-event", "thread": thread,
                        "explanation": f"thread {thread} saw value {value!r} at revision {rev}; "
                                       f"the key's log has {at.get(rev, 'no event')} there"})
        missed = revisions[bisect.bisect_right(revisions, last):bisect.bisect_left(revisions, rev)]
        if missed:
            out.append({"type": "missed-event", "thread": thread, "revisions": missed[:10],
                        "explanation": f"thread {thread} went from revision {last} to {rev} "
                                       f"and missed {len(missed)} event(s) between: {missed[:10]}"})
        last = rev
    return out


_ABSENT = object()


register(Model(CHECKER, lambda ops, opts: [check_watch(ops)]))
