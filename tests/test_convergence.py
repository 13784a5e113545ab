"""Replica convergence: the pure comparison, the polling, and end to end on real processes whose
replicas are made to diverge on disk (the check must name the tablet and the key)."""

import asyncio
import json
import time

import msgspec
import pytest

from harness.cli import main as tessera
from node import durable
from node.client import TesseraClient
from node.protocol import ChecksumReport, ChecksumScan, ServerStatus, TabletChecksum
from node.tablet.checksum import row_hashes, table_checksum
from node.tablet.snapshot import SnapshotStore
from node.tools.convergence import check_convergence, compare, converge, first_differing_key
from node.tools.ksck import Endpoint, Servers
from node.tools.local_cluster import LocalCluster

MEMBERS = ["u1", "u2", "u3"]


def rep(uuid, applied=10, checksum=7, state="RUNNING", role="FOLLOWER", term=2, keys=None,
        tablet="T"):
    if state != "RUNNING":
        return ChecksumReport(uuid, [TabletChecksum(tablet, state, error="boom")])
    return ChecksumReport(uuid, [TabletChecksum(tablet, state, role, term, applied, applied,
                                                checksum, 3, MEMBERS, keys)])


def test_checksum_ignores_insertion_and_map_order_but_not_values():
    a = {"x": 1, "y": {"p": 1, "q": [1, 2]}}
    b = {"y": {"q": [1, 2], "p": 1}, "x": 1}
    assert table_checksum(a) == table_checksum(b)
    assert row_hashes(a) == row_hashes(b)
    assert table_checksum(a) != table_checksum({**a, "x": 2})
    assert table_checksum(a) != table_checksum({**a, "z": None})


def test_equal_replicas_are_valid():
    r = compare({"n1": rep("u1", role="LEADER"), "n2": rep("u2"), "n3": rep("u3")},
                ["n1", "n2", "n3"])
    assert r["verdict"] == "valid" and r["errors"] == []
    [t] = r["tablets"]
    assert t["applied_index"] == 10 and all(x["compared"] for x in t["replicas"].values())


def test_divergent_replicas_are_invalid_and_named():
    r = compare({"n1": rep("u1", role="LEADER"), "n2": rep("u2"), "n3": rep("u3", checksum=8)},
                ["n1", "n2", "n3"])
    assert r["verdict"] == "invalid"
    [e] = r["errors"]
    assert e["type"] == "divergent-replicas" and e["tablet"] == "T"
    assert e["replicas"] == ["n1", "n2", "n3"] and e["checksums"]["n3"] == 8


def test_first_differing_key_covers_changed_and_missing_rows():
    same = [("a", 1), ("b", 2), ("c", 3)]
    assert first_differing_key({"n1": same, "n2": list(same)}) is None
    assert first_differing_key({"n1": same, "n2": [("a", 1), ("b", 9), ("c", 3)]}) == "b"
    assert first_differing_key({"n1": same, "n2": [("a", 1), ("c", 3)]}) == "b"
    assert first_differing_key({"n1": same, "n2": [*same, ("d", 4)]}) == "d"


def test_a_lagging_replica_is_not_compared_and_leaves_the_verdict_unknown():
    r = compare({"n1": rep("u1", role="LEADER"), "n2": rep("u2"), "n3": rep("u3", 8, 99)},
                ["n1", "n2", "n3"])
    assert r["verdict"] == "unknown" and "n3" in r["reason"]
    assert r["tablets"][0]["replicas"]["n3"]["compared"] is False


def test_down_failed_and_removed_replicas_are_listed_not_compared():
    outsider = ChecksumReport("u9", [TabletChecksum("T", "RUNNING", "FOLLOWER", 1, 3, 3, 1, 0,
                                                    [*MEMBERS, "u9"])])
    r = compare({"n1": rep("u1", role="LEADER"), "n2": rep("u2", state="FAILED"), "n9": outsider},
                ["n1", "n2", "n3", "n9"])
    assert r["verdict"] == "valid"
    assert r["unreachable"] == ["n3"]
    t = r["tablets"][0]
    assert t["missing"] == ["u3"]
    assert t["replicas"]["n2"] == {**t["replicas"]["n2"], "compared": False, "error": "boom"}
    assert t["replicas"]["n9"]["note"] == "not in the committed config"


