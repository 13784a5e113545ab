"""Operation histories: the op record, and reading/writing them as JSON lines, Jepsen EDN and
`jepsen.log` text.

The harness writes `history.jsonl` with `HistoryWriter`; checkers read any of the three formats
with `read_history`. Every reader validates as it goes (op types, invoke/completion pairing) and
raises `HistoryError` naming the line, because a malformed history must never yield a verdict.

Public API: `Op`, `Keyword`, `HistoryError`, `read_history`, `parse_edn_history`,
`parse_jepsen_log`, `read_jsonl`, `HistoryWriter`, `write_jsonl`, `to_edn`, `write_edn`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

OP_TYPES = frozenset({"invoke", "ok", "fail", "info"})
NEMESIS = "nemesis"


class Op(msgspec.Struct, omit_defaults=True):
    """One history event. `time` is ns since the run began; `process` an int or "nemesis"."""

    index: int
    type: str
    # None only until a reader's Validator gives an op recorded without one a process of its own
    process: int | str | None = None
    f: Any = None
    value: Any = None
    time: int | None = None
    key: Any = None
    node: str | None = None
    error: Any = None
    # An ok write's hybrid timestamp as the database returned it (node.clock); absent otherwise
    # and in histories recorded before writes carried one.
    hybrid_time: int | None = None
    # On an answered write of a session: what tied the reply to its request, {"tablet",
    # "session", "seq", "batch" (the first seq of the request it travelled in), "ops" (that
    # request's size), "echo" (the seq the server's answer said it answers)}; the replies
    # checker holds each to its own op.
    sent: dict | None = None


class Keyword(str):
    """An EDN keyword read as a string (equal to it), remembered so EDN output stays keywords."""

    __slots__ = ()


class HistoryError(ValueError):
    """A malformed history; `line` is 1-based in the source file (0 when unknown)."""

    def __init__(self, message: str, line: int = 0, source: str = ""):
        where = f"{source}:{line}: " if source and line else (f"line {line}: " if line else "")
        super().__init__(where + message)
        self.line = line
        self.source = source


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    raise NotImplementedError(type(obj))


_encoder = msgspec.json.Encoder(enc_hook=_enc_hook)


# --------------------------------------------------------------------------------- validation


class Validator:
    """Checks op types and invoke/completion pairing incrementally, so readers can name lines.

    An op recorded with no process (Elle's minimal histories: `:index`, `:type`, `:value` and
    nothing else) gets one of its own, as Elle reads it: a fresh negative number, so it shares
    no process order with any other op. A completion without a process completes the oldest
    open process-less invoke that has its `f` and, for a transaction, the same micro-ops' f
    and key; with none open it stands alone, a completion whose invocation is unknown. A
    harness run's own history always records processes: its readers pass `anonymous=False`."""

    def __init__(self, source: str, anonymous: bool = True):
        self.source = source
        self.anonymous_ok = anonymous  # False for the harness's own histories: each op has one
        self.open: dict[Any, int] = {}  # process -> line of its outstanding invoke
        self.anonymous: list[tuple[tuple, int]] = []  # open process-less invokes: (signature, process)
        self.fresh = 0

    def admit(self, op: Op, line: int) -> Op:
        """`op` as the history holds it (with its process), or HistoryError naming the line."""
        if op.type not in OP_TYPES:
            raise HistoryError(f"unknown op type {op.type!r}", line, self.source)
        if op.process is None:
            if not self.anonymous_ok:
                raise HistoryError("op has no process", line, self.source)
            return msgspec.structs.replace(op, process=self._anonymous(op))
        if op.process == NEMESIS:  # nemesis ops are :info pairs; they carry no pairing rule
            return op
        pending = self.open.get(op.process)
        if op.type == "invoke":
            if pending is not None:
                raise HistoryError(
                    f"process {op.process} invokes again while its invoke on line {pending} is open",
                    line,
                    self.source,
                )
            self.open[op.process] = line
        elif pending is None:
            raise HistoryError(
                f"{op.type} completion for process {op.process} without an invoke", line, self.source
            )
        else:
            del self.open[op.process]
        return op

    def _anonymous(self, op: Op) -> int:
        signature = _signature(op)
        if op.type != "invoke":
            for i, (sig, process) in enumerate(self.anonymous):
                if sig == signature:
                    del self.anonymous[i]
                    return process
        self.fresh -= 1
        if op.type == "invoke":
            self.anonymous.append((signature, self.fresh))
        return self.fresh


