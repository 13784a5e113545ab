"""Every `tessera` command's exit codes, as Jepsen's CLI, so scripts can tell a verdict from a
broken invocation: 0 valid (or done), 1 invalid (or failed, or problems found), 2 unknown (or
could not decide), 254 bad arguments (usage errors included), 255 crashed.

A leaf in node/: it imports nothing from the project, so every command takes its codes from
here, the engine's own (which may import nothing above node/) and the checkers' `tessera check`
without importing the harness."""

from __future__ import annotations

from collections.abc import Iterable

EXIT = {"valid": 0, "invalid": 1, "unknown": 2}
BAD_ARGS, CRASHED = 254, 255


def verdict_exit(verdicts: Iterable[str]) -> int:
    """Any invalid -> 1, else any unknown (or anything unrecognised) -> 2, else 0."""
    verdicts = set(verdicts)
    if "invalid" in verdicts:
        return EXIT["invalid"]
    return EXIT["valid"] if verdicts == {"valid"} else EXIT["unknown"]
