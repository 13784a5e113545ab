"""Every completion answers its own invocation (the `wrong-reply` anomaly).

A transaction's reply carries its micro-ops [f, key, value] with the reads filled in. Jepsen's
clients build the completion from the invocation and take only the read results from the reply;
a reply whose micro-ops differ from the invocation in kind, key, or a written value answers some
other operation (a server that handed one proposal's result to another's waiter), and copying it
into the history would make this op look like a second copy of the other one: Elle then calls the
history unknown (duplicate appends) when it is in fact wrong.

`answered` is that rule, shared by both sides. The workloads' clients (workloads.base) complete
an op with `answered(invocation, reply)` and record a reply that does not answer as an `info`
completion (its effect is unknown) whose error is `["wrong-reply", reply]`. The checker turns
every such mark, and every `ok` completion whose value does not answer its invocation (a history
recorded by a client that copied the reply), into an invalid verdict that names the process, what
it invoked, what the reply carried, and the invocation the reply does answer when the history
holds one.

A single-key write's reply carries no key or written value to compare (it is acknowledged with
nothing but ok), so for writes sent in a client session the client ties the reply to its
request instead (node.client.session.Sent): the answer echoes the seq it answers, the slot it
came back in names the op it was sent for, and a reply that fails either is recorded as the
same `info` mark. Each answered write also records what it went as (Op.sent: tablet, session,
seq, batch); two completions that claim one seq of one session are one reply handed to two
callers, a `wrong-reply` too, and so is a recorded echo that is not the op's seq.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from reports.history import NEMESIS, Op

CHECKER = "replies"
WRONG_REPLY = "wrong-reply"
# micro-ops whose value the reply fills in (Elle's :r, Knossos's multi-register :read); every other
# one must match
READS = frozenset({"r", "read"})


def is_txn(value: Any) -> bool:
    """A list of [f, key, value] micro-ops (Elle's transaction shape)."""
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, list | tuple) and len(m) == 3 and isinstance(m[0], str) for m in value)


def answered(invoked: list[Any], reply: Any) -> list[list[Any]] | None:
    """The invoked micro-ops with the reply's read results filled in, or None when the reply does
    not answer the invocation: not the same number of micro-ops, or one whose kind or key
    differs, or a write whose value differs."""
    if not isinstance(reply, list | tuple) or len(reply) != len(invoked):
        return None
    out = []
    for (f, key, value), got in zip(invoked, reply, strict=True):
        if not isinstance(got, list | tuple) or len(got) != 3:
            return None
        if str(got[0]) != str(f) or got[1] != key or (str(f) not in READS and got[2] != value):
            return None
        out.append([f, key, got[2] if str(f) in READS else value])
    return out


def recorded_reply(op: Op) -> tuple[bool, Any]:
    """(True, the reply) when the client recorded `op` as answered by a reply that was not its
    own; (False, None) otherwise."""
    e = op.error
    if isinstance(e, list | tuple) and len(e) == 2 and str(e[0]) == WRONG_REPLY:
        return True, e[1]
    return False, None


# json.dumps(x, default=str), without building a JSONEncoder per call (dumps caches one only
# for its default arguments): two calls per micro-op of every transaction
_dumps = json.JSONEncoder(default=str).encode


def _writes(value: list[Any]) -> tuple[tuple[str, str, str | None], ...]:
    """What identifies a transaction apart from what it read: its micro-ops with reads blanked."""
    return tuple((str(f), _dumps(k), None if str(f) in READS else _dumps(v))
                 for f, k, v in value)


def _text(value: Any, width: int = 300) -> str:
    s = json.dumps(value, default=str)
    return s if len(s) <= width else s[: width - 1] + "…"


