"""Our EDN export is Jepsen's `history.edn`: keyword keys, jepsen.independent `[k v]` tuples for
per-key ops, EDN's `##Inf`/`##NaN`, escaped strings. Checked by a second reader (the
`edn_format` package), and by our own reader losslessly; the Knossos corpus round-trips."""

from __future__ import annotations

import math
from pathlib import Path

import edn_format
import pytest

from reports.history import Op, parse_edn_history, read_history, write_edn

KNOSSOS = Path(__file__).parents[2] / "shared/data/knossos"

REGISTER = [
    Op(index=0, type="invoke", f="write", key="k1", value=3, process=0, time=10),
    Op(index=1, type="invoke", f="cas", key="k2", value=[1, 2], process=1, time=11),
    Op(index=2, type="ok", f="write", key="k1", value=3, process=0, time=20, node="n2"),
    Op(index=3, type="info", f="kill", value=["n1"], process="nemesis", time=21),
    Op(index=4, type="fail", f="cas", key="k2", value=[1, 2], process=1, time=22,
       error="mismatch"),
    Op(index=5, type="invoke", f="read", key="k2", value=None, process=0, time=30),
    Op(index=6, type="ok", f="read", key="k2", value=0, process=0, time=31),
]


def test_a_multi_key_register_history_reads_as_jepsen_writes_it(tmp_path):
    path = tmp_path / "history.edn"
    write_edn(REGISTER, path)
    lines = path.read_text().splitlines()
    forms = [edn_format.loads(line) for line in lines]
    kw = edn_format.Keyword
    assert all(all(isinstance(k, kw) for k in f) for f in forms)  # every key a keyword
    assert kw("key") not in forms[0]  # the key travels in the value, as jepsen.independent's
    assert list(forms[0][kw("value")]) == ["k1", 3]
    assert list(forms[1][kw("value")])[0] == "k2" and list(forms[1][kw("value")][1]) == [1, 2]
    assert list(forms[5][kw("value")]) == ["k2", None]
    assert forms[3][kw("process")] == kw("nemesis") and forms[2][kw("type")] == kw("ok")
    assert read_history(path) == REGISTER  # and our reader splits the keys back out


def test_an_independent_jepsen_history_is_checked_per_key_and_others_are_left_alone():
    independent = (
        "{:type :invoke :f :write :value [:x 1] :process 0 :index 0}\n"
        "{:type :ok :f :write :value [:x 1] :process 0 :index 1}\n"
        "{:type :invoke :f :cas :value [:y [0 2]] :process 1 :index 2}\n"
        "{:type :fail :f :cas :value [:y [0 2]] :process 1 :index 3}\n")
    ops = parse_edn_history(independent)
    assert [(o.key, o.value) for o in ops] == [("x", 1), ("x", 1), ("y", [0, 2]), ("y", [0, 2])]
    single = ("{:type :invoke :f :cas :value [1 2] :process 0 :index 0}\n"
              "{:type :ok :f :cas :value [1 2] :process 0 :index 1}\n")
    assert [(o.key, o.value) for o in parse_edn_history(single)] == [(None, [1, 2])] * 2


def test_numbers_and_strings_edn_cannot_write_bare(tmp_path):
    ops = [Op(index=0, type="invoke", f="write", value=float("inf"), process=0),
           Op(index=1, type="ok", f="write", value=float("inf"), process=0,
              error='caf\u00e9 "quoted"\n\x01 tab\t'),
           Op(index=2, type="invoke", f="write", value=float("nan"), process=1),
           Op(index=3, type="info", f="write", value=float("-inf"), process=1)]
    path = tmp_path / "history.edn"
    write_edn(ops, path)
    text = path.read_text()
    assert "##Inf" in text and "##NaN" in text and "##-Inf" in text and " inf" not in text
    forms = [edn_format.loads(line) for line in text.splitlines()]
    assert forms[1][edn_format.Keyword("error")] == 'caf\u00e9 "quoted"\n\x01 tab\t'
    back = read_history(path)
    assert back[1].error == ops[1].error and back[0].value == math.inf
    assert math.isnan(back[2].value) and back[3].value == -math.inf
    assert parse_edn_history('{:type :invoke :f :write :value "\\u00e9" :process 0}')[0].value == "\u00e9"


@pytest.mark.parametrize("path", sorted(KNOSSOS.rglob("*.edn")), ids=lambda p: p.name)
def test_the_knossos_corpus_round_trips(path, tmp_path):
    ops = read_history(path)
    out = tmp_path / "again.edn"
    write_edn(ops, out)
    assert read_history(out) == ops


def test_bank_values_come_out_as_jepsen_writes_them(tmp_path):
    """history.jsonl gives a bank's balances string keys (JSON objects have no other kind);
    the EDN has Jepsen's: keyword fields in a transfer, account numbers in a read. The bank
    checker judges both the same."""
    from reports.checkers.bank import check_bank
    from reports.history import read_jsonl, write_jsonl

    ops = [Op(index=0, type="invoke", f="transfer", value={"from": 0, "to": 1, "amount": 5},
              process=0),
           Op(index=1, type="ok", f="transfer", value={"from": 0, "to": 1, "amount": 5}, process=0),
           Op(index=2, type="invoke", f="read", value=None, process=1),
           Op(index=3, type="ok", f="read", value={0: 5, 1: 15}, process=1)]
    write_jsonl(ops, tmp_path / "history.jsonl")
    from_json = read_jsonl(tmp_path / "history.jsonl")
    assert from_json[3].value == {"0": 5, "1": 15}  # what JSON does to the account numbers
    write_edn(from_json, tmp_path / "history.edn")
    forms = [edn_format.loads(line) for line in (tmp_path / "history.edn").read_text().splitlines()]
    kw = edn_format.Keyword
    assert dict(forms[1][kw("value")]) == {kw("from"): 0, kw("to"): 1, kw("amount"): 5}
    assert dict(forms[3][kw("value")]) == {0: 5, 1: 15}
    from_edn = read_history(tmp_path / "history.edn")
    assert check_bank(from_edn, total=20)["verdict"] == check_bank(from_json, total=20)["verdict"]
