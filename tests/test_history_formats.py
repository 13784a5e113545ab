"""History formats: JSON lines, Jepsen EDN and jepsen.log, and their malformed-input errors."""

from __future__ import annotations

import json

import pytest

from reports.history import (
    HistoryError,
    HistoryWriter,
    Keyword,
    Op,
    op_to_edn,
    parse_edn_history,
    parse_jepsen_log,
    read_history,
    read_jsonl,
    write_edn,
    write_jsonl,
)


def test_edn_vector_with_comments_lists_and_any_key_order():
    ops = parse_edn_history("""
    ; a comment line
    [{:process 0, :type :invoke, :f :cas, :value [1 2]}   ; trailing comment
     {:type :ok :value (1 2) :f :cas :process 0 :time 17}
     {:process :nemesis, :type :info, :f :start, :value nil}
     {:f :read :type :invoke :process 3 :value nil}
     {:process 3, :type :ok, :f :read, :value "a \\"quoted\\" string", :error [:timeout nil]}]
    """)
    assert [(o.process, o.type, o.f, o.value) for o in ops] == [
        (0, "invoke", "cas", [1, 2]),
        (0, "ok", "cas", [1, 2]),
        ("nemesis", "info", "start", None),
        (3, "invoke", "read", None),
        (3, "ok", "read", 'a "quoted" string'),
    ]
    assert ops[1].time == 17 and ops[4].error == ["timeout", None]
    assert [o.index for o in ops] == [0, 1, 2, 3, 4]


def test_edn_one_map_per_line():
    text = "{:process 1 :type :invoke :f :write :value 3 :index 10}\n{:process 1 :type :ok :f :write :value 3 :index 11}\n"
    ops = parse_edn_history(text)
    assert [(o.index, o.type) for o in ops] == [(10, "invoke"), (11, "ok")]


def test_edn_round_trip_keeps_keywords_and_txns(tmp_path):
    ops = [
        Op(index=0, type="invoke", f="txn", value=[["append", 3, 5], ["r", 4, None]], process=2, time=5),
        Op(index=1, type="ok", f="txn", value=[["append", 3, 5], ["r", 4, [1, 2]]], process=2, time=9,
           node="n1"),
        Op(index=2, type="info", f="kill", value=Keyword("n2"), process="nemesis", error="boom"),
    ]
    path = tmp_path / "history.edn"
    write_edn(ops, path)
    assert ":f :txn" in op_to_edn(ops[0]) and "[:append 3 5]" in op_to_edn(ops[0])
    back = read_history(path)
    assert back == ops


def test_jsonl_round_trip_and_streaming_writer(tmp_path):
    path = tmp_path / "history.jsonl"
    ops = [
        Op(index=0, type="invoke", f="write", key="k1", value=3, process=0, time=10),
        Op(index=1, type="ok", f="write", key="k1", value=3, process=0, time=20, node="n2"),
        Op(index=2, type="info", f="partition", value={"n1": ["n2"]}, process="nemesis", time=25),
    ]
    write_jsonl(ops[:2], path)
    with HistoryWriter(path) as w:
        w.write(ops[2])
    assert read_jsonl(path) == ops
    first = json.loads(path.read_text().splitlines()[0])
    assert first == {"index": 0, "type": "invoke", "f": "write", "value": 3, "process": 0, "time": 10, "key": "k1"}


def test_jepsen_log_lines():
    text = (
        "2017-01-01 12:00:00,001{GMT}\tINFO\t[jepsen worker 3] jepsen.util - 3\t:invoke\t:cas\t[1 2]\n"
        "some unrelated log line\n"
        "INFO jepsen.util - 3\t:ok\t:cas\t[1 2]\n"
        "INFO jepsen.util - 4\t:invoke\t:read\tnil\n"
        "INFO jepsen.util - 4\t:info\t:read\t:timed-out\n"
        "INFO jepsen.util - 5\t:invoke\t:write\t4\n"
        "INFO jepsen.util - 5\t:fail\t:write\t4\t:not-leader\n"
        "INFO jepsen.util - :nemesis\t:info\t:start\tnil\n"
    )
    ops = parse_jepsen_log(text)
    assert [(o.process, o.type, o.f, o.value, o.error) for o in ops] == [
        (3, "invoke", "cas", [1, 2], None),
        (3, "ok", "cas", [1, 2], None),
        (4, "invoke", "read", None, None),
        (4, "info", "read", None, "timed-out"),
        (5, "invoke", "write", 4, None),
        (5, "fail", "write", 4, "not-leader"),
        ("nemesis", "info", "start", None, None),
    ]


def test_read_history_detects_the_format(tmp_path):
    log = tmp_path / "jepsen.log"
    log.write_text("INFO jepsen.util - 1\t:invoke\t:read\tnil\nINFO jepsen.util - 1\t:ok\t:read\t3\n")
    edn = tmp_path / "h.edn"
    edn.write_text("[{:process 1 :type :invoke :f :read} {:process 1 :type :ok :f :read :value 3}]")
    jl = tmp_path / "h.jsonl"
    write_jsonl(read_history(edn), jl)
    assert [o.value for o in read_history(log)] == [o.value for o in read_history(edn)] == [
        o.value for o in read_history(jl)] == [None, 3]


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("[{:process 1 :type :invoke :f :read}\n {:process 1 :type :ok :f :read :value", 2, "truncated EDN"),
        ("[{:process 1 :type :invoke :f :read}\n{:process 1 :type :ok :f :read}\n{:process 2 :type :ok :f :read}]",
         3, "without an invoke"),
        ("{:process 1 :type :invoke :f :read}\n\n{:process 1 :type :done :f :read}\n", 3, "unknown op type"),
        ("{:process 1 :type :invoke :f :read}\n{:process 1 :type :invoke :f :read}\n", 2, "invokes again"),
        ("[{:process 1 :type :invoke :f :read}}", 1, "mismatched"),
        ("[{:process 1 :type :invoke :f :read :value}]", 1, "odd number"),
    ],
)
def test_malformed_edn_names_the_line(text, line, message):
    with pytest.raises(HistoryError) as e:
        parse_edn_history(text, "h.edn")
    assert e.value.line == line
    assert message in str(e.value) and f"h.edn:{line}:" in str(e.value)


def test_malformed_jsonl_names_the_line(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text('{"index": 0, "type": "invoke", "f": "read", "process": 1}\n{"index": 1, "type": "ok", "f": "re')
    with pytest.raises(HistoryError, match="bad op record") as e:
        read_jsonl(path)
    assert e.value.line == 2
    path.write_text('{"index": 0, "type": "ok", "f": "read", "process": 1}\n')
    with pytest.raises(HistoryError, match="without an invoke"):
        read_jsonl(path)
    path.write_text('{"index": 0, "type": "maybe", "f": "read", "process": 1}\n')
    with pytest.raises(HistoryError, match="unknown op type"):
        read_jsonl(path)


def test_malformed_jepsen_log_names_the_line():
    with pytest.raises(HistoryError) as e:
        parse_jepsen_log("INFO jepsen.util - 1\t:invoke\t:read\tnil\nnoise\nINFO jepsen.util - 2\t:ok\t:read\t1\n")
    assert e.value.line == 3