def check_replies(ops: Iterable[Op]) -> dict[str, Any]:
    """{"checker", "verdict", "compared", "anomalies"[, "anomaly_types"]}: one `wrong-reply`
    anomaly per completion whose reply did not answer its invocation."""
    ops = [o for o in ops if o.process != NEMESIS]
    txns: dict[tuple[Any, ...], list[Op]] = {}  # writes -> the invocations that made them
    for o in ops:
        if o.type == "invoke" and is_txn(o.value):
            txns.setdefault(_writes(o.value), []).append(o)
    open_: dict[Any, Op] = {}
    anomalies, compared = [], 0
    claimed: dict[tuple[Any, ...], Op] = {}  # (tablet, session, seq) -> the completion that was sent as it
    for o in ops:
        if o.type == "invoke":
            open_[o.process] = o
            continue
        inv = open_.pop(o.process, None)
        if o.sent is not None:
            compared += 1
            anomaly = _sent_anomaly(o, inv, claimed)
            if anomaly is not None:
                anomalies.append(anomaly)
                continue
        marked, reply = recorded_reply(o)
        if not marked and (inv is None or o.type != "ok" or not is_txn(inv.value)):
            continue
        compared += 1
        if not marked:
            assert inv is not None  # an unmarked op without its invocation was skipped above
            if answered(inv.value, o.value) is not None:
                continue
            reply = o.value
        anomalies.append(_anomaly(o, inv, reply, txns))
    result: dict[str, Any] = {"checker": CHECKER, "verdict": "invalid" if anomalies else "valid",
              "compared": compared, "anomalies": anomalies}
    if anomalies:
        result["anomaly_types"] = [WRONG_REPLY]
    return result


def _sent_anomaly(op: Op, inv: Op | None, claimed: dict[tuple[Any, ...], Op]) -> dict[str, Any] | None:
    """A `wrong-reply` when `op`'s recorded request (Op.sent) was answered for another seq, or
    its seq was already claimed by another completion; else None."""
    sent: Any = op.sent  # whatever was recorded: a malformed record raises below
    try:
        key = (sent["tablet"], sent["session"], sent["seq"])
        echo = sent["echo"]
    except (KeyError, TypeError):
        return _wrong(op, inv, sent, f"process {op.process}'s {op.f} (op {op.index}) recorded "
                      f"a malformed request {_text(sent)}")
    if echo != key[2]:
        return _wrong(op, inv, sent, f"process {op.process}'s {op.f} (op {op.index}) went as "
                      f"seq {key[2]} of session {key[1]} on tablet {key[0]}, but its answer "
                      f"was for seq {echo}")
    other = claimed.setdefault(key, op)
    if other is op:
        return None
    return _wrong(op, inv, sent, f"process {op.process}'s {op.f} (op {op.index}) and process "
                  f"{other.process}'s {other.f} (op {other.index}) were both answered as seq "
                  f"{key[2]} of session {key[1]} on tablet {key[0]}: one reply, two callers")


def _wrong(op: Op, inv: Op | None, sent: Any, explanation: str) -> dict[str, Any]:
    return {"type": WRONG_REPLY, "process": op.process, "index": op.index, "f": op.f,
            "invoked": inv.value if inv is not None else op.value, "reply": sent,
            "recorded_as": op.type, "answers": None, "explanation": explanation}


def _anomaly(op: Op, inv: Op | None, reply: Any, txns: dict[tuple[Any, ...], list[Op]]) -> dict[str, Any]:
    invoked = inv.value if inv is not None else op.value
    owner = None
    if is_txn(reply):
        owner = next((i for i in txns.get(_writes(reply), ())
                      if i is not inv and answered(i.value, reply) is not None), None)
    explanation = (f"process {op.process}'s {op.f} (op {op.index}) invoked {_text(invoked)} but "
                   f"its reply carried {_text(reply)}")
    if owner is not None:
        explanation += (f", which answers process {owner.process}'s invocation (op "
                        f"{owner.index}) {_text(owner.value)}")
    return {"type": WRONG_REPLY, "process": op.process, "index": op.index, "f": op.f,
            "invoked": invoked, "reply": reply, "recorded_as": op.type,
            "answers": None if owner is None else {"process": owner.process,
                                                   "index": owner.index, "value": owner.value},
            "explanation": explanation}