def test_nobody_answering_is_unknown():
    assert compare({}, ["n1"])["verdict"] == "unknown"


def test_converge_polls_until_caught_up_then_names_the_first_differing_key():
    rounds = iter([
        {"n1": rep("u1", 12, 5, role="LEADER"), "n2": rep("u2", 11, 4)},
        {"n1": rep("u1", 12, 5, role="LEADER"), "n2": rep("u2", 12, 6)},
    ])
    keyed = {"n1": rep("u1", 12, 5, keys=[("a", 1), ("b", 2)]),
             "n2": rep("u2", 12, 6, keys=[("a", 1), ("b", 3)])}

    def ask(req):
        return keyed if req.with_keys else next(rounds)

    r = converge(ask, ["n1", "n2"], timeout=5, interval=0)
    assert r["verdict"] == "invalid"
    assert r["errors"][0]["first_differing_key"] == "b"
    assert "'b'" in r["errors"][0]["explanation"]


def test_converge_gives_up_as_unknown_at_the_timeout():
    r = converge(lambda req: {"n1": rep("u1", 12, role="LEADER"), "n2": rep("u2", 11)},
                 ["n1", "n2"], timeout=0.05, interval=0.01)
    assert r["verdict"] == "unknown" and "within 0.05 s" in r["reason"]


# Seen under `--nemesis all`: u1's WAL was damaged (FAILED), then a membership fault removed u3;
# the pending config {u1, u2} could never commit, and the tablet had no leader for good.
STUCK = {"n1": rep("u1", state="FAILED"), "n2": rep("u2", role="PRE_CANDIDATE"),
         "n3": rep("u3", role="LEARNER")}


def test_a_tablet_without_a_leader_is_unknown_while_polling_and_invalid_at_the_end():
    r = compare(STUCK, ["n1", "n2", "n3"])
    assert r["verdict"] == "unknown" and r["reason"] == "no leader: T" and not r["errors"]
    r = compare(STUCK, ["n1", "n2", "n3"], final=True)
    assert r["verdict"] == "invalid"
    [e] = r["errors"]
    assert e["type"] == "no-leader" and e["tablet"] == "T"
    assert "n1 FAILED" in e["explanation"] and "n2 RUNNING PRE_CANDIDATE" in e["explanation"]


def test_a_leaderless_tablet_whose_live_majority_includes_a_host_that_never_answered_is_unknown():
    """A nightly matrix's shape: u1 FAILED by the disk fault, u2 pre-candidate, and n3's tablet
    server down (it died on a failing disk as it started, and no fault restarted it). Only one of
    three voters answered live: the run cannot say a live majority failed to elect, so unknown
    (it was called invalid: the engine blamed for the harness's dead server)."""
    gone = {h: r for h, r in STUCK.items() if h != "n3"}
    r = compare(gone, ["n1", "n2", "n3"], final=True)
    assert r["verdict"] == "unknown" and not r["errors"], r
    assert "n3 did not answer" in r["reason"] and r["unreachable"] == ["n3"]
    [n] = [n for n in r["notes"] if n["type"] == "voters-unanswered"]
    assert "n2 RUNNING PRE_CANDIDATE" in n["explanation"]
    # with n3 answering (live, not leading) the majority is known live: invalid as before
    assert compare(STUCK, ["n1", "n2", "n3"], final=True)["verdict"] == "invalid"
    # a host that did not answer but whose voter the majority does not need changes nothing
    live = {"n1": rep("u1", role="PRE_CANDIDATE"), "n2": rep("u2", role="PRE_CANDIDATE")}
    r = compare(live, ["n1", "n2", "n3"], final=True)
    assert r["verdict"] == "invalid" and r["errors"][0]["type"] == "no-leader"


def test_converge_waits_for_an_election_and_fails_a_tablet_that_never_has_one():
    rounds = iter([STUCK, {**STUCK, "n2": rep("u2", role="LEADER")}])
    assert converge(lambda req: next(rounds), ["n1", "n2", "n3"], timeout=5,
                    interval=0)["verdict"] == "valid"
    r = converge(lambda req: STUCK, ["n1", "n2", "n3"], timeout=0.05, interval=0.01)
    assert r["verdict"] == "invalid" and r["errors"][0]["type"] == "no-leader"