def _signature(op: Op) -> tuple:
    """What an invoke and its completion share: f, and a transaction's micro-ops' f and key
    (a read's value differs between the two)."""
    v = op.value
    if isinstance(v, (list, tuple)) and v and all(isinstance(m, (list, tuple)) and len(m) >= 2
                                                  for m in v):
        try:
            return op.f, tuple((str(m[0]), _hashable(m[1])) for m in v)
        except TypeError:  # an unhashable key: the f alone decides
            pass
    return op.f, None


def _as_op(fields: dict, index: int, line: int, source: str) -> Op:
    def text(v: Any) -> Any:
        return str(v) if isinstance(v, str) else v

    try:
        op_type = fields["type"]
    except KeyError:
        raise HistoryError("op has no :type", line, source) from None
    process = fields.get("process")
    if process is None:
        pass  # the Validator gives it one
    elif isinstance(process, str):
        process = str(process)
    elif not isinstance(process, int) or isinstance(process, bool):
        raise HistoryError(f"bad process {process!r}", line, source)
    time = fields.get("time")
    if time is not None and not isinstance(time, int):
        raise HistoryError(f"bad time {time!r}", line, source)
    hybrid_time = fields.get("hybrid_time")
    if hybrid_time is not None and (type(hybrid_time) is not int or hybrid_time < 0):
        raise HistoryError(f"bad hybrid_time {hybrid_time!r}", line, source)
    op_index = fields.get("index", index)
    return Op(
        index=op_index if isinstance(op_index, int) else index,
        type=text(op_type) if isinstance(op_type, str) else repr(op_type),
        f=text(fields.get("f")),
        value=fields.get("value"),
        process=process,
        time=time,
        key=fields.get("key"),
        node=fields.get("node"),
        error=fields.get("error"),
        hybrid_time=hybrid_time,
    )


# -------------------------------------------------------------------------------- JSON lines


def read_jsonl(path: str | Path) -> list[Op]:
    """Read `history.jsonl` (one op object per line; blank lines ignored). An op without an
    `index` gets its position in the file: histories from other tools need not number ops."""
    source = str(path)
    validator = Validator(source)
    decoder = msgspec.json.Decoder(Op)
    ops: list[Op] = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                op = decoder.decode(raw)
            except msgspec.ValidationError as e:
                op = _unnumbered(raw, len(ops), e, lineno, source)
            except msgspec.DecodeError as e:
                raise HistoryError(f"bad op record: {e}", lineno, source) from None
            ops.append(validator.admit(op, lineno))
    return ops


def _unnumbered(raw: bytes, position: int, error: Exception, lineno: int, source: str) -> Op:
    """An op record that lacks only its index, numbered by its position; any other schema
    error is the record's (HistoryError naming the line)."""
    if "missing required field `index`" not in str(error):
        raise HistoryError(f"bad op record: {error}", lineno, source) from None
    try:
        return msgspec.convert({**msgspec.json.decode(raw), "index": position}, Op)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError) as e:
        raise HistoryError(f"bad op record: {e}", lineno, source) from None


def write_jsonl(ops: Iterable[Op], path: str | Path) -> None:
    with HistoryWriter(path) as w:
        for op in ops:
            w.write(op)


class HistoryWriter:
    """Appends ops to a `history.jsonl` as they happen, one flushed line each, so a crashed run
    still leaves a readable history. `flush=False` buffers them until close: for the
    simulator, which reads a seed's history only after closing it, and whose runs write a
    hundred thousand lines a seed (a write call each cost more than a per cent of it)."""

    def __init__(self, path: str | Path, flush: bool = True):
        self._fh = open(path, "ab")
        self._flush = flush

    def write(self, op: Op) -> None:
        self._fh.write(_encoder.encode(op) + b"\n")
        if self._flush:
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------------------------- EDN

