"""Jepsen's independent-keys generator: threads work in groups of `threads_per_key`, each group
on one key at a time, and a group moves to a fresh key after `ops_per_key` ops on it. Each key's
history stays small enough to check, and one run covers many keys and so many tablets.

A thread's key sequence depends on its index alone, never on timing, so a thread's op stream is
a function of the run's seed and replays exactly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class IndependentKeys:
    threads_per_key: int = 5
    ops_per_key: int = 200

    def key(self, thread: int, threads: int, n: int) -> int:
        """The key (a number) of a thread's `n`th op."""
        groups = max(1, threads // self.threads_per_key)
        per_thread = max(1, self.ops_per_key // self.threads_per_key)
        return thread % groups + groups * (n // per_thread)
