"""A completion answers its own invocation: the clients build a transaction's
completion from what they invoked, with the reply's reads filled in, and record a reply that
answers some other op as such; the checker judges either form of a wrong reply invalid
(`wrong-reply`), naming the process, its invocation and what the reply carried."""

from __future__ import annotations

import asyncio

import pytest

from harness.recorder import Recorder
from harness.runner import RunOptions, run
from reports.checkers.check import check_history
from reports.checkers.replies import WRONG_REPLY, answered, check_replies
from reports.history import Op, read_jsonl
from workloads.base import WrongReply, answer
from workloads.list_append import ListAppend


def history(*events) -> list[Op]:
    return [Op(index=i, time=i, **e) for i, e in enumerate(events)]


P10 = [["append", "k2.3", 1020], ["r", "k2.1", None]]
P16 = [["append", "k2.3", 1026], ["r", "k2.0", None]]
P10_DONE = [["append", "k2.3", 1020], ["r", "k2.1", []]]


def test_an_ok_that_carries_another_process_s_transaction_is_invalid_naming_both():
    """The run that found the bug: process 16's ok carries process 10's micro-ops and result. Elle
    alone sees 1020 appended twice and says unknown; the history is invalid."""
    ops = history(
        {"process": 10, "type": "invoke", "f": "txn", "value": P10},
        {"process": 16, "type": "invoke", "f": "txn", "value": P16},
        {"process": 10, "type": "ok", "f": "txn", "value": P10_DONE},
        {"process": 16, "type": "ok", "f": "txn", "value": P10_DONE},
    )
    out = check_history(ops, "list-append")
    assert out["verdict"] == "invalid"
    by = {r["checker"]: r for r in out["results"]}
    assert by["list-append"]["anomaly_types"] == ["duplicate-appends"]  # unknown, alone
    [a] = by["replies"]["anomalies"]
    assert (a["type"], a["process"], a["index"], a["invoked"], a["reply"]) == (
        WRONG_REPLY, 16, 3, P16, P10_DONE)
    assert a["answers"] == {"process": 10, "index": 0, "value": P10}
    assert a["explanation"] == (
        "process 16's txn (op 3) invoked " '[["append", "k2.3", 1026], ["r", "k2.0", null]]'
        " but its reply carried " '[["append", "k2.3", 1020], ["r", "k2.1", []]]'
        ", which answers process 10's invocation (op 0) "
        '[["append", "k2.3", 1020], ["r", "k2.1", null]]')


def test_a_recorded_wrong_reply_is_invalid_with_both_and_the_rest_of_the_history_clean():
    ops = history(
        {"process": 10, "type": "invoke", "f": "txn", "value": P10},
        {"process": 16, "type": "invoke", "f": "txn", "value": P16},
        {"process": 10, "type": "ok", "f": "txn", "value": P10_DONE},
        {"process": 16, "type": "info", "f": "txn", "value": P16,
         "error": [WRONG_REPLY, P10_DONE]},
    )
    out = check_history(ops, "list-append")
    assert out["verdict"] == "invalid"
    by = {r["checker"]: r for r in out["results"]}
    # the info keeps its own invocation: Elle no longer sees 1020 appended twice
    assert "duplicate-appends" not in by["list-append"]["anomaly_types"]
    [a] = by["replies"]["anomalies"]
    assert (a["process"], a["invoked"], a["reply"], a["recorded_as"]) == (16, P16, P10_DONE, "info")
    assert a["answers"]["process"] == 10


def test_completions_that_answer_their_invocations_are_valid():
    ops = history(
        {"process": 10, "type": "invoke", "f": "txn", "value": P10},
        {"process": 10, "type": "ok", "f": "txn", "value": P10_DONE},
        {"process": 11, "type": "invoke", "f": "txn", "value": [["r", "k2.3", None]]},
        {"process": 11, "type": "ok", "f": "txn", "value": [["r", "k2.3", [1020]]]},
    )
    assert check_replies(ops) == {"checker": "replies", "verdict": "valid", "compared": 2,
                                  "anomalies": []}


def test_answer_fills_reads_from_the_reply_and_refuses_one_that_is_not_the_invocation_s():
    assert answer(P10, P10_DONE) == P10_DONE
    assert answer(P10, [["append", "k2.3", 1020], ["r", "k2.1", [7]]])[1] == ["r", "k2.1", [7]]
    assert answer([["add", "a", -2], ["require_ge", "a", 0]],
                  [["add", "a", -2], ["require_ge", "a", 0]]) == [["add", "a", -2],
                                                                  ["require_ge", "a", 0]]
    for reply in (P16, P10_DONE[:1], [["append", "k2.3", 1020], ["r", "k9", [7]]],
                  [["w", "k2.3", 1020], ["r", "k2.1", [7]]], None, "ok"):
        with pytest.raises(WrongReply):
            answer(P10, reply)
    assert answered(P10, [list(m) for m in P10_DONE]) is not None


