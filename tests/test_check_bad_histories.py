"""`tessera check` never shows a traceback for a history, however wrong
for its model, and questions what it should: random and malformed histories through every
model end in a verdict (0, 1, 2) or a one-line reason, never a crash (255)."""

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from reports.checkers.generate import register_history
from reports.checkers.registry import models
from reports.checkers.shapes import SHAPES
from reports.history import Op, write_edn, write_jsonl

MODELS = sorted(models())
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=2), inner, max_size=3)),
    max_leaves=12)
fs = st.sampled_from(["read", "write", "cas", "add", "txn", "acquire", "release", "transfer",
                      "enqueue", "dequeue", "r", "append", "watch", None, 7])


@st.composite
def histories(draw, model):
    """Mostly the model's own op functions (so its checker runs on odd values), some others."""
    own = st.sampled_from(sorted(SHAPES[model]))
    ops, index = [], 0
    for _ in range(draw(st.integers(1, 8))):
        process = draw(st.integers(0, 3))
        f = draw(st.one_of(own, own, own, fs))
        ops.append(Op(index=index, type="invoke", process=process, f=f, value=draw(values)))
        ops.append(Op(index=index + 1, type=draw(st.sampled_from(["ok", "fail", "info"])),
                      process=process, f=f, value=draw(values)))
        index += 2
    return ops


def test_every_model_declares_its_shapes():
    assert set(SHAPES) == set(MODELS)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), model=st.sampled_from(MODELS))
def test_random_histories_through_every_model_never_crash(data, model, tmp_path, capsys):
    ops = data.draw(histories(model))
    path = tmp_path / "h.jsonl"
    write_jsonl(ops, path)
    code = main(["check", str(path), "--model", model, "--time-limit", "2",
                 "--max-states", "20000"])
    err = capsys.readouterr().err
    assert code in (0, 1, 2), (code, err)
    assert "Traceback" not in err, err


def _check(capsys, path, *argv):
    code = main(["check", str(path), *argv])
    out = capsys.readouterr()
    assert "Traceback" not in out.err, out.err
    return code, out.err


def test_the_issues_cases_are_one_line_each(tmp_path, capsys):
    register = tmp_path / "register.jsonl"
    write_jsonl(register_history(0, 30, processes=3), register)
    # a cas-register history judged as list-append, or as a set
    code, err = _check(capsys, register, "--model", "list-append")
    assert code == 2 and "list-append knows no f=" in err and len(err.splitlines()) == 1
    code, err = _check(capsys, register, "--model", "set")
    assert code == 2 and "set knows no f=" in err
    # :value 5 where a transaction belongs
    five = tmp_path / "five.jsonl"
    write_jsonl([Op(index=0, type="invoke", process=0, f="txn", value=5),
                 Op(index=1, type="ok", process=0, f="txn", value=5)], five)
    for model in ("list-append", "rw-register"):
        code, err = _check(capsys, five, "--model", model)
        assert code == 2 and "takes a transaction" in err and "op 1" in err, err
    # an EDN value nested 5,000 deep
    deep = tmp_path / "deep.edn"
    deep.write_text('{:type :ok, :f :read, :process 0, :value ' + "[" * 5000 + "]" * 5000 + "}\n")
    code, err = _check(capsys, deep, "--model", "cas-register")
    assert code == 2 and "unreadable history" in err
    # a bad --initial is a bad argument
    code, err = _check(capsys, register, "--model", "multi-register", "--initial", "{bad")
    assert code == 254 and "--initial is not JSON" in err
    code, err = _check(capsys, register, "--model", "multi-register", "--initial", "[1]")
    assert code == 254 and "must be a JSON object" in err


def test_jsonl_ops_need_no_index(tmp_path, capsys):
    """JSONL once needed an undocumented `index`; now the line order gives it."""
    path = tmp_path / "h.jsonl"
    path.write_text("\n".join(json.dumps(o) for o in [
        {"type": "invoke", "process": 0, "f": "write", "value": 1},
        {"type": "ok", "process": 0, "f": "write", "value": 1},
        {"type": "invoke", "process": 0, "f": "read"},
        {"type": "ok", "process": 0, "f": "read", "value": 2}]) + "\n")
    code = main(["check", str(path), "--model", "cas-register"])
    assert code == 1 and "INVALID" in capsys.readouterr().out  # read 2 after writing 1
    path.write_text(json.dumps({"type": "invoke", "process": 0, "index": "a"}) + "\n")
    code, err = _check(capsys, path, "--model", "cas-register")
    assert code == 2 and ":1: bad op record" in err


def test_check_questions_what_it_should(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for model in ("cas-register", "list-append"):  # the same answer for every model
        code, err = _check(capsys, empty, "--model", model)  # an input error, as a missing file
        assert code == 254 and "holds no operations" in err and len(err.splitlines()) == 1
    nof = tmp_path / "nof.jsonl"
    nof.write_text(json.dumps({"index": 0, "type": "invoke", "process": 0, "value": 1}) + "\n")
    code, err = _check(capsys, nof, "--model", "cas-register")
    assert code == 2 and "it has no f" in err
    for argv in (["--time-limit", "-1"], ["--max-states", "0"]):
        code, err = _check(capsys, nof, "--model", "cas-register", *argv)
        assert code == 254 and "--time-limit must be > 0" in err
    garbage = tmp_path / "garbage.jsonl"  # bytes, a terminal escape among them
    garbage.write_bytes(b"\x00\x01\xff\xfe garbage \x1b[31m red\n")
    code, err = _check(capsys, garbage, "--model", "cas-register")
    assert code == 2 and len(err.splitlines()) == 1 and "garbage.jsonl:1:" in err, err
    assert err.isprintable() or err[:-1].isprintable(), repr(err)  # nothing echoed raw
    mutex = tmp_path / "mutex.edn"
    write_edn([Op(index=0, type="invoke", process=0, f="write", value=1),
               Op(index=1, type="ok", process=0, f="write", value=1)], mutex)
    code, err = _check(capsys, mutex, "--model", "mutex")
    assert code == 2 and "mutex knows no f='write'" in err


KNOSSOS = Path(__file__).parents[2] / "shared/data/knossos"


def test_knossos_multi_register_without_initial_says_what_to_try(capsys):
    found = sorted(p for p in (KNOSSOS / "multi-register" / "good").glob("*") if p.is_file())
    assert found, f"the Knossos corpus is missing: {KNOSSOS}"
    code = main(["check", str(found[0]), "--model", "multi-register"])
    out = capsys.readouterr().out
    assert code == 1 and "--initial" in out
    assert main(["check", str(found[0]), "--model", "multi-register", "--initial",
                 '{"x": 0, "y": 0}']) == 0
