"""Code probes (node.probes): every probe declared once with a description and placed once in
the engine, no probe placed undeclared; off they count nothing, on they count and a daemon's
probes file names each on its first hit; a test's coverage mark fails when its path was not
taken."""

from __future__ import annotations

import ast
import io
from collections import Counter
from pathlib import Path

import pytest

from node import probes

NODE = Path(__file__).resolve().parent.parent / "node"


def _catalog_keys() -> list[str]:
    tree = ast.parse((NODE / "probes.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "CATALOG":
            return [k.value for k in node.value.keys]
    raise AssertionError("node/probes.py has no CATALOG literal")


def _placed() -> Counter:
    """probe("name") calls in node/, by name; a call whose argument is not a literal is an
    error (the test could not tell what it places)."""
    out: Counter = Counter()
    for path in NODE.rglob("*.py"):
        if path.name == "probes.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "probe"
                    or isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "probe"):
                arg = node.args[0] if node.args else None
                assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), \
                    f"{path}:{node.lineno}: probe() takes a literal name"
                out[arg.value] += 1
    return out


def test_every_probe_is_declared_once_described_and_placed_once():
    keys = _catalog_keys()
    twice = [k for k, n in Counter(keys).items() if n > 1]
    assert not twice, f"declared twice: {twice}"
    placed = _placed()
    assert not [n for n, c in placed.items() if c > 1], "placed twice"
    assert set(placed) - set(keys) == set(), "placed but not declared"
    assert set(keys) - set(placed) == set(), "declared but never placed"
    assert all(probes.CATALOG[k].strip() and "\n" not in probes.CATALOG[k] for k in keys)
    assert len(keys) >= 80, len(keys)


def test_off_a_probe_counts_nothing_and_on_it_counts_and_names_its_first_hit():
    name = next(iter(probes.CATALOG))
    probes.disable()
    probes.probe(name)
    assert probes.hits() == {}
    sink = io.StringIO()
    probes.enable(sink)
    try:
        for _ in range(3):
            probes.probe(name)
        assert probes.hits() == {name: 3} and sink.getvalue() == f"{name}\n"
    finally:
        probes.disable()


def test_a_coverage_mark_fails_when_its_path_was_not_taken_and_restores_the_state():
    a, b = list(probes.CATALOG)[:2]
    probes.enable()
    probes.probe(a)
    try:
        with probes.expect(a):
            probes.probe(a)
        with pytest.raises(AssertionError, match=f"probe {b} never fired"), probes.expect(b):
            probes.probe(a)
        with pytest.raises(KeyError, match="no such probe"), probes.expect("no.such.probe"):
            pass
        assert probes.hits() == {a: 1}  # the marks counted apart
    finally:
        probes.disable()
