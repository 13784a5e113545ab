"""Records a run's history as it happens: one index and one monotonic time per event.

Everything is appended to `history.jsonl` immediately (flushed per op), so a harness crash loses
at most the op in flight. Only the event loop thread calls `record`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reports.history import HistoryWriter, Op


class Recorder:
    def __init__(self, path: Path, now_ns: Callable[[], int] = time.monotonic_ns,
                 flush: bool = True):
        """`now_ns`: the history's clock; the simulator passes its virtual time. `flush`: each
        op reaches the file as it is recorded (HistoryWriter; the simulator buffers)."""
        self._writer = HistoryWriter(path, flush)
        self.wall_t0 = time.time()  # the wall clock at history time 0, to place node logs on it
        self._now_ns = now_ns
        self._t0 = now_ns()
        self._index = 0
        self.counts: Counter = Counter()  # type -> count, for the progress line

    def elapsed_s(self) -> float:
        return (self._now_ns() - self._t0) / 1e9

    def record(self, process: int | str, type_: str, f: str, value: Any = None, *, key: Any = None,
               node: str | None = None, error: Any = None, hybrid_time: int | None = None,
               sent: dict | None = None) -> Op:
        op = Op(index=self._index, type=type_, f=f, value=value, process=process,
                time=self._now_ns() - self._t0, key=key, node=node, error=error,
                hybrid_time=hybrid_time, sent=sent)
        self._index += 1
        if process != "nemesis":
            self.counts[type_] += 1
        self._writer.write(op)
        return op

    def close(self) -> None:
        self._writer.close()
