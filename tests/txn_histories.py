"""Small transactional histories built by hand, for the Elle checker tests."""

from __future__ import annotations

from reports.history import Op


def history(*events) -> list[Op]:
    """events: ("invoke", process, mops) | ("ok"|"info"|"fail", process[, mops]); a completion
    without mops repeats its invoke's (reads nil)."""
    ops, invoked = [], {}
    for ev in events:
        kind, p = ev[0], ev[1]
        if kind == "invoke":
            invoked[p] = ev[2]
            value = [[f, k, None if f == "r" else v] for f, k, v in ev[2]]
        else:
            value = ev[2] if len(ev) > 2 else [[f, k, None if f == "r" else v] for f, k, v in invoked[p]]
        ops.append(Op(index=len(ops), type=kind, f="txn", value=value, process=p, time=len(ops)))
    return ops


def serial(*txns) -> list[Op]:
    """Each (process, mops) invoked and completed ok before the next begins."""
    events = []
    for p, mops in txns:
        events += [("invoke", p, mops), ("ok", p, mops)]
    return history(*events)


def concurrent(*txns, then=()) -> list[Op]:
    """All txns invoked together, then completed in order; `then` runs serially afterwards."""
    events = [("invoke", p, m) for p, m in txns] + [("ok", p, m) for p, m in txns]
    for p, m in then:
        events += [("invoke", p, m), ("ok", p, m)]
    return history(*events)
