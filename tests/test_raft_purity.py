"""node/consensus must stay a pure state machine: no I/O, clock, threads or process state."""

import ast
import pathlib

import node.consensus

# node.probes: a probe is a marker with no effect on what the core does (off, one load and
# compare; on, a counter the core never reads), so a branch of the core can say it was taken.
ALLOWED = {"__future__", "dataclasses", "enum", "random", "collections", "collections.abc", "typing", "msgspec", "node.entry",
           "node.probes"}
FORBIDDEN = {"asyncio", "socket", "time", "threading", "os", "subprocess", "select", "io", "pathlib", "datetime"}


def _imports(path: pathlib.Path) -> set[str]:
    found = set()
    for item in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(item, ast.Import):
            found.update(alias.name for alias in item.names)
        elif isinstance(item, ast.ImportFrom) and item.level == 0:
            found.add(item.module)
    return found


def test_consensus_package_imports_only_pure_modules():
    files = sorted(pathlib.Path(node.consensus.__file__).parent.glob("*.py"))
    assert len(files) >= 5
    for path in files:
        for module in _imports(path):
            top = module.split(".")[0]
            assert top not in FORBIDDEN, f"{path.name} imports {module}"
            assert module in ALLOWED or top in {"msgspec"}, f"{path.name} imports {module}"


def test_the_check_sees_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom time import monotonic\nfrom .log import RaftLog\n")
    assert _imports(bad) == {"os", "time"}
