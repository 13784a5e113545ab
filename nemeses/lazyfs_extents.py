"""The unsynced bytes of one file, as sorted, disjoint, non-touching extents.

Kept apart from the FUSE code so it can be checked against a plain bytearray model. An append
that touches the last extent grows that extent's bytearray in place, so a log written in small
records costs amortized O(record), not O(extent), per write.
"""

from __future__ import annotations

from bisect import bisect_right


class Extents:
    def __init__(self) -> None:
        self.starts: list[int] = []
        self.chunks: list[bytearray] = []

    def __bool__(self) -> bool:
        return bool(self.starts)

    @property
    def end(self) -> int:
        """Offset just past the last unsynced byte (0 if none): the file is at least this long."""
        return self.starts[-1] + len(self.chunks[-1]) if self.starts else 0

    @property
    def nbytes(self) -> int:
        return sum(map(len, self.chunks))

    def write(self, offset: int, data: bytes) -> None:
        if not data:
            return
        end = offset + len(data)
        starts, chunks = self.starts, self.chunks
        i = bisect_right(starts, offset) - 1  # the extent starting at or before offset
        if i < 0 or starts[i] + len(chunks[i]) < offset:
            i += 1  # ... does not reach offset: the first touched extent (if any) starts later
        j = bisect_right(starts, end)  # extents i..j-1 overlap or touch [offset, end]
        if i < len(starts) and starts[i] <= offset:
            base, buf, later = starts[i], chunks[i], i + 1
        else:
            base, buf, later = offset, bytearray(), i
        buf[offset - base : end - base] = data  # grows buf when the write runs past its end
        for k in range(later, j):  # older extents reaching past the new data keep their tails
            tail_from = base + len(buf) - starts[k]
            if tail_from < len(chunks[k]):
                buf += chunks[k][tail_from:]
        starts[i:j] = [base]
        chunks[i:j] = [buf]

    def overlay(self, offset: int, buf: bytearray) -> None:
        """Copy the unsynced bytes within [offset, offset + len(buf)) over `buf`."""
        end = offset + len(buf)
        k = max(0, bisect_right(self.starts, offset) - 1)
        while k < len(self.starts) and self.starts[k] < end:
            start, chunk = self.starts[k], self.chunks[k]
            lo, hi = max(start, offset), min(start + len(chunk), end)
            if lo < hi:
                buf[lo - offset : hi - offset] = memoryview(chunk)[lo - start : hi - start]
            k += 1

    def truncate(self, size: int) -> None:
        """Forget everything at or past `size`."""
        k = bisect_right(self.starts, size - 1) if size > 0 else 0
        del self.starts[k:], self.chunks[k:]
        if self.starts and self.starts[-1] + len(self.chunks[-1]) > size:
            del self.chunks[-1][size - self.starts[-1] :]

    def erase(self, lo: int, hi: int) -> None:
        """Forget the bytes within [lo, hi) (a newer write covers them)."""
        if hi <= lo or not self.starts:
            return
        starts: list[int] = []
        chunks: list[bytearray] = []
        for start, chunk in zip(self.starts, self.chunks, strict=True):
            end = start + len(chunk)
            if end <= lo or start >= hi:
                starts.append(start)
                chunks.append(chunk)
                continue
            if start < lo:
                starts.append(start)
                chunks.append(chunk[: lo - start])
            if end > hi:
                starts.append(hi)
                chunks.append(chunk[hi - start :])
        self.starts, self.chunks = starts, chunks

    def items(self) -> list[tuple[int, bytearray]]:
        return list(zip(self.starts, self.chunks, strict=True))
