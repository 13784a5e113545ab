"""The in-memory Raft log: entries after a compaction point, how far the driver has made them
durable (`stable`) and how far it has been handed them to write (`handed`, at least `stable`:
a leader's write may still be under way in the background, see RaftCore.persisted). Entries
above `handed` are handed out in the next Ready."""

from __future__ import annotations

from node.entry import ENTRY_OVERHEAD, Entry

from .types import SafetyError


class RaftLog:
    def __init__(self, snapshot_index: int, snapshot_term: int, entries: tuple[Entry, ...]):
        self.offset = snapshot_index  # index just before entries[0]
        self.offset_term = snapshot_term
        self.entries: list[Entry] = list(entries)
        for i, e in enumerate(self.entries):
            if e.index != snapshot_index + 1 + i:
                raise SafetyError(f"persisted log is not contiguous at index {e.index}")
        self.stable = self.last_index()
        self.handed = self.stable

    def last_index(self) -> int:
        return self.offset + len(self.entries)

    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.offset_term

    def first_index(self) -> int:
        return self.offset + 1

    def term_at(self, index: int) -> int | None:
        """None when the index is compacted away or beyond the end."""
        if index == self.offset:
            return self.offset_term
        pos = index - self.offset - 1
        if pos < 0 or pos >= len(self.entries):
            return None
        return self.entries[pos].term

    def slice(self, lo: int, hi: int) -> list[Entry]:
        """Entries lo..hi inclusive (lo must not be compacted)."""
        return self.entries[lo - self.offset - 1 : hi - self.offset]

    def batch(self, lo: int, max_bytes: int) -> tuple[Entry, ...]:
        """Entries from lo on, bounded by their encoded bytes but never empty if lo exists."""
        out: list[Entry] = []
        size = 0
        for e in self.entries[lo - self.offset - 1 :]:
            size += len(e.payload) + ENTRY_OVERHEAD
            if out and size > max_bytes:
                break
            out.append(e)
        return tuple(out)

    def first_within(self, hi: int, max_bytes: int) -> int:
        """The lowest index from which the payloads up to `hi` hold at most `max_bytes` (never
        above `hi`; the first index held when all of them fit)."""
        size, i = 0, min(hi, self.last_index())
        while i > self.offset:
            size += len(self.entries[i - self.offset - 1].payload)
            if size > max_bytes:
                return min(i + 1, hi)
            i -= 1
        return self.offset + 1

    def append(self, entry: Entry) -> None:
        if entry.index != self.last_index() + 1:
            raise SafetyError(f"append of index {entry.index} after {self.last_index()}")
        self.entries.append(entry)

    def truncate_from(self, index: int) -> None:
        """Drop `index` and everything after it (a conflicting suffix from an old leader)."""
        del self.entries[index - self.offset - 1 :]
        self.stable = min(self.stable, index - 1)
        self.handed = min(self.handed, index - 1)

    def find_conflict_by_term(self, index: int, term: int) -> int:
        """Largest i <= index whose term is <= term: where the logs can still agree."""
        index = min(index, self.last_index())
        while index > self.offset:
            t = self.term_at(index)
            if t is not None and t <= term:
                break
            index -= 1
        return index

    def unstable(self) -> list[Entry]:
        """The entries not yet handed to the driver to write."""
        return self.entries[self.handed - self.offset :]

    def handed_to(self, index: int) -> None:
        """The driver is writing everything through `index` (not yet durable)."""
        self.handed = max(self.handed, index)

    def stable_to(self, index: int) -> None:
        self.stable = max(self.stable, index)
        self.handed = max(self.handed, index)

    def compact(self, index: int) -> None:
        term = self.term_at(index)
        if term is None or index <= self.offset:
            return
        del self.entries[: index - self.offset]
        self.offset, self.offset_term = index, term
