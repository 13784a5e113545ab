"""`tessera wal dump PATH`: print the records of one segment file or of a whole WAL directory.

For a directory the bootstrap rules apply (only the newest segment may be unfinished). A single
file is judged as if it were the newest segment, since nothing says it is not. Records before a
corruption are printed, then the corruption (file and offset), and the exit status is 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from node.wal.segment import Scan


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    dump = sub.add_parser(
        "dump",
        help="print a segment's entries; exit 1 and name file and offset on corruption",
        description="Print the entries of a WAL segment file, or of every segment of a WAL "
        "directory in order. Corruption is reported with file and offset (exit status 1); "
        "a torn tail of an unfinished newest segment is reported but is not an error.",
    )
    dump.add_argument("path", metavar="PATH", help="a segment file (wal-NNNNNNNNN) or a WAL directory")
    dump.add_argument("--payload", action="store_true", help="also print payloads (hex, first 32 bytes)")


def run(args: argparse.Namespace) -> int:
    from node.exit_codes import BAD_ARGS
    from node.wal.errors import WalCorruption, WalError
    from node.wal.reader import judge_segment, read_log
    from node.wal.segment import parse_segment_name, scan_segment

    if not os.path.exists(args.path):
        print(f"tessera wal dump: no such file or directory: {args.path}", file=sys.stderr)
        return BAD_ARGS
    try:
        if os.path.isdir(args.path):
            names = sorted(n for n in os.listdir(args.path) if parse_segment_name(n) is not None)
            paths = [os.path.join(args.path, n) for n in names]
        else:
            paths = [args.path]
        for i, path in enumerate(paths):
            scan = scan_segment(path)
            _print_scan(scan, args.payload)
            tail = judge_segment(scan, is_last=i == len(paths) - 1)
            if tail is not None:
                what = f"torn tail ({tail.reason}, {tail.garbage_bytes} bytes)" if tail.garbage_bytes else "unfinished (no footer)"
                print(f"  {what}: good data ends at offset {tail.offset}")
        if os.path.isdir(args.path):
            contents = read_log(args.path)  # the cross-segment checks: sequence and index gaps
            print(f"log: {len(contents.entries)} entries after replay, next index {contents.next_index}")
    except WalCorruption as e:
        print(f"tessera wal dump: CORRUPTION in {e.path} at offset {e.offset}: {e.reason}", file=sys.stderr)
        return 1
    except (WalError, OSError) as e:
        print(f"tessera wal dump: {e}", file=sys.stderr)
        return 1
    return 0


def _print_scan(scan: Scan, payload: bool) -> None:
    h, f = scan.header, scan.footer
    footer = f"footer: {f.num_entries} entries, index {f.min_index}..{f.max_index}" if f else "no footer"
    print(f"segment {scan.path}: tablet {h.tablet_id!r}, seq {h.seq}, {scan.size} bytes, {footer}")
    for rec in scan.records:
        if rec.kind.name == "TRUNCATE":
            print(f"  @{rec.offset} TRUNCATE after index {rec.after_index}")
        for e in rec.entries:
            line = f"  @{rec.offset} term {e.term} index {e.index} {e.type.name} {len(e.payload)}B"
            print(line + (f" {e.payload[:32].hex()}" if payload else ""))