def test_a_deleted_tablets_tombstones_need_no_leader():
    gone = {h: ChecksumReport(u, [TabletChecksum("T", "TOMBSTONED")])
            for h, u in [("n1", "u1"), ("n2", "u2")]}
    assert compare(gone, ["n1", "n2"], final=True)["verdict"] == "valid"


# -- end to end: real daemons on loopback ------------------------------------------------------

def _servers(c: LocalCluster) -> Servers:
    return Servers([Endpoint(n, "127.0.0.1", d.port) for n, d in c.daemons.items()
                    if d.kind == "tserver"])


def _wait_running(servers: Servers, name: str, tablet: str, timeout: float = 20) -> None:
    [host] = [h for h in servers.hosts if h.name == name]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = servers.ask_each([host], "tserver", "ts.status", ServerStatus).get(name)
        if st and any(t.tablet_id == tablet and t.state == "RUNNING" for t in st.tablets):
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} never reported {tablet} RUNNING")


def _ksck(c: LocalCluster, capsys) -> tuple[int, dict]:
    masters = ",".join(f"{h}:{p}" for h, p in c.master_addrs)
    code = tessera(["cluster", "ksck", "--masters", masters, "--checksum-scan", "--json",
                    "--checksum-timeout", "15"])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.e2e
@pytest.mark.slow
def test_real_replicas_converge_then_a_damaged_snapshot_is_named(tmp_path, capsys):
    # Snapshots every 10 entries, so a follower holds its rows in a file we can alter.
    c = LocalCluster(tmp_path / "lc", masters=1, tservers=3, flags=["--snapshot-interval-entries=10"])
    c.up(timeout=40)
    try:
        async def write():
            client = TesseraClient(c.master_addrs, timeout=10)
            locs = await client.create_table("t", num_tablets=1, replication_factor=3)
            table = client.table("t")
            for i in range(40):
                await table.write(f"k{i:02d}", i)
            await client.close()
            return locs.tablets[0].tablet_id

        tablet = asyncio.run(asyncio.wait_for(write(), 30))
        ok = check_convergence(_servers(c), timeout=15)
        assert ok["verdict"] == "valid", ok
        [t] = ok["tablets"]
        assert t["tablet"] == tablet and len(t["replicas"]) == 3
        assert len({r["checksum"] for r in t["replicas"].values()}) == 1
        code, report = _ksck(c, capsys)
        assert code == 0 and report["checksum"]["verdict"] == "valid", report
        # each replica says what an election would need: the voters in effect (no change
        # pending: the committed ones, none appended by anyone) and its log's last op
        servers = _servers(c)
        told = [t for rep in servers.ask_each(servers.hosts, "tserver", "ts.checksum",
                                              ChecksumReport, ChecksumScan()).values()
                for t in rep.tablets]
        assert len(told) == 3 and all(
            sorted(t.active_voters) == sorted(t.voters) and len(t.voters) == 3
            and t.pending_by == "" and t.last_op[1] >= 40 for t in told), told

        # A follower's state diverges: stop it, change one row in its newest snapshot (a
        # well-formed file, so it loads), restart it; its applied index catches up as before.
        leader = next(h for h, r in t["replicas"].items() if r["role"] == "LEADER")
        victim = next(n for n in ("t1", "t2", "t3") if n != leader)
        c.kill(victim)
        store = SnapshotStore(c.root / victim / "data" / tablet, tablet)
        snap = store.load_latest()
        key = min(snap.data)
        durable.save_struct(store.path_for(snap.last_applied_index),
                            msgspec.structs.replace(snap, data={**snap.data, key: "diverged"}))
        c.start(victim)
        _wait_running(_servers(c), victim, tablet)  # a server not up yet is listed, not compared
        bad = check_convergence(_servers(c), timeout=20)
        assert bad["verdict"] == "invalid", bad
        [e] = bad["errors"]
        assert e["tablet"] == tablet and e["first_differing_key"] == key
        assert victim in e["replicas"] and len(e["replicas"]) == 3
        code, report = _ksck(c, capsys)
        assert code == 1 and report["checksum"]["errors"][0]["first_differing_key"] == key
        masters = ",".join(f"{h}:{p}" for h, p in c.master_addrs)
        assert tessera(["cluster", "ksck", "--masters", masters, "--checksum-scan"]) == 1
        text = capsys.readouterr().out
        assert f"first differing key: {key!r}" in text and text.endswith("problems found\n")
    finally:
        c.down()


