"""The leader master's re-replication choices (node.master.reconciler), on a real TSManager fed
heartbeats and a catalog record, with the master's config-change call recorded instead of made:
which member counts as failed, and where its replacement goes. The end-to-end runs of the same
rules are tests/test_membership_e2e.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import msgspec

from node import probes
from node.master.catalog import Catalog, TabletRecord, write_tablet, write_tserver_state
from node.master.reconciler import Reconciler
from node.master.server import Master
from node.master.ts_manager import TSManager
from node.protocol import ConfigState, ReplicaChange, ServerStatus, TabletReport

TABLET = "t-0000"
LIMIT_S = 300.0


class FakeMaster:
    """What the round reads of node.master.server.Master, and the changes it asks for."""

    def __init__(self, ts: TSManager, members: list[str], maintenance: tuple[str, ...] = ()):
        self.ts = ts
        self.opts = SimpleNamespace(follower_unavailable_considered_failed_sec=LIMIT_S)
        record = TabletRecord(TABLET, "t", [0, 1], [[u, "127.0.0.1", 1] for u in members], rf=3,
                              config_index=1)
        rows = write_tablet(record) + [m for u in maintenance for m in write_tserver_state(u, True)]
        self.catalog = Catalog({key: value for _, key, value in rows})
        self.changes: list[tuple[str, str]] = []
        self.requests: list = []

    def _catalog(self) -> Catalog:
        return self.catalog

    async def on_change_replica(self, req) -> None:
        self.changes.append((req.op, req.ts_uuid))
        self.requests.append(req)


def _report(uuid: str, state: str, members: list[str], leader: str,
            leader_not_hearing: set[str] = frozenset()) -> TabletReport:
    config = [[u, "VOTER"] for u in members]
    silent_s = {u: LIMIT_S + 1 if u in leader_not_hearing else 0.5 for u in members if u != uuid}
    return TabletReport(TABLET, "t", state, role="LEADER" if uuid == leader else "FOLLOWER",
                        term=2, leader=leader, config=config, committed_config=config,
                        committed_config_index=1,
                        peers_silent_s=silent_s if uuid == leader else {})


def _round(states: dict[str, str | None], members: list[str], leader: str = "a",
           reconciler: Reconciler | None = None, silent: set[str] = frozenset(),
           maintenance: tuple[str, ...] = (), leader_hears: set[str] = frozenset(),
           unreachable: set[str] = frozenset()):
    """One re-replication round: `states` is each server's state of the tablet (None: it has
    no replica), `silent` the servers last heard from LIMIT_S + 1 seconds ago, by this master
    and, unless in `leader_hears`, by the tablet's leader; `unreachable` those the leader last
    heard that long ago while this master hears them."""
    clock = [1000.0]
    ts = TSManager(unresponsive_after_s=2 * LIMIT_S, now=lambda: clock[0])
    for uuid, state in states.items():
        clock[0] = 1000.0 - (LIMIT_S + 1 if uuid in silent else 0)
        tablets = [] if state is None else [
            _report(uuid, state, members, leader,
                    (set(silent) - set(leader_hears)) | set(unreachable))]
        ts.heard(ServerStatus(uuid, "127.0.0.1", 1, tablets))
    clock[0] = 1000.0
    master = FakeMaster(ts, members, maintenance)
    reconciler = reconciler or Reconciler(master)
    reconciler.m = master
    asyncio.run(reconciler._replace_failed_replicas())
    _round.last_requests = master.requests
    return master.changes, reconciler


def test_a_member_reporting_failed_gets_a_replacement_without_any_silence():
    changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": "FAILED", "d": None},
                        members=["a", "b", "c"])
    assert changes == [("add", "d")]


def test_healthy_members_and_a_short_silence_change_nothing():
    changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": "RUNNING", "d": None},
                        members=["a", "b", "c"])
    assert changes == []


def test_a_silent_server_is_still_replaced_as_before():
    changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": "RUNNING", "d": None},
                        members=["a", "b", "c"], silent={"c"})
    assert changes == [("add", "d")]


def test_a_server_silent_to_this_master_alone_is_not_replaced():
    """A master cut off from some servers: c is silent to it, but the tablet's leader hears c.
    Judged by the master's view alone, each tablet with a member there got a replacement and a
    copy, and lost that member, while its leader heard every member throughout."""
    with probes.expect("master.rereplication.silent_but_leader_hears"):
        changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": "RUNNING", "d": None},
                            members=["a", "b", "c"], silent={"c"}, leader_hears={"c"})
    assert changes == []


def test_a_member_its_leader_cannot_reach_is_replaced_while_its_server_says_it_runs():
    """A cut between tablet servers: this master hears c, but the tablet's leader has not heard
    c past the limit. Kudu's leader reports such a peer failed and the master replaces it;
    before, nothing did, and the tablet ran on two voters for as long as the cut lasted. A
    copy onto c (COPYING: its refusals never reach the leader's core) is left to finish."""
    with probes.expect("master.rereplication.replace_unreachable_from_leader"):
        changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": "RUNNING", "d": None},
                            members=["a", "b", "c"], unreachable={"c"})
    assert changes == [("add", "d")]
    for state in ("COPYING", "TOMBSTONED", None):
        with probes.expect("master.rereplication.unreachable_from_leader_not_running"):
            changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": state, "d": None},
                                members=["a", "b", "c"], unreachable={"c"})
        assert changes == [], state


