"""A replica driver's inbox: what callers hand the driver to run in its own turn, in order, and
what each caller is owed if the driver never runs it.

Writes are parked while the WAL's queue is full (node.replica.wal_writes) and go ahead of the
writes handed in after them once it has room. When the replica stops or fails, whatever the
driver had not run yet is refused at once (`close`), and so is whatever is handed in after:
none of it was proposed, so the caller learns for certain that it did not happen and may try
elsewhere, as Kudu aborts the operations a shutting-down replica had not replicated. Before,
such callers waited out their RPC deadline and recorded a write that never reached a log as
"maybe applied"."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from node.consensus import ProposalError
from node.probes import probe

Refuse = Callable[[BaseException], None]


class Item(NamedTuple):
    run: Callable[[], Any]  # runs in the driver's turn
    fut: asyncio.Future | None  # the caller's: run()'s result, or the error that refused it
    refuse: Refuse | None  # how to answer a caller owed an answer if `run` never runs


class Inbox:
    def __init__(self, wake: asyncio.Event):
        self._wake = wake
        self._items: list[Item] = []
        self._parked: list[Item] = []  # writes handed in while the WAL's queue was full
        self._taken: deque[Item] = deque()  # what the driver took and has not run yet
        self.closed: BaseException | None = None  # why, once the driver runs nothing more

    def put(self, run: Callable[[], Any], fut: asyncio.Future | None = None,
            refuse: Refuse | None = None) -> None:
        self._add(self._items, Item(run, fut, refuse))

    def put_write(self, run: Callable[[], Any], refuse: Refuse, parks: bool) -> None:
        """A write, parked while `parks` (WalWrites.parks) so it keeps its place."""
        self._add(self._parked if parks else self._items, Item(run, None, refuse))

    def _add(self, to: list[Item], item: Item) -> None:
        if self.closed is not None:
            _refuse(item, self.closed)
            return
        to.append(item)
        self._wake.set()

    def run(self, parks: bool) -> None:
        """In the driver: run what was handed in, in order, the parked writes first once the
        WAL's queue has room (not `parks`). A refused proposal is its caller's answer; any
        other error fails the replica, and `close` then refuses what was left unrun."""
        items, self._items = self._items, []
        if self._parked and not parks:
            items, self._parked = self._parked + items, []
        self._taken = taken = deque(items)
        while taken:
            run, fut, _ = taken.popleft()
            try:
                result = run()
                if fut is not None and not fut.done():
                    fut.set_result(result)
            except ProposalError as e:
                if fut is not None and not fut.done():
                    fut.set_exception(e)

    def close(self, why: BaseException) -> None:
        """The driver runs nothing more: refuse what it had not run, and what comes later."""
        if self.closed is None:
            self.closed = why
        owed = [*self._taken, *self._parked, *self._items]
        self._taken, self._parked, self._items = deque(), [], []
        for item in owed:
            _refuse(item, why)


def _refuse(item: Item, why: BaseException) -> None:
    if (item.fut is not None and not item.fut.done()) or item.refuse is not None:
        probe("replica.inbox.refused_unrun")
    if item.fut is not None:
        if not item.fut.done():
            item.fut.set_exception(why)
    elif item.refuse is not None:
        item.refuse(why)
