"""The WAL's bootstrap as it was before a fix, put back by tests that show a harness or a test
finds the bug (both directions: the engine passes, the mutant fails)."""

from __future__ import annotations


def trust_the_cached_tail(monkeypatch) -> None:
    """Bootstrap closing a recovered tail with a footer after the bytes it read, trusting them
    as read (from the page cache, where a failed sync may have left them), instead of writing
    them again and syncing them first."""
    from node.wal import log, segment

    def finish_file(path, end, footer, disk):
        fd = disk.open(path)
        try:
            segment._write_footer(disk, fd, end, footer)
        finally:
            disk.close(fd)

    monkeypatch.setattr(log, "finish_file", finish_file)


def trust_the_cached_footer(monkeypatch) -> None:
    """Bootstrap trusting the newest segment's footer as read (maybe from the page cache only,
    after its sync failed) and making the next segment, instead of writing it again and
    syncing it first."""
    from node.wal import log

    monkeypatch.setattr(log, "_seal_again", lambda newest, disk: None)