def test_a_failed_or_silent_member_on_a_server_in_maintenance_is_left_alone():
    """Kudu's maintenance mode (master.tserver_state): the operator is working on c, so neither
    its FAILED replica nor its silence earns a replacement, and no replacement goes to a
    server in maintenance; a failed member elsewhere is still replaced, and c once it left."""
    for silent in (set(), {"c"}):
        state = "RUNNING" if silent else "FAILED"
        changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": state, "d": None},
                            members=["a", "b", "c"], silent=silent, maintenance=("c",))
        assert changes == []
    changes, _ = _round({"a": "RUNNING", "b": "FAILED", "c": None, "d": None, "e": "RUNNING"},
                        members=["a", "b", "e"], maintenance=("c",))
    assert changes == [("add", "d")]
    changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": "FAILED", "d": None},
                        members=["a", "b", "c"])
    assert changes == [("add", "d")]


def test_once_the_replacement_votes_the_failed_member_is_removed():
    changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": "FAILED", "d": "RUNNING"},
                        members=["a", "b", "c", "d"])
    assert changes == [("remove", "c")]


def test_a_server_whose_replica_failed_never_holds_its_replacement():
    """c's replica failed and was replaced by d; c forgot it but its damaged files stay. When
    b fails later, c (with no replicas at all, the least loaded) is passed over for e."""
    _, reconciler = _round({"a": "RUNNING", "b": "RUNNING", "c": "FAILED", "d": None},
                           members=["a", "b", "c"])
    changes, _ = _round({"a": "RUNNING", "b": "FAILED", "c": None, "d": "RUNNING",
                         "e": None}, members=["a", "b", "d"], reconciler=reconciler)
    assert changes == [("add", "e")]
    # A master that never saw c fail (a new leader master) would pick c: the gap it leaves.
    changes, _ = _round({"a": "RUNNING", "b": "FAILED", "c": None, "d": "RUNNING",
                         "e": None}, members=["a", "b", "d"])
    assert changes == [("add", "c")]


def test_a_change_is_guarded_by_the_config_its_decision_was_made_from():
    """The round decides from the leader's last heartbeat; the change must be refused if the
    config has moved on since (a replacement added in between), not guarded by a fresh read."""
    _round({"a": "RUNNING", "b": "RUNNING", "c": "FAILED", "d": None}, members=["a", "b", "c"])
    assert [(r.op, r.ts_uuid, r.cas_config_index) for r in _round.last_requests] == [
        ("add", "d", 1)]


