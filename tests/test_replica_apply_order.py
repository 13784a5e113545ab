"""The one reordering Replica._handle makes of the core's Ready: committed entries that an
earlier Ready made durable are applied before this Ready's own WAL write, never one that the
write still has to make durable."""

from types import SimpleNamespace

from node.consensus.types import Ready
from node.entry import Entry, EntryType
from node.replica import Replica


def _e(index: int) -> Entry:
    return Entry(1, index, EntryType.REPLICATE, b"")


def _apply_durable(rd: Ready) -> tuple[int, list[int]]:
    applied: list[int] = []
    fake = SimpleNamespace(_apply=lambda e: applied.append(e.index))
    return Replica._apply_durable(fake, rd), applied


def test_only_entries_below_the_new_write_are_applied_early():
    rd = Ready(entries_to_persist=[_e(6), _e(7)], committed_entries=[_e(4), _e(5), _e(6)])
    assert _apply_durable(rd) == (2, [4, 5])  # 6 is in this Ready's write: after it


def test_a_follower_told_to_commit_what_it_is_writing_applies_nothing_early():
    rd = Ready(entries_to_persist=[_e(3), _e(4)], committed_entries=[_e(3), _e(4)])
    assert _apply_durable(rd) == (0, [])


def test_with_nothing_to_write_every_committed_entry_is_durable():
    rd = Ready(committed_entries=[_e(8), _e(9)])
    assert _apply_durable(rd) == (2, [8, 9])