_TOKEN = re.compile(
    r"""(?P<ws>[\s,]+|;[^\n]*)
      |(?P<open>\#\{|[\[({])
      |(?P<close>[\])}])
      |(?P<string>"(?:[^"\\]|\\.)*")
      |(?P<discard>\#_)
      |(?P<tag>\#[A-Za-z][^\s,\[\](){}"]*)
      |(?P<char>\\(?:newline|space|tab|return|[^\s]))
      |(?P<atom>[^\s,\[\](){}";]+)
    """,
    re.VERBOSE,
)
_INT = re.compile(r"[+-]?\d+N?$")
_FLOAT = re.compile(r"[+-]?\d+(\.\d*)?([eE][+-]?\d+)?M?$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}
_STRING_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_SPECIAL_FLOATS = {"##Inf": float("inf"), "##-Inf": float("-inf"), "##NaN": float("nan")}


def _unescape(m: re.Match) -> str:
    esc = m.group(1)
    return chr(int(esc[1:], 16)) if len(esc) == 5 else _ESCAPES.get(esc, esc)
_CHARS = {"newline": "\n", "space": " ", "tab": "\t", "return": "\r"}


class _EdnReader:
    """A small recursive EDN reader: enough of the spec for Jepsen histories, with line numbers."""

    def __init__(self, text: str, source: str):
        self.text = text
        self.source = source
        self.pos = 0
        self.line = 1

    def _token(self) -> tuple[str, str, int] | None:
        while self.pos < len(self.text):
            m = _TOKEN.match(self.text, self.pos)
            if m is None:
                raise HistoryError(f"unreadable EDN near {self.text[self.pos:self.pos + 20]!r}", self.line, self.source)
            self.pos = m.end()
            kind = m.lastgroup
            tok = m.group()
            line = self.line
            self.line += tok.count("\n")
            if kind != "ws":
                return kind, tok, line
        return None

    def read(self) -> tuple[Any, int] | None:
        """Next form and the line it starts on, or None at end of input."""
        tok = self._token()
        if tok is None:
            return None
        return self._form(tok), tok[2]

    def _form(self, tok: tuple[str, str, int]) -> Any:
        kind, text, line = tok
        if kind == "open":
            closer = {"[": "]", "(": ")", "{": "}", "#{": "}"}[text]
            items = []
            while True:
                t = self._token()
                if t is None:
                    raise HistoryError(f"truncated EDN: {text!r} opened here is never closed", line, self.source)
                if t[0] == "close":
                    if t[1] != closer:
                        raise HistoryError(f"mismatched {t[1]!r} (expected {closer!r})", t[2], self.source)
                    break
                items.append(self._form(t))
            if text == "{":
                if len(items) % 2:
                    raise HistoryError("map with an odd number of forms", line, self.source)
                return {_hashable(items[i]): items[i + 1] for i in range(0, len(items), 2)}
            if text == "#{":
                return frozenset(_hashable(i) for i in items)
            return items
        if kind == "close":
            raise HistoryError(f"unexpected {text!r}", line, self.source)
        if kind == "string":
            return _STRING_ESCAPE.sub(_unescape, text[1:-1])
        if kind in ("discard", "tag"):
            nxt = self._token()
            if nxt is None:
                raise HistoryError(f"truncated EDN after {text}", line, self.source)
            value = self._form(nxt)
            return _DISCARDED if kind == "discard" else value
        if kind == "char":
            return _CHARS.get(text[1:], text[1:])
        return self._atom(text, line)

    def _atom(self, text: str, line: int) -> Any:
        if text == "nil":
            return None
        if text == "true":
            return True
        if text == "false":
            return False
        if text.startswith(":"):
            return Keyword(text[1:])
        if text in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[text]
        if _INT.match(text):
            return int(text.rstrip("N"))
        if _FLOAT.match(text):
            return float(text.rstrip("M"))
        return Keyword(text)  # a symbol; histories only use them as names


_DISCARDED = object()


def _hashable(v: Any) -> Any:
    return tuple(_hashable(x) for x in v) if isinstance(v, list) else v


def parse_edn_history(text: str, source: str = "") -> list[Op]:
    """Parse a Jepsen EDN history: one vector/list of op maps, or op maps one after another.
    A history of jepsen.independent tuples (every client op's value `[k v]`) is split per key
    (`split_independent`), as our own export writes multi-key histories."""
    reader = _EdnReader(text, source)
    validator = Validator(source)
    ops: list[Op] = []

    def add(form: Any, line: int) -> None:
        if form is _DISCARDED:
            return
        if not isinstance(form, dict):
            raise HistoryError(f"expected an op map, got {form!r}", line, source)
        ops.append(validator.admit(_as_op(form, len(ops), line, source), line))

    while (tok := reader._token()) is not None:
        if tok[0] == "open" and tok[1] in "[(":  # a vector of ops: read element by element
            closer = "]" if tok[1] == "[" else ")"
            while (t := reader._token()) is None or t[0] != "close":
                if t is None:
                    raise HistoryError(f"truncated EDN: {tok[1]!r} opened here is never closed", tok[2], source)
                add(reader._form(t), t[2])
            if t[1] != closer:
                raise HistoryError(f"mismatched {t[1]!r} (expected {closer!r})", t[2], source)
        else:
            add(reader._form(tok), tok[2])
    return split_independent(ops)


def split_independent(ops: list[Op]) -> list[Op]:
    """Jepsen's independent histories carry each op's key in its value, `[k v]` (a cas:
    `[k [old new]]`). When every client op (transactions aside, `_transaction`: their keys are
    in their micro-ops) has that shape, and none has a key of its own, move the key out, so each key is
    checked as its own register; any other history is returned as it is."""
    client = [o for o in ops if o.process != NEMESIS and not _transaction(o)]

    def tuple_shaped(o: Op) -> bool:
        v = o.value
        return (o.key is None and isinstance(v, list) and len(v) == 2
                and (o.f != "cas" or (isinstance(v[1], list) and len(v[1]) == 2)))

    if not client or not all(tuple_shaped(o) for o in client):
        return ops
    out = []
    for o in ops:
        if o.process != NEMESIS and not _transaction(o):
            o = msgspec.structs.replace(o, key=_hashable(o.value[0]), value=o.value[1])
        out.append(o)
    return out


def _transaction(op: Op) -> bool:
    """A txn op, or one with no f whose value is a list of micro-ops `[:f k v]` (Elle's minimal
    histories leave the f out): its value is no independent `[k v]` tuple, even with two."""
    v = op.value
    return op.f == "txn" or (op.f is None and isinstance(v, list) and bool(v) and all(
        isinstance(m, list) and 2 <= len(m) <= 3 and isinstance(m[0], Keyword) for m in v))


_STRING_SPECIALS = re.compile(r'[\\"\x00-\x1f\x7f]')
_ESCAPE_OUT = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(m: re.Match) -> str:
    c = m.group()
    return _ESCAPE_OUT.get(c) or f"\\u{ord(c):04x}"


def to_edn(value: Any, keyword_strings: bool = False) -> str:
    """EDN text for a value; `Keyword`s (and every string, if `keyword_strings`) become keywords."""
    if value is None:
        return "nil"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Keyword) or (keyword_strings and isinstance(value, str)):
        return ":" + value
    if isinstance(value, str):
        return '"' + _STRING_SPECIALS.sub(_escape, value) + '"'
    if isinstance(value, float):
        if value != value:
            return "##NaN"
        if value in (float("inf"), float("-inf")):
            return "##Inf" if value > 0 else "##-Inf"
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{to_edn(k)} {to_edn(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (set, frozenset)):
        return "#{" + " ".join(to_edn(v) for v in value) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(to_edn(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as EDN")


def _value_edn(op: Op) -> str:
    v = op.value
    if isinstance(v, dict) and op.f == "transfer":  # Jepsen's bank: {:from 0, :to 1, :amount 5}
        return "{" + ", ".join(f"{to_edn(k, isinstance(k, str))} {to_edn(x)}"
                               for k, x in v.items()) + "}"
    if isinstance(v, dict) and op.f == "read" and all(
            isinstance(k, str) and k.isdigit() for k in v):  # balances {0 10, 1 20}: JSON made
        return "{" + ", ".join(f"{int(k)} {to_edn(x)}" for k, x in v.items()) + "}"  # keys text
    # transaction micro-ops [f k v]: Jepsen's checkers expect f as a keyword
    if op.f == "txn" and isinstance(v, (list, tuple)):
        return "[" + " ".join(
            "[" + " ".join([to_edn(m[0], True)] + [to_edn(x) for x in m[1:]]) + "]"
            if isinstance(m, (list, tuple)) and m else to_edn(m)
            for m in v
        ) + "]"
    return to_edn(v)


def op_to_edn(op: Op) -> str:
    parts = [
        f":index {op.index}",
        f":type :{op.type}",
        f":process {to_edn(op.process, True) if op.process == NEMESIS else op.process}",
        f":f {to_edn(op.f, True)}",
        # a key of its own goes into the value, as jepsen.independent's [k v] tuple
        f":value {_value_edn(op) if op.key is None else f'[{to_edn(op.key)} {_value_edn(op)}]'}",
    ]
    if op.time is not None:
        parts.append(f":time {op.time}")
    if op.node is not None:
        parts.append(f":node {to_edn(op.node)}")
    if op.error is not None:
        parts.append(f":error {to_edn(op.error)}")
    if op.hybrid_time is not None:
        parts.append(f":hybrid_time {op.hybrid_time}")
    return "{" + ", ".join(parts) + "}"


def write_edn(ops: Iterable[Op], path: str | Path) -> None:
    """Write `history.edn`: one op map per line, as Jepsen's store does."""
    with open(path, "w") as fh:
        for op in ops:
            fh.write(op_to_edn(op) + "\n")


# ------------------------------------------------------------------------------- jepsen.log

_LOG_PREFIX = re.compile(r"jepsen\.util\s+-\s+(?=\S+\s+:\S)")


def parse_jepsen_log(text: str, source: str = "") -> list[Op]:
    """Ops from `jepsen.log` lines, `INFO jepsen.util - 3\t:invoke\t:cas\t[1 2]`, with the
    fields separated by tabs (newer Jepsen) or by any run of blanks (older Jepsen, and some of
    Porcupine's etcd logs: `INFO  jepsen.util - 1   :invoke :write  3`); other lines are log
    noise and skipped. A line's fields are process, type, f and value, one EDN form each (Jepsen
    prints them with pr-str, so a value is never empty), then an optional error, the rest of
    the line: kept as its text (`sql: OK OK 1 row`) unless it is exactly one EDN form. A `:timed-out` value is an unknown outcome
    (Jepsen logs crashed ops that way)."""
    validator = Validator(source)
    ops: list[Op] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        m = _LOG_PREFIX.search(raw)
        if m is None:
            continue
        try:
            process, op_type, f, value, error = _log_fields(raw[m.end():], source)
        except HistoryError as e:
            raise HistoryError(str(e).split(": ", 1)[-1], lineno, source) from None
        if value == "timed-out":
            value, error = None, error or Keyword("timed-out")
            op_type = "info"
        fields = {"type": op_type, "f": f, "process": process, "value": value, "error": error}
        ops.append(validator.admit(_as_op(fields, len(ops), lineno, source), lineno))
    return ops


def _log_fields(rest: str, source: str) -> tuple[Any, Any, Any, Any, Any]:
    """process, type, f, value and error of one jepsen.util line's fields (`rest`): the first
    four are one EDN form each, whatever blanks part them; the error is the rest of the line."""
    reader = _EdnReader(rest, source)
    forms = []
    for _ in range(4):
        form = reader.read()
        forms.append(None if form is None else form[0])
    return (*forms, _error_field(rest[reader.pos:].strip(), source))


def _error_field(text: str, source: str) -> Any:
    """A line's trailing error: one EDN form if it is exactly one, else its text."""
    if not text:
        return None
    reader = _EdnReader(text, source)
    try:
        form = reader.read()
        if form is not None and reader.read() is None:
            return form[0]
    except HistoryError:
        pass
    return text


# ------------------------------------------------------------------------------------ any

def read_history(path: str | Path) -> list[Op]:
    """Read a history in any supported format, chosen by content (JSON object lines, EDN,
    or jepsen.log text). Raises HistoryError (or OSError) for unreadable input."""
    path = Path(path)
    text = path.read_text(errors="replace")
    first = next((ln.lstrip() for ln in text.splitlines() if ln.strip()), "")
    if first.startswith("{\"") or path.suffix == ".jsonl":
        return read_jsonl(path)
    if "jepsen.util" in text[:100_000] and not first.startswith(("[", "(", "{", ";")):
        return parse_jepsen_log(text, str(path))
    return parse_edn_history(text, str(path))


def client_ops(ops: Iterable[Op]) -> Iterator[Op]:
    """The ops a checker judges: everything but the nemesis's."""
    return (op for op in ops if op.process != NEMESIS)