# Seen in a CI-like run under `--nemesis all`: the membership fault removed n2,
# leaving the committed voters {u3, u4}, then the disk fault damaged u3's WAL (FAILED) before
# the re-added u2 was promoted. No majority of the committed voters is left: unavailable by the
# faults' doing, not the engine's, and the run is not judged invalid for it.
def _with_voters(report, voters):
    [t] = report.tablets
    return ChecksumReport(report.uuid, [msgspec.structs.replace(t, voters=voters)])


MAJORITY_FAILED = {"n2": _with_voters(rep("u2", role="LEARNER"), ["u3", "u4"]),
                   "n3": rep("u3", state="FAILED"),
                   "n4": _with_voters(rep("u4", role="PRE_CANDIDATE"), ["u3", "u4"])}


def test_a_tablet_whose_failed_voters_took_the_majority_is_noted_not_invalid():
    for final in (False, True):
        r = compare(MAJORITY_FAILED, ["n2", "n3", "n4"], final=final)
        assert r["verdict"] == "valid" and not r["errors"], r
        [n] = r["notes"]
        assert n["type"] == "majority-failed" and "1 of its 2 committed voters" in n["explanation"]
    # the same shape with u3 running: a majority could elect, and nobody did
    alive = {**MAJORITY_FAILED, "n3": _with_voters(rep("u3"), ["u3", "u4"])}
    r = compare(alive, ["n2", "n3", "n4"], final=True)
    assert r["verdict"] == "invalid" and r["errors"][0]["type"] == "no-leader"


def _in_effect(report, voters, last_op, pending_by="u5"):
    [t] = report.tablets
    return ChecksumReport(report.uuid, [msgspec.structs.replace(
        t, voters=["u1", "u4", "u5"], active_voters=voters, last_op=last_op,
        pending_by=pending_by if voters != ["u1", "u4", "u5"] else "")])


def test_a_pending_removal_whose_remaining_voter_failed_is_noted_by_the_config_in_effect():
    """A nightly run's shape: the leader u5 appended the removal of u1, which was down, (config
    {u4, u5}, not committed), then the disk fault made u5 FAILED. The config in effect on the
    newest log, u4's, has lost its majority: u1 (its log behind) cannot be elected either, and
    no engine could do better. Judged by the committed config alone ({u1, u4, u5}, one FAILED)
    it was called a tablet a live majority could lead, and the run invalid. The unsafe removal's
    shape, a live leader's change beside a voter already FAILED, looks the same as a live
    leader's safe change that a later failure overtook (a nightly matrix ended so: a removal
    reached the leader while the remaining voter still answered, and that voter's damaged WAL
    failed it at its next restart, 3 s later): unknown, never valid."""
    pending = {"n1": _in_effect(rep("u1", role="PRE_CANDIDATE"), ["u1", "u4", "u5"], [2, 22]),
               "n4": _in_effect(rep("u4", role="PRE_CANDIDATE"), ["u4", "u5"], [3, 29]),
               "n5": rep("u5", state="FAILED")}
    r = compare(pending, ["n1", "n4", "n5"], final=True)
    assert r["verdict"] == "valid" and not r["errors"], r
    [n] = [n for n in r["notes"] if n["type"] == "majority-failed"]
    assert ("1 of its 2 voters in the config in effect (a change u5 appended, not committed)"
            in n["explanation"])
    # the change appended by u4, alive, or by a leader not known: u5 FAILED before it (the
    # unsafe removal) or after it, which nothing reported tells apart
    for by in ("u4", ""):
        unsafe = {**pending, "n4": _in_effect(rep("u4", role="PRE_CANDIDATE"), ["u4", "u5"],
                                              [3, 29], pending_by=by)}
        assert compare(unsafe, ["n1", "n4", "n5"])["verdict"] == "unknown"  # still polling
        r = compare(unsafe, ["n1", "n4", "n5"], final=True)
        assert r["verdict"] == "unknown" and not r["errors"], r
        assert "order the replicas cannot tell" in r["reason"]
        [n] = [n for n in r["notes"] if n["type"] == "pending-majority-failed"]
        assert f"a change {by or 'an unknown leader'} appended" in n["explanation"]
    # u5 alive instead: the config in effect has its majority, and nobody was elected
    alive = {**pending, "n5": _in_effect(rep("u5", role="PRE_CANDIDATE"), ["u4", "u5"], [3, 29])}
    r = compare(alive, ["n1", "n4", "n5"], final=True)
    assert r["verdict"] == "invalid" and r["errors"][0]["type"] == "no-leader"
    # the pending change on an older log than another replica's: that one's config counts
    behind = {**pending, "n1": _in_effect(rep("u1", role="PRE_CANDIDATE"), ["u1", "u4", "u5"],
                                          [4, 30])}
    r = compare(behind, ["n1", "n4", "n5"], final=True)
    assert r["verdict"] == "invalid" and r["errors"][0]["type"] == "no-leader"


