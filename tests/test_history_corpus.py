"""`tessera check` reads every history Jepsen, Elle and Porcupine write, as those tools read
them, and gives each the verdict its own tool gives.

- the Knossos corpus under shared/data/knossos, every file through the CLI, the nemesis-only
  history among them (Knossos: valid, nothing to violate);
- jepsen.log text in both of its shapes: fields separated by tabs (newer Jepsen, most of
  Porcupine's etcd logs) and by runs of blanks, with a free-text error after the value (older
  Jepsen, and some of Porcupine's etcd logs);
- Elle's minimal histories: ops with `:index`, `:type` and `:value` only, no `:f` and no
  `:process`, in EDN and JSONL, with invokes and without;
- a property: re-spacing a history's text (tabs, blanks, commas) never changes its verdict.

The fixtures are written here in those public formats, each with the verdict worked out by hand
in its comment, so the test fails in both directions: a false alarm and a miss.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main
from reports.checkers.generate import corrupt_one_read, register_history
from reports.history import NEMESIS, Op, read_history, to_edn

KNOSSOS = Path(__file__).parents[2] / "shared/data/knossos"
KNOSSOS_FILES = sorted(KNOSSOS.rglob("*.edn"))
KNOSSOS_ARGS = {"cas-register": ["--model", "cas-register"], "mutex": ["--model", "mutex"],
                "multi-register": ["--model", "multi-register", "--initial", '{"x": 0, "y": 0}']}
EXIT = {"valid": 0, "invalid": 1, "unknown": 2}


def check(capsys, path: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["check", str(path), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_corpus_is_here():
    # CI always has the Knossos corpus beside the repo: a missing corpus fails, never skips.
    assert len(KNOSSOS_FILES) == 122, f"knossos reference histories missing at {KNOSSOS}"


@pytest.mark.parametrize("path", KNOSSOS_FILES, ids=lambda p: str(p.relative_to(KNOSSOS)))
def test_every_knossos_history_gets_its_verdict_from_tessera_check(capsys, path):
    model_dir, verdict_dir = path.relative_to(KNOSSOS).parts[:2]
    code, out, err = check(capsys, path, *KNOSSOS_ARGS[model_dir])
    expected = {"good": "valid", "bad": "invalid"}[verdict_dir]
    assert code == EXIT[expected], (out, err)
    assert out.startswith(expected.upper()) and not err


def test_a_history_of_nemesis_ops_alone_is_valid_as_knossos_says(capsys, tmp_path):
    path = KNOSSOS / "cas-register/good/mongodb-v0-ack-rollback-.edn"
    ops = read_history(path)
    assert ops and all(o.process == NEMESIS for o in ops)  # the corner case: no client op
    assert check(capsys, path, "--model", "cas-register")[0] == 0
    empty = tmp_path / "empty.edn"  # no op at all is a different thing: an input error
    empty.write_text("; nothing but a comment\n")
    code, out, err = check(capsys, empty, "--model", "cas-register")
    assert code == 254 and "holds no operations" in err and not out


# ---------------------------------------------------------------------------------- jepsen.log
# A cas register starting at nil, as Porcupine's etcd logs are read (Jepsen's etcd test).
# Valid: read nil; write 2; cas 2->4; read 4; cas 2->3 fails; write 1 times out and is seen.
VALID_TABS = """\
2017-04-12 19:17:01,112{GMT}	INFO	[jepsen worker 0] jepsen.util - 0	:invoke	:read	nil
INFO  jepsen.util - 0	:invoke	:read	nil
INFO  jepsen.util - 1	:invoke	:write	2
INFO  jepsen.util - 0	:ok	:read	nil
INFO  jepsen.util - 1	:ok	:write	2
INFO  jepsen.util - 2	:invoke	:cas	[2 4]
INFO  jepsen.util - 2	:ok	:cas	[2 4]
INFO  jepsen.util - 0	:invoke	:read	nil
INFO  jepsen.util - 0	:ok	:read	4
INFO  jepsen.util - 1	:invoke	:cas	[2 3]
INFO  jepsen.util - 1	:fail	:cas	[2 3]
INFO  jepsen.util - 3	:invoke	:write	1
INFO  jepsen.util - 3	:info	:write	:timed-out
INFO  jepsen.util - 0	:invoke	:read	nil
INFO  jepsen.util - 0	:ok	:read	1
""".split("\n", 1)[1]  # (the first line shows Jepsen's full log prefix; it is dropped again)

# The same history as older Jepsen prints it: fields padded with blanks, and a free-text error
# after some values. Its verdict is the tab file's.
VALID_BLANKS = """\
INFO  jepsen.util - 0   :invoke :read   nil
INFO  jepsen.util - 1   :invoke :write  2
INFO  jepsen.util - 0   :ok     :read   nil
INFO  jepsen.util - 1   :ok     :write  2
INFO  jepsen.util - 2   :invoke :cas    [2 4]
INFO  jepsen.util - 2   :ok     :cas    [2 4]   sql: OK OK 1 row val 2 OK 1 row val 4 OK
INFO  jepsen.util - 0   :invoke :read   nil
INFO  jepsen.util - 0   :ok     :read   4
INFO  jepsen.util - 1   :invoke :cas    [2 3]
INFO  jepsen.util - 1   :fail   :cas    [2 3]   sql: OK OK 1 row val 4 OK 1 row val 4 OK
INFO  jepsen.util - 3   :invoke :write  1
INFO  jepsen.util - 3   :info   :write  :timed-out
INFO  jepsen.util - 0   :invoke :read   nil
INFO  jepsen.util - 0   :ok     :read   1
"""

# Invalid: the cas 2->4 returned before the read began, and the read still saw 2. The same
# rows with the fields apart by blanks, and by tabs.
_INVALID_ROWS = [("1", ":invoke", ":write", "2"), ("1", ":ok", ":write", "2"),
                 ("2", ":invoke", ":cas", "[2 4]"), ("2", ":ok", ":cas", "[2 4]"),
                 ("0", ":invoke", ":read", "nil"), ("0", ":ok", ":read", "2")]
INVALID_BLANKS, INVALID_TABS = ("".join(f"INFO  jepsen.util - {sep.join(r)}\n" for r in _INVALID_ROWS)
                                for sep in ("   ", "\t"))


@pytest.mark.parametrize("name, text, expected", [
    ("tabs-valid", VALID_TABS, "valid"), ("blanks-valid", VALID_BLANKS, "valid"),
    ("tabs-invalid", INVALID_TABS, "invalid"), ("blanks-invalid", INVALID_BLANKS, "invalid"),
], ids=["tabs-valid", "blanks-valid", "tabs-invalid", "blanks-invalid"])
def test_jepsen_log_with_tabs_or_blanks(capsys, tmp_path, name, text, expected):
    path = tmp_path / f"etcd_{name}.log"
    path.write_text(text)
    code, out, err = check(capsys, path, "--model", "cas-register")
    assert code == EXIT[expected] and out.startswith(expected.upper()), (out, err)


def test_blank_separated_fields_read_as_the_tab_separated_ones(tmp_path):
    tabs, blanks = tmp_path / "tabs.log", tmp_path / "blanks.log"
    tabs.write_text(VALID_TABS)
    blanks.write_text(VALID_BLANKS)
    a, b = read_history(tabs), read_history(blanks)
    assert [(o.process, o.type, o.f, o.value) for o in a] == [
        (o.process, o.type, o.f, o.value) for o in b]
    assert len(a) == 14 and a[11].type == "info" and a[11].error == "timed-out"
    assert b[5].error == "sql: OK OK 1 row val 2 OK 1 row val 4 OK"  # free text, kept whole


# --------------------------------------------------------------------------- Elle's minimal form
# Neither :f nor :process. Valid: T1 appends 1 to keys 1 and 2; T2 reads key 1 as [1] and
# appends 2 to key 2; T3 reads key 2 as [1 2].
ELLE_VALID = """\
{:index 0 :type :invoke :value [[:append 1 1] [:append 2 1]]}
{:index 1 :type :ok     :value [[:append 1 1] [:append 2 1]]}
{:index 2 :type :invoke, :value [[:r 1 nil] [:append 2 2]]}
{:index 3 :type :ok,     :value [[:r 1 [1]] [:append 2 2]]}
{:index 4 :type :invoke :value [[:r 2 nil]]}
{:index 5 :type :ok     :value [[:r 2 [1 2]]]}
"""
# Invalid (G2-item, so not serializable): two concurrent transactions each read the other's key
# empty and append to their own; a later read sees both appends. Each completion must pair with
# its own invoke (its micro-ops' f and key), not with the older open one.
ELLE_G2 = """\
{:index 0 :type :invoke :value [[:r 1 nil] [:append 2 1]]}
{:index 1 :type :invoke :value [[:r 2 nil] [:append 1 1]]}
{:index 2 :type :ok     :value [[:r 2 []] [:append 1 1]]}
{:index 3 :type :ok     :value [[:r 1 nil] [:append 2 1]]}
{:index 4 :type :invoke :value [[:r 1 nil] [:r 2 nil]]}
{:index 5 :type :ok     :value [[:r 1 [1]] [:r 2 [1]]]}
"""
# Completions only, as many of Elle's own examples are: each reads the other's append (G1c).
ELLE_G1C_OKS = """\
{:type :ok, :value [[:append :x 1] [:r :y [1]]]}
{:type :ok, :value [[:append :y 1] [:r :x [1]]]}
"""
# rw-register, minimal: valid (a write, then a read of it), and G1c (each reads the other's write).
RW_VALID = """\
{:index 0 :type :invoke :value [[:w 1 5]]}
{:index 1 :type :ok :value [[:w 1 5]]}
{:index 2 :type :invoke :value [[:r 1 nil] [:w 2 6]]}
{:index 3 :type :ok :value [[:r 1 5] [:w 2 6]]}
"""
RW_G1C = """\
{:type :ok :value [[:w 1 1] [:r 2 1]]}
{:type :ok :value [[:w 2 1] [:r 1 1]]}
"""


@pytest.mark.parametrize("name, model, text, expected, anomaly", [
    ("append-valid", "list-append", ELLE_VALID, "valid", None),
    ("append-g2", "list-append", ELLE_G2, "invalid", "G2-item"),
    ("append-g1c-oks", "list-append", ELLE_G1C_OKS, "invalid", "G1c"),
    ("rw-valid", "rw-register", RW_VALID, "valid", None),
    ("rw-g1c", "rw-register", RW_G1C, "invalid", "G1c"),
], ids=["append-valid", "append-g2", "append-g1c-oks", "rw-valid", "rw-g1c"])
@pytest.mark.parametrize("fmt", ["edn", "jsonl"])
def test_elle_minimal_histories(capsys, tmp_path, name, model, text, expected, anomaly, fmt):
    path = tmp_path / f"{name}.{fmt}"
    if fmt == "edn":
        path.write_text(text)
    else:  # the same ops as JSON lines: still no f and no process
        ops = read_history(_written(tmp_path / f"{name}.edn", text))
        path.write_text("".join(json.dumps(_minimal_json(op)) + "\n" for op in ops))
    code, out, err = check(capsys, path, "--model", model, "--json")
    assert code == EXIT[expected], err
    result = json.loads(out)
    assert result["verdict"] == expected
    found = {a["type"] for r in result["results"] for a in r.get("anomalies", [])}
    assert (anomaly in found) if anomaly else not found, found


def test_a_minimal_op_gets_a_process_of_its_own(tmp_path):
    ops = read_history(_written(tmp_path / "g2.edn", ELLE_G2))
    # invoke 0 pairs with ok 3 and invoke 1 with ok 2, by their micro-ops; none shares a process
    # with another transaction, so no process order is made up
    assert ops[0].process == ops[3].process and ops[1].process == ops[2].process
    assert len({ops[0].process, ops[1].process, ops[4].process}) == 3
    assert all(isinstance(o.process, int) and o.process < 0 for o in ops)


def test_what_is_truly_malformed_is_still_refused(capsys, tmp_path):
    cases = {
        "unbalanced.edn": ("{:type :ok :value [[:append 1 1]]\n", "never closed"),
        "shape.edn": ("{:type :ok :value 5}\n", "list-append's txn takes a transaction"),
        "mops.edn": ("{:type :ok :value [[:write 1 1]]}\n", "list-append's txn takes"),
        "bad.log": ("INFO  jepsen.util - 1   :invoke :write  [3\n", "never closed"),
        "garbage.jsonl": ("\x00\x01 garbage\n", "bad op record"),
    }
    for name, (text, message) in cases.items():
        code, out, err = check(capsys, _written(tmp_path / name, text), "--model", "list-append")
        assert code == 2 and message in err and len(err.splitlines()) == 1, (name, err)
        assert "Traceback" not in err and not out


# ------------------------------------------------------------------------------------ property

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), corrupt=st.booleans(), spacing=st.integers(0, 2**32))
def test_respacing_a_history_never_changes_its_verdict(capsys, tmp_path_factory, seed, corrupt,
                                                       spacing):
    ops = register_history(seed, 24, processes=4, values=4)
    if corrupt:
        ops = corrupt_one_read(ops, seed)
    base = tmp_path_factory.mktemp("respace")
    rng = random.Random(spacing)
    verdicts = set()
    for name, text in (("tabs.log", _log(ops, lambda: "\t")),
                       ("blanks.log", _log(ops, lambda: " " * rng.randint(1, 6))),
                       ("mixed.log", _log(ops, lambda: rng.choice([" ", "  ", "\t", " \t "]))),
                       ("spaced.edn", _edn(ops, rng))):
        code, out, err = check(capsys, _written(base / name, text), "--model", "cas-register")
        assert code in (0, 1), (name, err)
        verdicts.add(code)
    assert len(verdicts) == 1
    if corrupt:  # a read of a value never written is never linearizable
        assert verdicts == {1}


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _minimal_json(op: Op) -> dict:
    mops = [[str(m[0]), m[1], m[2]] for m in op.value]
    return {"index": op.index, "type": op.type, "value": mops}


def _log(ops: list[Op], sep) -> str:
    """A jepsen.log of `ops`, each field parted from the next by what `sep()` returns."""
    lines = []
    for o in ops:
        fields = [str(o.process), f":{o.type}", f":{o.f}", to_edn(o.value)]
        if o.type == "info":
            fields[3] = ":timed-out"
        line = fields[0]
        for field in fields[1:]:
            line += sep() + field
        lines.append("INFO  jepsen.util - " + line)
    return "\n".join(lines) + "\n"


def _edn(ops: list[Op], rng: random.Random) -> str:
    """An EDN history of `ops` with random runs of blanks, commas and newlines between forms."""
    def gap() -> str:
        return rng.choice([" ", ", ", "\n  ", "\t", " ,\n"])
    return "[" + gap().join(
        "{" + gap().join([":process", str(o.process), ":type", f":{o.type}", ":f", f":{o.f}",
                          ":value", to_edn(o.value)]) + "}" for o in ops) + "]\n"