class MisroutedReplies:
    """list-append's client surface over an in-memory store whose server answers each
    transaction's waiter with the reply of the transaction applied just before it (the hidden
    bug that run found: a proposal's waiter answered with whatever entry lands at its index)."""

    def __init__(self):
        self.data: dict[str, list] = {}
        self.previous: list | None = None

    async def txn(self, ops: list[list]) -> list[list]:
        done = []
        for f, key, value in ops:
            if f == "r":
                done.append([f, key, list(self.data.get(key, []))])
            else:
                self.data.setdefault(key, []).append(value)
                done.append([f, key, value])
        reply, self.previous = self.previous or done, done
        await asyncio.sleep(0)
        return reply


def test_the_client_records_a_reply_that_does_not_answer_its_invocation_as_such(tmp_path):
    """Through the workload and the runner: an op answered with another's reply is recorded as
    `info` with its own invocation and the reply, never as an ok copying the reply, and the
    history is invalid."""
    rec = Recorder(tmp_path / "history.jsonl")
    server = MisroutedReplies()
    opts = RunOptions(concurrency=1, time_limit=0.05, rate=0, seed=3)
    asyncio.run(run(ListAppend(), lambda _t: server, rec, opts))
    rec.close()
    ops = read_jsonl(tmp_path / "history.jsonl")
    invoked = {o.index: o for o in ops if o.type == "invoke"}
    completions = [(invoked[o.index - 1], o) for o in ops if o.type != "invoke"]
    assert len(completions) > 3 and completions[0][1].type == "ok"  # the first reply is its own
    wrong = [(i, o) for i, o in completions if o.type == "info"]
    assert wrong, "every reply after the first is the previous op's"
    for inv, o in completions:
        if o.type == "ok":  # an ok keeps every invoked micro-op, reads filled in
            assert [m[:2] for m in o.value] == [m[:2] for m in inv.value]
            assert [m for m in o.value if m[0] != "r"] == [m for m in inv.value if m[0] != "r"]
    for inv, o in wrong:
        assert o.value == inv.value and o.error[0] == WRONG_REPLY
        assert answered(inv.value, o.error[1]) is None
    out = check_history(ops, "list-append")
    assert out["verdict"] == "invalid"
    [replies] = [r for r in out["results"] if r["checker"] == "replies"]
    assert len(replies["anomalies"]) == len(wrong)
    assert all(a["type"] == WRONG_REPLY and a["answers"] is not None for a in replies["anomalies"])


def test_a_multi_register_read_is_filled_in_not_a_wrong_reply():
    """Knossos's multi-register histories invoke [:read :x nil] and complete [:read :x 0]: a read
    the reply fills in, as Elle's :r. Judging it a written value called a real Jepsen history
    (knossos multi-register/good) invalid."""
    from reports.checkers.replies import answered

    assert answered([["read", "x", None], ["write", "y", 2]],
                    [["read", "x", 0], ["write", "y", 2]]) == [["read", "x", 0], ["write", "y", 2]]
    assert answered([["write", "y", 2]], [["write", "y", 3]]) is None


def _write(process: int, index_base: int, sent: dict, type_: str = "ok") -> list[dict]:
    return [{"process": process, "type": "invoke", "f": "write", "value": index_base, "key": 1},
            {"process": process, "type": type_, "f": "write", "value": index_base, "key": 1,
             "sent": sent}]


def _sent(seq: int, echo: int | None = None, session: int = 7, batch: int = 1) -> dict:
    return {"tablet": "t", "session": session, "seq": seq, "batch": batch, "ops": 2,
            "echo": seq if echo is None else echo}


def test_writes_each_answered_as_their_own_seq_are_compared_and_valid():
    """The other direction: a batch of two writes, each answered as its own seq, and a write of
    another session with the same seq number: nothing is wrong, and all three are compared."""
    ops = history(*_write(1, 10, _sent(1)), *_write(2, 11, _sent(2)),
                  *_write(3, 12, _sent(1, session=8)))
    out = check_replies(ops)
    assert out == {"checker": "replies", "verdict": "valid", "compared": 3, "anomalies": []}


def test_one_seq_answered_to_two_callers_is_a_wrong_reply_naming_both():
    ops = history(*_write(1, 10, _sent(1)), *_write(2, 11, _sent(1)))
    out = check_history(ops, "cas-register")
    assert out["verdict"] == "invalid"
    (replies,) = [r for r in out["results"] if r["checker"] == "replies"]
    (a,) = replies["anomalies"]
    assert a["type"] == WRONG_REPLY and a["process"] == 2 and a["index"] == 3
    assert "process 1's write (op 1)" in a["explanation"] and "one reply, two callers" in \
        a["explanation"]


def test_an_answer_for_another_seq_is_a_wrong_reply():
    ops = history(*_write(1, 10, _sent(2, echo=1), type_="fail"))
    out = check_replies(ops)
    assert out["verdict"] == "invalid" and out["anomaly_types"] == [WRONG_REPLY]
    assert "its answer was for seq 1" in out["anomalies"][0]["explanation"]


def test_a_malformed_sent_record_is_a_wrong_reply_not_a_crash():
    ops = history(*_write(1, 10, {"seq": 1}))
    assert check_replies(ops)["verdict"] == "invalid"
