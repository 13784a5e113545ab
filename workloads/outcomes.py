"""How an op ended, as every system's client tells a workload: the contract between clients and
workloads, as Jepsen's client returns `:fail` or `:info`. A system's client adapter
(harness/systems/<name>/) raises these; the workloads catch only these, so they know nothing of
any system's own errors. Anything else a client raises leaves the op's outcome unknown.

Only a definite failure may be OpFailed: a wrong `fail` lets a checker pass a broken run.
"""

from __future__ import annotations


class OpFailed(Exception):
    """The operation definitely did not take effect (a history records it as `fail`)."""


class OpUnknown(Exception):
    """The operation may or may not have taken effect (a history records it as `info`)."""


class WrongReply(OpUnknown):
    """A reply that answers some other request than the op's own (reports.checkers.replies): a
    transaction's micro-ops that differ from the invocation, or a write's reply tied to another
    op or seq. The op's effect is unknown, and its history must say so, with `reply`."""

    def __init__(self, reply: object):
        super().__init__(f"the reply does not answer the invocation: {reply!r}")
        self.reply = reply