def test_a_failed_member_with_a_server_free_to_replace_it_is_awaited_then_noted():
    """The master replaces a FAILED member at once when some server can hold the replacement,
    so the rounds go on while one is there; if the end comes first it is a note (an availability
    gap, not a wrong answer). With nowhere to put a replacement there is nothing to wait for."""
    replies = {"n1": rep("u1", role="LEADER"), "n2": rep("u2", state="FAILED"), "n3": rep("u3"),
               "n4": ChecksumReport("u4", [])}
    r = compare(replies, ["n1", "n2", "n3", "n4"])
    assert r["verdict"] == "unknown" and "FAILED members not yet replaced: T" in r["reason"]
    assert not r["notes"]
    r = compare(replies, ["n1", "n2", "n3", "n4"], final=True)
    assert r["verdict"] == "valid" and not r["errors"]
    [n] = r["notes"]
    assert n["type"] == "failed-replica-not-replaced" and n["replicas"] == ["n2"]
    assert n["spares"] == ["n4"]
    no_spare = {h: v for h, v in replies.items() if h != "n4"}
    for final in (False, True):
        r = compare(no_spare, ["n1", "n2", "n3"], final=final)
        assert r["verdict"] == "valid" and not r["notes"], r
    # once replaced (u2 out, u4 in), nothing is left to note
    replaced = {"n1": rep("u1", role="LEADER"), "n2": rep("u2", state="FAILED"),
                "n3": rep("u3"), "n4": rep("u4")}
    replaced = {h: ChecksumReport(v.uuid, [msgspec.structs.replace(t, members=["u1", "u3", "u4"])
                                           for t in v.tablets]) for h, v in replaced.items()}
    r = compare(replaced, ["n1", "n2", "n3", "n4"], final=True)
    assert r["verdict"] == "valid" and not r["notes"], r


def test_the_table_checksum_is_the_crc_of_the_rows_chained_one_by_one():
    """table_checksum encodes all rows at once; its value is the row-by-row definition's,
    whatever the row count's msgpack array header (1, 3 or 5 bytes)."""
    from crc32c import crc32c

    from node.tablet.checksum import _rows, table_checksum

    for n in (0, 1, 15, 16, 300, 1 << 16):
        data = {f"k{i}": [i, {"b": 1, "a": str(i)}] if i % 2 else i for i in range(n)}
        crc = 0
        for _, row in _rows(data):
            crc = crc32c(row, crc)
        assert table_checksum(data) == crc, n


def test_a_tablet_with_voters_beyond_the_replication_factor_is_awaited_then_noted():
    """The master removes a voter beyond the replication factor (a replaced member back before
    its removal), so the rounds go on while one is there, and at the end it is a note. Without
    a factor given (ksck), voter counts are not judged."""
    four = ["u1", "u2", "u3", "u4"]
    replies = {f"n{i}": ChecksumReport(f"u{i}", [msgspec.structs.replace(
        t, members=four) for t in rep(f"u{i}", role="LEADER" if i == 1 else "FOLLOWER").tablets])
        for i in range(1, 5)}
    hosts = sorted(replies)
    r = compare(replies, hosts, replication_factor=3)
    assert r["verdict"] == "unknown" and "not yet removed: T" in r["reason"], r
    r = compare(replies, hosts, final=True, replication_factor=3)
    assert r["verdict"] == "valid" and [n["type"] for n in r["notes"]] == ["over-replicated"]
    assert r["notes"][0]["voters"] == four
    assert compare(replies, hosts, replication_factor=4)["verdict"] == "valid"
    assert compare(replies, hosts)["verdict"] == "valid"
