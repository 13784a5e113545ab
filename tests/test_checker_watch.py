"""The watch checker on hand-made histories: each anomaly, and a correct history."""

from reports.checkers.check import check_history
from reports.checkers.watch import check_watch
from reports.history import Op

LOG = [[2, 0], [3, 1], [5, 2], [6, 3]]


def ops(*watches, final=LOG, writes=(0, 1, 2, 3)):
    out, i = [], 0

    def add(process, f, value):
        nonlocal i
        out.append(Op(i, "invoke", process, f, None, time=i))
        out.append(Op(i + 1, "ok", process, f, value, time=i + 1))
        i += 2
    for v in writes:
        add(0, "write", v)
    for thread, start, events in watches:
        add(thread, "watch", {"thread": thread, "from": start, "events": events})
    if final is not None:
        add(99, "final-watch", {"events": final})
    return out


def test_watchers_that_saw_every_event_in_order_are_valid():
    r = check_watch(ops((1, 1, LOG[:2]), (1, 4, LOG[2:]), (2, 1, LOG[:3])))
    assert r["verdict"] == "valid" and r["threads"] == 2 and r["events_watched"] == 7
    assert check_history(ops((1, 1, LOG)), "watch")["verdict"] == "valid"


def test_each_anomaly_is_named():
    cases = {
        "missed-event": ops((1, 1, [LOG[0], LOG[2]])),
        "missed-event ": ops((1, 1, LOG[1:])),  # its first watch skipped revision 2
        "nonmonotonic-watch": ops((1, 1, LOG[:2]), (1, 3, [LOG[1]])),
        "phantom-event": ops((1, 1, [[2, 0], [3, 9]])),
        "lost-write": ops((1, 1, LOG), writes=(0, 1, 2, 3, 4)),
    }
    for kind, history in cases.items():
        r = check_watch(history)
        assert r["verdict"] == "invalid" and kind.strip() in {a["type"] for a in r["anomalies"]}, (
            kind, r)


def test_without_a_final_watch_it_is_unknown():
    assert check_watch(ops((1, 1, LOG), final=None))["verdict"] == "unknown"
