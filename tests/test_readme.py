"""The README a newcomer reads: the two commands first, the everyday
workflow before the reference, a status table of one short line a part, nothing pointing at
files a user of the project does not have, and every command line in it one `tessera`
accepts."""

import re
import shlex
from pathlib import Path

import pytest

from harness.cli import COMMANDS

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_the_two_commands_come_first_and_the_workflow_before_the_reference():
    assert README.index("make demo") < README.index("make test") < 400
    sections = re.findall(r"^## (.+)$", README, flags=re.M)
    assert sections.index("The everyday workflow") < sections.index("Concepts") < \
        sections.index("Status") < sections.index("Reference"), sections


def test_nothing_points_where_a_user_cannot_follow():
    for pattern in (r"\.\./shared", r"\bissue \d+", r"\bsession \d+", r"\bseed 0\d\b"):
        assert not re.search(pattern, README, flags=re.I), pattern
    root = Path(__file__).resolve().parents[1]
    for link in re.findall(r"\]\(([^)#:]+)\)", README):  # every relative link resolves
        assert (root / link).exists(), link


def test_the_status_table_is_one_short_line_a_part():
    status = README[README.index("## Status"):README.index("## Reference")]
    rows = [line for line in status.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 10 and all(len(r) <= 220 for r in rows), max(rows, key=len)


def _tessera_lines():
    for block in re.findall(r"```sh\n(.*?)```", README, flags=re.S):
        for line in block.splitlines():
            for part in line.split("#")[0].split("&&"):
                if part.strip().startswith("tessera "):
                    yield shlex.split(part)[1:]


@pytest.mark.parametrize("argv", list(_tessera_lines()), ids=" ".join)
def test_every_command_line_in_it_parses(argv):
    """Each `tessera ...` line of the README's shell blocks is one its command accepts (parsed,
    not run: the workflow needs a cluster). Placeholders in capitals are filled in."""
    import importlib

    from harness.cli import BadArgsParser

    assert argv[0] in COMMANDS, argv
    p = BadArgsParser()
    importlib.import_module(COMMANDS[argv[0]][0]).configure(p)
    filled = [re.sub(r"\b[A-Z][A-Z_]+\b", "x", a) if a.isupper() or "_" in a else a
              for a in argv[1:]]
    p.parse_args(filled)
