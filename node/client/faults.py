"""Deliberate client bugs, so a chaos run or a simulator seed can prove the harness catches them,
as the engine's fault flags (node.faults) do for the servers. The client is part of the system
under test (its users get coalesced writes and sessions by default or by choice), and a bug in
how it hands results back is exactly what a history checker exists to catch, if the path runs.

Off unless the environment names them: TESSERA_CLIENT_FAULTS=misroute,new-seqs,... A process
that turns one on says so on stderr when the client module loads. Nothing in the harness sets
it: a mutant run is a person's (or a test's) deliberate choice.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields

from node.exit_codes import BAD_ARGS

ENV = "TESSERA_CLIENT_FAULTS"

HELP = {
    "misroute": "a batch's results come back to its callers one place off (the first op's "
                "result to the last caller), so a caller is told another op's outcome",
    "new-seqs": "a batch whose attempt timed out is sent again as a new request, with new "
                "seqs, so the tablet cannot tell it is a retry and may apply it twice",
    "reuse-slot": "a caller that gave up (cancelled) leaves its place in a batch to the next "
                  "caller, who is answered with the outcome of the op it gave up on",
    "cancel-batches": "a flush its caller gives up on (wait_for, a cancelled close) cancels the "
                      "session's batches in flight, so their ops never get an outcome though the "
                      "tablet may have applied them",
    "buffer-after-close": "an apply still looking up its tablet when its session is closed is "
                          "buffered once the lookup ends, after close() has returned saying "
                          "every op was flushed",
    "drop-error": "a background session's flush drops a failed op's error (a row error, or "
                  "the batch's own failure) and answers the op as applied",
    "no-ddl-token": "create_table and delete_table send no token, so the retry of a create "
                    "whose answer came late is told ALREADY_EXISTS for the caller's own table",
    "drop-propagated": "writes carry no propagated timestamp, so a client's later write on a "
                       "tablet whose leader's clock is behind gets a smaller timestamp than its "
                       "earlier one",
}


@dataclass(frozen=True)
class ClientFaults:
    misroute: bool = False
    new_seqs: bool = False
    reuse_slot: bool = False
    drop_error: bool = False
    cancel_batches: bool = False
    buffer_after_close: bool = False
    drop_propagated: bool = False
    no_ddl_token: bool = False

    def enabled(self) -> list[str]:
        return [f.name.replace("_", "-") for f in fields(self) if getattr(self, f.name)]


def parse(text: str) -> ClientFaults:
    """'misroute,drop-error' -> ClientFaults; ValueError naming what is unknown."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in HELP]
    if unknown:
        raise ValueError(f"{ENV}: unknown client fault {', '.join(unknown)} "
                         f"(known: {', '.join(HELP)})")
    return ClientFaults(**{n.replace("-", "_"): True for n in names})


def from_env() -> ClientFaults:
    """The faults the environment names; a name it does not know ends the process with a
    one-line error (a mutant run that silently ran no mutant would prove nothing)."""
    try:
        faults = parse(os.environ.get(ENV, ""))
    except ValueError as e:
        sys.stderr.write(f"error: {e}\n")
        raise SystemExit(BAD_ARGS) from None
    if faults.enabled():
        sys.stderr.write(f"tessera client: deliberate bugs on ({ENV}): "
                         f"{', '.join(faults.enabled())}\n")
    return faults


FAULTS = from_env()
