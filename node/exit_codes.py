"""Every `tessera` command's exit codes, as Jepsen's CLI, so scripts can tell a verdict from a
broken invocation: 0 valid (or done), 1 invalid (or failed, or problems found), 2 unknown (or
could not decide), 254 bad arguments (usage errors included), 255 crashed.

A leaf in node/: it imports nothing from the project, so every command takes its codes from
here, the engine's own (which may import nothing above node/) and the checkers' `tessera check`
without importing the harness."""

from __future__ import annotations

EXIT = {"valid": 0, "invalid": 1, "unknown": 2}
BAD_ARGS, CRASHED = 254, 255


def verdict_exit(verdict: str) -> int:
    """The exit code of one verdict: anything unrecognised is unknown (2). A command that
    judged many runs merges their verdicts first (reports.checkers.verdict.merge_verdicts)."""
    return EXIT.get(verdict, EXIT["unknown"])