def test_the_master_sends_the_decisions_guard_not_a_fresh_one():
    """Master.on_change_replica with a guard from the caller passes it on to the tablet's
    leader as it is: a fresh committed index (3: a replacement already added and promoted
    since the heartbeat the decision came from) would let a second spare in, and the tablet
    would stay at RF+1 for good, since nothing removes a healthy voter."""
    ts = TSManager(unresponsive_after_s=2 * LIMIT_S, now=lambda: 1000.0)
    for uuid in ("a", "b", "c", "d", "e"):
        tablets = [_report(uuid, "RUNNING", ["a", "b", "c"], "a")] if uuid in "abc" else []
        ts.heard(ServerStatus(uuid, "127.0.0.1", 1, tablets))
    fresh = msgspec.structs.replace(_report("a", "RUNNING", ["a", "b", "c", "d"], "a"),
                                    committed_config_index=3)
    sent: list = []

    async def call(addr, method, req, resp_type, **kw):
        if method == "ts.status":
            return ServerStatus("a", "127.0.0.1", 1, [fresh])
        sent.append(req)
        return ConfigState(4, [])

    async def ready():
        return None

    master = SimpleNamespace(_await_ready=ready, ts=ts, rpc_client=SimpleNamespace(call=call),
                             _catalog=FakeMaster(ts, ["a", "b", "c"])._catalog)
    master._tablet_report = lambda peer, tablet: Master._tablet_report(master, peer, tablet)
    asyncio.run(Master.on_change_replica(master, ReplicaChange(TABLET, "add", "e", 1)))
    asyncio.run(Master.on_change_replica(master, ReplicaChange(TABLET, "add", "e")))
    assert [(c.op, c.peer.uuid, c.cas_config_index) for c in sent] == [("add", "e", 1),
                                                                       ("add", "e", 3)]


def test_a_replaced_member_heard_again_before_its_removal_is_removed_all_the_same():
    """c was silent and d was added to replace it; d was promoted, and c was heard again before
    its removal: four healthy voters. Before, nothing counted failed, no removal came, and the
    tablet kept four voters for good (7 of 10 seeds of isolations in the whole-stack
    simulator). The replacement is carried through: c goes, at once."""
    changes, reconciler = _round({"a": "RUNNING", "b": "RUNNING", "c": "RUNNING", "d": None},
                                 members=["a", "b", "c"], silent={"c"})
    assert changes == [("add", "d")]
    changes, _ = _round({"a": "RUNNING", "b": "RUNNING", "c": "RUNNING", "d": "RUNNING"},
                        members=["a", "b", "c", "d"], reconciler=reconciler)
    assert changes == [("remove", "c")]


def test_an_excess_voter_nobody_here_replaced_is_removed_once_the_config_has_stood():
    """Four healthy voters this master did not make (an operator's add-replica; a replacement a
    former leader master began): nothing for the silence limit, so an operator's move-replica
    (add, then remove the source) is not raced; then one goes, never the leader: a server not
    heard from first, else the most loaded."""
    clock = [1000.0]
    ts = TSManager(unresponsive_after_s=2 * LIMIT_S, now=lambda: clock[0])
    master = FakeMaster(ts, ["a", "b", "c", "d"])
    reconciler = Reconciler(master)

    def beat(extra: dict[str, int]):
        for uuid in "abcd":
            others = [TabletReport(f"x-{i}", "t", "RUNNING") for i in range(extra.get(uuid, 0))]
            ts.heard(ServerStatus(uuid, "127.0.0.1", 1,
                                  [_report(uuid, "RUNNING", list("abcd"), "a"), *others]))
        asyncio.run(reconciler._replace_failed_replicas())

    beat({"c": 1})
    clock[0] += LIMIT_S - 1
    beat({"c": 1})
    assert master.changes == []
    clock[0] += 2
    beat({"c": 1})
    assert master.changes == [("remove", "c")]  # the most loaded; never a, the leader


def test_no_excess_voter_is_removed_while_a_replacement_catches_up():
    clock = [1000.0]
    ts = TSManager(unresponsive_after_s=2 * LIMIT_S, now=lambda: clock[0])
    config = [["a", "VOTER"], ["b", "VOTER"], ["c", "VOTER"], ["d", "VOTER"], ["e", "NON_VOTER"]]
    for uuid in "abcde":
        ts.heard(ServerStatus(uuid, "127.0.0.1", 1, [TabletReport(
            TABLET, "t", "RUNNING", role="LEADER" if uuid == "a" else "FOLLOWER", term=2,
            leader="a", config=config, committed_config=config, committed_config_index=1)]))
    master = FakeMaster(ts, list("abcde"))
    asyncio.run(Reconciler(master)._replace_failed_replicas())
    assert master.changes == []
