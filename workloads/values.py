"""Value sizes for workloads: the small values every workload writes by default, or a wide,
heavy-tailed spread that reaches right up to the RPC frame limit.

With values of a few bytes, no path was ever asked to carry a large one, so a size a path could
not carry (a write that fits its own frame while the AppendEntries replicating it does not) was
never tried. `wide` draws most values small, a fifth log-uniformly over every size up to the
limit, and a tenth within a KiB under it, where request and replication envelopes differ by a
few hundred bytes and the paths disagree on what fits.

A written value is the register's small integer `v` padded to its size, so the history still
records `v` and the checker judges the same model. Half the values are padded with NUL
characters rather than dots: a value of long zero runs is what a disk's unwritten space looks
like, and a WAL reader that takes zeros for unwritten space must meet them.
`zeros` is the cheap way there: half the values plain ints, half NUL-padded to 520-2100 bytes,
so a batch holds a whole zero sector without the frame-sized values of `wide`. The size is a function of (seed, key, v): a
cas's expected value must be the same bytes the write stored, whichever thread wrote it. Reads
map the bytes back to `v`, and bytes that are no value's encoding come back as a string no
write wrote, which the checker reports (never silently accepted).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

MODES = ("small", "wide", "zeros")
# How far `wide` values reach by default: Tessera's RPC frame limit (node.rpc.wire's
# DEFAULT_MAX_FRAME, 64 MiB; tests/test_value_sizes.py keeps the two equal), where the paths
# that carry a write disagree on what fits. A system with a smaller request limit sets
# value_max_bytes.
DEFAULT_LIMIT = 64 << 20
ZEROS_P = 0.5  # zeros mode: the share of values padded with NULs, the rest plain ints
ZEROS_BYTES = (520, 2100)  # zeros mode: a padded value's size, so it holds a whole zero sector
SMALL_P, LOG_UNIFORM_P = 0.7, 0.2  # the rest: the edge, within EDGE_BYTES under the limit
SMALL_MAX = 64
EDGE_BYTES = 1024


@dataclass(frozen=True)
class ValueSizes:
    mode: str = "small"
    limit: int = DEFAULT_LIMIT  # the request size the values reach up to
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"value_sizes must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.limit < 2 * EDGE_BYTES:
            raise ValueError(f"value_max_bytes must be at least {2 * EDGE_BYTES}")

    def size(self, key: str, v: int) -> int:
        """How many bytes `v` takes at `key` (0 in small mode: the plain integer)."""
        if self.mode == "small":
            return 0
        rng = random.Random(f"{self.seed}/{key}/{v}")
        if self.mode == "zeros":
            return rng.randint(*ZEROS_BYTES) if rng.random() < ZEROS_P else 0
        roll = rng.random()
        if roll < SMALL_P:
            return rng.randrange(SMALL_MAX)
        if roll < SMALL_P + LOG_UNIFORM_P:
            return int(math.exp(rng.uniform(math.log(SMALL_MAX), math.log(self.limit))))
        return self.limit - rng.randrange(EDGE_BYTES)

    def encode(self, key: str, v):
        """What the store holds for `v`: `v` itself in small mode, else "v|" padded to size."""
        if self.mode == "small" or v is None:
            return v
        head = f"{v}|"
        pad = "\x00" if self.mode == "zeros" or random.Random(
            f"{self.seed}/{key}/{v}/pad").random() < 0.5 else "."
        return head + pad * max(0, self.size(key, v) - len(head))

    def decode(self, key: str, stored):
        """`v` back from what a read returned; bytes no write of `v` stored come back as a
        description the checker sees as a value never written."""
        if self.mode == "small" or stored is None:
            return stored
        head, sep, _ = stored.partition("|") if isinstance(stored, str) else ("", "", "")
        try:
            v = int(head) if sep else None
        except ValueError:
            v = None
        if v is None or stored != self.encode(key, v):
            size = len(stored) if isinstance(stored, str) else "?"
            return f"not a written value: {size} bytes starting {str(stored)[:16]!r}"
        return v
