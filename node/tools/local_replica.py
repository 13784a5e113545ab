"""`tessera local-replica`: Kudu's offline tools for the replicas in one server's data dir.

They run while that server is stopped (they take its data-dir lock, so a running server refuses
them). `list` and `cmeta print` only read. `cmeta unsafe-recreate` rewrites a replica's
committed config (step 4 of Kudu's manual recovery), and `delete --keep-tombstone` turns a
replica into a tombstone that still votes, as the master's DeleteTablet does.
Exit 0 done, 1 refused or failed (the reason on stderr).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from node.probes import probe


def configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="verb", required=True, metavar="{list,cmeta,delete}")

    def with_dir(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("--data-dir", "--fs-data-dir", dest="data_dir", type=Path,
                            required=True, metavar="DIR",
                            help="the server's --data-dir (the server must be stopped); "
                                 "--fs-data-dir is Kudu's name for it")
        return parser

    with_dir(sub.add_parser("list", help="every replica: tablet, table, data state, term, vote, "
                                         "committed config"))
    cmeta = sub.add_parser("cmeta", help="print or rewrite a replica's consensus metadata")
    csub = cmeta.add_subparsers(dest="cmeta_verb", required=True)
    with_dir(csub.add_parser("print", help="term, vote and committed config of TABLET")
             ).add_argument("tablet", metavar="TABLET", help="the tablet's id")
    what = ("replace TABLET's committed config with one of just PEERS as voters, keeping the "
            "term, the vote and the config's index (Kudu's unsafe_recreate; config entries "
            "logged after that index still apply on top): for recovery when a majority is lost "
            "and the servers are down; prefer `tessera tablet unsafe-change-config` on a live one")
    rec = with_dir(csub.add_parser("unsafe-recreate", help=what, description=what))
    rec.add_argument("tablet", metavar="TABLET", help="the tablet's id")
    rec.add_argument("--peers", required=True, metavar="UUID,UUID",
                     help="tablet server UUIDs of the new config (all voters)")
    what = ("delete TABLET's data and WAL. --keep-tombstone keeps its consensus metadata and "
            "last OpId, so it still votes and never votes twice in a term (the safe way); "
            "--clean-unsafe removes everything, votes included")
    d = with_dir(sub.add_parser("delete", help=what, description=what))
    d.add_argument("tablet", metavar="TABLET", help="the tablet's id")
    how = d.add_mutually_exclusive_group(required=True)
    how.add_argument("--keep-tombstone", action="store_true", help="leave a voting tombstone")
    how.add_argument("--clean-unsafe", action="store_true", help="remove every file of it")


def run(args: argparse.Namespace) -> int:
    from node.errors import TesseraError
    from node.exit_codes import BAD_ARGS
    from node.server.daemon import lock_data_dir

    if not (args.data_dir / "instance").exists():
        print(f"tessera local-replica: {args.data_dir} is not a server's data dir (no "
              "instance file)", file=sys.stderr)
        return BAD_ARGS
    try:
        lock = lock_data_dir(args.data_dir)
    except TesseraError as e:
        print(f"tessera local-replica: {e}", file=sys.stderr)
        return 1
    try:
        if args.verb == "list":
            return _list(args.data_dir)
        if args.verb == "delete":
            return _delete(args.data_dir, args.tablet, args.keep_tombstone)
        if args.cmeta_verb == "print":
            return _print_cmeta(args.data_dir, args.tablet)
        return _recreate(args.data_dir, args.tablet, args.peers)
    except (OSError, ValueError, TesseraError) as e:
        print(f"tessera local-replica: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        lock.close()


def _paths(data_dir: Path, tablet: str, disk=None):
    from node.disk import REAL
    from node.tablet.paths import TabletPaths

    paths = TabletPaths(data_dir, tablet, disk or REAL)
    if not paths.disk.exists(paths.superblock) and not paths.disk.exists(paths.consensus_meta):
        raise ValueError(f"no replica of tablet {tablet} in {data_dir}")
    return paths


def _describe(data_dir: Path, tablet: str) -> dict:
    from node.consensus import decode_config
    from node.tablet.cmeta import ConsensusMetadata
    from node.tablet.superblock import Superblock

    paths = _paths(data_dir, tablet)
    out: dict = {"tablet": tablet}
    if paths.superblock.exists():
        sb = Superblock.load(paths.superblock)
        out |= {"table": sb.table_name, "state": sb.data_state.name}
    if paths.consensus_meta.exists():
        cm = ConsensusMetadata.load(paths.consensus_meta)
        config = decode_config(cm.committed_config)
        out |= {"term": cm.current_term, "voted_for": cm.voted_for,
                "config_index": config.opid_index,
                "config": [f"{m.uuid}:{m.member_type.name}" for m in config.members]}
    return out


def _list(data_dir: Path) -> int:
    meta = data_dir / "tablet-meta"
    tablets = sorted(n for n in (p.name for p in meta.iterdir()) if not n.startswith(".")) \
        if meta.is_dir() else []
    print("TABLET\tTABLE\tSTATE\tTERM\tVOTED FOR\tCONFIG")
    for tablet in tablets:
        d = _describe(data_dir, tablet)
        print(f"{tablet}\t{d.get('table', '-')}\t{d.get('state', '-')}\t{d.get('term', '-')}\t"
              f"{d.get('voted_for') or '-'}\t{' '.join(d.get('config', []))}")
    return 0


def _print_cmeta(data_dir: Path, tablet: str) -> int:
    d = _describe(data_dir, tablet)
    if "term" not in d:
        raise ValueError(f"tablet {tablet} has no consensus metadata in {data_dir}")
    print(f"tablet {tablet}\nterm {d['term']}\nvoted for {d['voted_for'] or '-'}\n"
          f"committed config (index {d['config_index']}): {' '.join(d['config'])}")
    return 0


def _recreate(data_dir: Path, tablet: str, peers_text: str) -> int:
    from node.consensus import Member, MemberType, RaftConfig, decode_config, encode_config
    from node.tablet.cmeta import ConsensusMetadata

    peers = [p for p in peers_text.split(",") if p]
    if not peers or len(set(peers)) != len(peers):
        raise ValueError("--peers must name distinct tablet server UUIDs")
    cm = ConsensusMetadata.load(_paths(data_dir, tablet).consensus_meta)
    old = decode_config(cm.committed_config)
    new = RaftConfig(old.opid_index, tuple(Member(u, MemberType.VOTER) for u in peers))
    cm.update(committed_config=encode_config(new))
    print(f"tablet {tablet}: committed config {' '.join(f'{m.uuid}:{m.member_type.name}' for m in old.members)}"
          f" -> {' '.join(f'{u}:VOTER' for u in peers)} (term {cm.current_term} kept)")
    return 0


def _delete(data_dir: Path, tablet: str, keep_tombstone: bool) -> int:
    print(delete_replica(data_dir, tablet, keep_tombstone))
    return 0


def delete_replica(data_dir: Path, tablet: str, keep_tombstone: bool, disk=None) -> str:
    """`delete`: TABLET's replica in the stopped server's `data_dir` (on `disk`, the real one
    by default) deleted, as a tombstone that keeps its votes or every file gone; what was
    done. Shared by the CLI and the simulator's unsafe fault (harness.sim.stack_unsafe)."""
    from node.tablet.superblock import DataState, OpId, Superblock
    from node.tserver.copy import recover_unfinished_copy, tombstone

    paths = _paths(data_dir, tablet, disk)
    if not keep_tombstone:
        for path in (paths.wal_dir, paths.snapshot_dir):
            paths.disk.rmtree(path)
        for path in (paths.superblock, paths.consensus_meta):
            if paths.disk.exists(path):
                paths.disk.unlink(path)
        return f"tablet {tablet}: every file removed, its votes too"
    sb = Superblock.load(paths.superblock, paths.disk)
    if sb.data_state == DataState.COPYING:
        # the files are a copy's, cut off where it stopped, not the replica's log: tombstoned
        # as start-up would, keeping the last OpId the tombstone under the copy held
        probe("tools.delete.unfinished_copy_tombstoned")
        recover_unfinished_copy(paths, sb)
        return f"tablet {tablet}: an unfinished copy, tombstoned as start-up does"
    if sb.data_state == DataState.TOMBSTONED:
        return f"tablet {tablet}: already a tombstone"
    last = _last_logged(paths)
    tombstone(paths, OpId(*last))
    return f"tablet {tablet}: tombstoned; last logged op ({last[0]}, {last[1]}) kept for its votes"


def _last_logged(paths) -> tuple[int, int]:
    """(term, index) of the replica's last logged entry: its WAL's, else its newest snapshot's."""
    from node.tablet.snapshot import SnapshotStore
    from node.wal.reader import read_log

    if paths.disk.isdir(paths.wal_dir):
        entries = read_log(str(paths.wal_dir), paths.tablet_id, paths.disk).entries
        if entries:
            return entries[-1].term, entries[-1].index
    snap = SnapshotStore(paths.snapshot_dir, paths.tablet_id, paths.disk).load_latest()
    return (snap.last_applied_term, snap.last_applied_index) if snap else (0, 0)
