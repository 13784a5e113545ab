"""The unsynced-bytes map of lazyfs (and its dropped bytes, which erase) against a plain model: a
bytearray plus which bytes are set."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from nemeses.lazyfs_extents import Extents

SPAN = 200

ops = st.lists(
    st.one_of(
        st.tuples(st.just("w"), st.integers(0, SPAN), st.binary(min_size=0, max_size=40)),
        st.tuples(st.just("t"), st.integers(0, SPAN + 40), st.just(b"")),
        st.tuples(st.just("e"), st.integers(0, SPAN), st.binary(min_size=0, max_size=40)),
    ),
    max_size=40,
)


def check(ext: Extents, data: bytearray, present: list[bool]) -> None:
    # Invariant: sorted, disjoint, not touching (so adjacent writes merge), no empty extent.
    for (s0, c0), (s1, _) in zip(ext.items(), ext.items()[1:], strict=False):
        assert s0 + len(c0) < s1
    assert all(len(c) for _, c in ext.items())
    assert ext.nbytes == sum(present)
    assert ext.end == (max((i for i, p in enumerate(present) if p), default=-1) + 1)
    sentinel = bytearray(b"\xee" * len(data))
    ext.overlay(0, sentinel)
    assert sentinel == bytearray(d if p else 0xEE for d, p in zip(data, present, strict=True))


@settings(max_examples=300, deadline=None)
@given(ops, st.integers(0, SPAN + 40), st.integers(0, 60))
def test_extents_match_the_model(operations, read_at, read_len):
    ext = Extents()
    size = SPAN + 40
    data, present = bytearray(size), [False] * size
    for op, at, payload in operations:
        if op == "w":
            ext.write(at, payload)
            data[at : at + len(payload)] = payload
            for i in range(at, at + len(payload)):
                present[i] = True
        elif op == "e":  # erase as many bytes as the payload is long (a newer write's span)
            ext.erase(at, at + len(payload))
            for i in range(at, at + len(payload)):
                present[i] = False
        else:
            ext.truncate(at)
            for i in range(at, size):
                present[i] = False
        check(ext, data, present)
    # A read window anywhere, partly past everything written.
    window = bytearray(b"\x11" * read_len)
    ext.overlay(read_at, window)
    for i in range(read_len):
        j = read_at + i
        expected = data[j] if j < size and present[j] else 0x11
        assert window[i] == expected


def test_appends_grow_one_extent_in_place():
    ext = Extents()
    for i in range(1000):
        ext.write(i * 3, b"abc")
    assert len(ext.items()) == 1
    assert ext.items()[0][1] == b"abc" * 1000


def test_a_write_spanning_several_extents_keeps_their_outer_tails():
    ext = Extents()
    ext.write(0, b"aaaa")
    ext.write(10, b"bbbb")
    ext.write(20, b"cccc")
    ext.write(2, b"X" * 19)  # bytes 2..20: the tail of a, all of b, the head of c
    assert ext.items() == [(0, bytearray(b"aa" + b"X" * 19 + b"ccc"))]
