"""Kudu's operator tools for a running cluster: `tessera master list | add | remove`,
`tessera tserver list | state` and
`tessera tablet add-replica | remove-replica | move-replica | leader-step-down |
unsafe-change-config`.

They speak the same RPCs as the daemons and the client (master.info, ts.status,
master.change_replica, consensus.leader_step_down); masters come from --masters,
$TESSERA_MASTERS or the local cluster, as for `tessera table`. Exit 0 done, 1 refused or failed (the reason on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from node.client import parse_addrs
from node.client.cli import common_options, run_with_client, verb
from node.errors import TesseraError
from node.master.catalog import CATALOG
from node.probes import probe
from node.protocol import (
    Ack,
    AddMaster,
    ConfigState,
    Empty,
    LeaderStepDown,
    MasterInfo,
    Peer,
    RemoveMaster,
    ServerStatus,
    TabletReport,
    UnsafeChangeConfig,
)
from node.rpc import ErrorCode, RpcError

VOTER_TIMEOUT_S = 300.0  # how long move-replica and master add wait for a new voter


class AdminError(TesseraError):
    pass


# -- master list / tserver list -------------------------------------------------------------
def configure_list(sub: argparse._SubParsersAction, kind: str) -> None:
    what = ("every master: address, UUID, role, term and whether it answers" if kind == "master"
            else "every tablet server the leader master sees: address, UUID, liveness, "
                 "tablets and tablet leaders")
    common_options(sub.add_parser("list", help=what, description=what))


def configure_master_changes(sub: argparse._SubParsersAction) -> None:
    what = ("add the master at ADDRESS (HOST:PORT) to the masters: start it first with an empty "
            "data dir and --masters naming every master and itself; it is copied the catalog "
            "and promoted to voter, and this waits for that (Kudu's master add)")
    a = sub.add_parser("add", help="add a master (started, empty) to the masters", description=what)
    common_options(a)
    a.add_argument("address", metavar="ADDRESS", help="the new master's HOST:PORT")
    what = ("remove the master MASTER (its UUID or HOST:PORT) from the masters; removing the "
            "leader hands leadership over first. Stop the removed master's process afterwards")
    r = sub.add_parser("remove", help="remove a master from the masters", description=what)
    common_options(r)
    r.add_argument("master", metavar="MASTER", help="the master's UUID or HOST:PORT")
    what = ("make the leader master step down (the catalog's leader, Kudu's LeaderStepDown on "
            "the masters' system tablet); with --new-leader, hand leadership to that master "
            "(a graceful transfer: restart or move the leader master without waiting out an "
            "election), else the others elect after a timeout")
    s = sub.add_parser("leader-step-down", help="make the leader master step down",
                       description=what)
    common_options(s)
    s.add_argument("--new-leader", metavar="MASTER_UUID", help="the master to hand leadership to")


async def add_master(args, client) -> int:
    info = await join_master(client, parse_addrs(args.address, 7051)[0], progress=print)
    print(f"master {info.uuid} at {args.address} is a voter")
    return 0


async def join_master(client, addr: tuple[str, int], *, progress=lambda _: None,
                      timeout: float = VOTER_TIMEOUT_S) -> MasterInfo:
    """Kudu's master add: the master at `addr` (started, no catalog yet) joins the catalog's
    config through the leader master; returns its info once it is a voter (a master still
    starting is waited for by `started_master` first). Shared by the CLI and the harness's
    master-membership faults.

    The add is asked of the leader master again when an answer is lost (the leader killed or
    cut off after it committed the add): the second leader then finds the master a member.
    That answer means done, never refused: the master answered INITIALIZING (an empty data
    dir, a fresh UUID) just before, so only an add of this very master made it a member. An
    operator told "refused" would wipe a master the config holds, and the masters would run
    a member short of what they count on. So is a master that answers with a catalog and is
    a member: the lost answer's add went through and the leader copied it the catalog before
    the tool was run again (only a master with a catalog that is no member is refused)."""
    info = await started_master(client, addr)
    member = info.role != "INITIALIZING"
    if member and info.uuid not in await member_masters(client):
        raise AdminError(f"{addr[0]}:{addr[1]} already has a catalog (role {info.role}) and is "
                         "not a member; a new master starts with an empty data dir")
    if not member:
        try:
            progress(config_lines(await client.master_call(
                "master.add_master", AddMaster(Peer(info.uuid, *addr)), ConfigState)))
        except RpcError as e:
            if e.code != ErrorCode.ALREADY_EXISTS:
                raise
            member = True
    if member:
        probe("tools.master_add.already_member")
        progress(f"{info.uuid} is a member already: an earlier try's answer was lost")
    progress(f"waiting for {info.uuid} to be copied the catalog and promoted to voter")

    async def voter() -> bool:
        now = await _ask(client, addr, "master.info", MasterInfo)
        return isinstance(now, MasterInfo) and now.role in ("FOLLOWER", "LEADER")
    await _wait_for_voter(voter, f"{info.uuid} is not a voter", timeout)
    return info


async def started_master(client, addr: tuple[str, int], wait: float = 0.0) -> MasterInfo:
    """The info of the master at `addr`, waiting up to `wait` seconds for a master still
    starting to answer (refused connections are retried); RpcError once that has passed."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        try:
            return await client.rpc.call(addr, "master.info", Empty(), MasterInfo, to_uuid="",
                                         timeout=client.timeout)
        except RpcError as e:
            if e.code != ErrorCode.NETWORK or loop.time() >= deadline:
                raise
        await asyncio.sleep(0.5)


async def _wait_for_voter(voter, failure: str, timeout: float = VOTER_TIMEOUT_S) -> None:
    """Until `voter()` holds; AdminError(`failure`) after `timeout`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await voter():
        if loop.time() > deadline:
            raise AdminError(f"{failure} after {timeout:g}s")
        await asyncio.sleep(0.5)


async def remove_master(args, client) -> int:
    uuid = await leave_master(client, args.master, progress=print)
    print(f"master {uuid} removed; stop its process")
    return 0


async def leave_master(client, master: str, *, progress=lambda _: None,
                       missing_ok: bool = False) -> str:
    """Kudu's master remove: `master` (a UUID or HOST:PORT) leaves the catalog's config;
    returns its UUID. Its process is the caller's to stop. `missing_ok`: a master that is not
    a member is left as it is (undoing an add that may not have gone through), not refused.

    A member the leader master no longer finds when asked is gone: a removal whose answer was
    lost is asked again of the next leader, which has committed it already. So membership is
    read first: a master that was never a member is refused, one that was and is not any
    more is removed, as asked."""
    uuid = master
    if ":" in master:
        info = await client.rpc.call(parse_addrs(master, 7051)[0], "master.info", Empty(),
                                     MasterInfo, to_uuid="", timeout=client.timeout)
        uuid = info.uuid
    if uuid not in await member_masters(client):
        if missing_ok:
            return uuid
        raise AdminError(f"master {uuid} is not a member of the masters")
    try:
        progress(config_lines(await client.master_call("master.remove_master",
                                                       RemoveMaster(uuid), ConfigState)))
    except RpcError as e:
        if e.code != ErrorCode.NOT_FOUND:
            raise
        probe("tools.master_remove.already_gone")
        progress(f"{uuid} is not a member any more: an earlier try's answer was lost")
    return uuid


async def master_step_down(args, client) -> int:
    """The leader master (by master.info) steps down; a new leader is not waited for."""
    leader = await _leader_info(client)
    addr = next((p.addr for p in leader.masters if p.uuid == leader.uuid), None)
    if addr is None:
        raise AdminError(f"the leader master {leader.uuid} does not list its own address")
    if args.new_leader is not None and args.new_leader not in leader.members:
        raise AdminError(f"{args.new_leader} is not a member of the masters "
                         f"({', '.join(sorted(leader.members))})")
    await client.rpc.call(addr, "consensus.leader_step_down",
                          LeaderStepDown(CATALOG, args.new_leader), Ack, to_uuid=leader.uuid,
                          timeout=client.timeout)
    target = f", handing over to {args.new_leader}" if args.new_leader else ""
    print(f"leader master {leader.uuid} (term {leader.term}) stepped down{target}")
    return 0


async def _ask(client, addr: tuple[str, int], method: str, reply: type):
    try:
        return await client.rpc.call(addr, method, Empty(), reply, to_uuid="", timeout=client.timeout)
    except RpcError as e:
        return e


async def _master_infos(client) -> list[MasterInfo | RpcError]:
    """Each of the client's masters' info, or why it gave none, in the client's order."""
    return await asyncio.gather(*(_ask(client, a, "master.info", MasterInfo)
                                  for a in client.masters))


async def list_masters(args, client) -> int:
    answers = await _master_infos(client)
    print("ADDRESS\tUUID\tROLE\tTERM\tLIVE")
    for (host, port), info in zip(client.masters, answers, strict=True):
        if isinstance(info, RpcError):
            print(f"{host}:{port}\t-\t-\t-\tno ({info.code.name})")
        else:
            print(f"{host}:{port}\t{info.uuid}\t{info.role}\t{info.term}\tyes")
    return 0 if all(not isinstance(a, RpcError) for a in answers) else 1


async def member_masters(client) -> set[str]:
    """The UUIDs of the masters' config as the leader master holds it (its active config),
    waiting up to the client's timeout for a leader to be elected. Its `members`, not the
    masters whose address it knows: a leader just elected may not have learned the address
    of a master just added, and a removal told "not a member" would leave it a voter."""
    return set((await _leader_info(client, wait=client.timeout)).members)


async def _leader_info(client, wait: float = 0.0) -> MasterInfo:
    """The leader master's info (the highest term's, if several say so), waiting up to `wait`
    seconds for one to be elected; AdminError if none answered as leader by then."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        leaders = [a for a in await _master_infos(client)
                   if isinstance(a, MasterInfo) and a.role == "LEADER"]
        if leaders:
            return max(leaders, key=lambda i: i.term)
        if loop.time() >= deadline:
            raise AdminError("no leader master answered")
        await asyncio.sleep(0.5)


async def _tserver_statuses(client) -> list[tuple[Peer, ServerStatus | RpcError]]:
    """Every tablet server the leader master sees live, with its status or why it gave none."""
    servers = (await _leader_info(client)).tservers
    answers = await asyncio.gather(*(_ask(client, p.addr, "ts.status", ServerStatus)
                                     for p in servers))
    return list(zip(servers, answers, strict=True))


async def list_tservers(args, client) -> int:
    statuses = await _tserver_statuses(client)
    print("ADDRESS\tUUID\tLIVE\tTABLETS\tLEADERS")
    for p, st in sorted(statuses, key=lambda x: x[0].uuid):
        if isinstance(st, RpcError):
            print(f"{p.host}:{p.port}\t{p.uuid}\tno ({st.code.name})\t-\t-")
            continue
        running = [t for t in st.tablets if t.state == "RUNNING"]
        leaders = sum(t.role == "LEADER" for t in running)
        print(f"{p.host}:{p.port}\t{p.uuid}\tyes\t{len(running)}\t{leaders}")
    return 0 if all(not isinstance(st, RpcError) for _, st in statuses) else 1


# -- tserver state ---------------------------------------------------------------------------
STATES = {"enter_maintenance": True, "exit_maintenance": False}


def configure_tserver_state(sub: argparse._SubParsersAction) -> None:
    what = ("put a tablet server in maintenance, or take it out (Kudu's `kudu tserver state "
            "enter_maintenance | exit_maintenance`): while it is in maintenance the masters "
            "replace none of its replicas, failed or silent, and place no new replica on it, "
            "so an operator can reboot it or swap its disk without the cluster copying its "
            "tablets elsewhere. Recorded in the catalog: it outlives a change of leader master")
    p = sub.add_parser("state", help="enter or exit maintenance mode", description=what)
    common_options(p)
    p.add_argument("change", choices=sorted(STATES), metavar="enter_maintenance|exit_maintenance",
                   help="enter_maintenance: leave its replicas alone; exit_maintenance: "
                        "the masters replace its failed or silent replicas again")
    p.add_argument("ts_uuid", metavar="TS_UUID", help="the tablet server's UUID (tserver list)")


async def tserver_state(args, client) -> int:
    await client.tserver_state(args.ts_uuid, STATES[args.change])
    print(f"tablet server {args.ts_uuid} "
          + ("entered maintenance" if STATES[args.change] else "left maintenance"))
    return 0


# -- tablet ----------------------------------------------------------------------------------
def configure_tablet(p: argparse.ArgumentParser) -> None:
    common_options(p)
    sub = p.add_subparsers(dest="verb", required=True)
    for name, what in (("add-replica", "add a replica of TABLET on tablet server TS_UUID (copied "
                                       "from the leader, a voter once caught up)"),
                       ("remove-replica", "remove the replica of TABLET on TS_UUID (the master "
                                          "tombstones it)")):
        r = verb(sub, name, what)
        r.add_argument("tablet", metavar="TABLET", help="the tablet's id")
        r.add_argument("ts_uuid", metavar="TS_UUID", help="the tablet server's UUID")
    what = ("move the replica of TABLET from tablet server FROM to TO: add TO, wait until it is "
            "a voter, then remove FROM (Kudu's move_replica, one command)")
    m = verb(sub, "move-replica", what)
    m.add_argument("tablet", metavar="TABLET", help="the tablet's id")
    m.add_argument("source", metavar="FROM", help="UUID of the tablet server to move off")
    m.add_argument("dest", metavar="TO", help="UUID of the tablet server to move to")
    what = ("make TABLET's leader step down; with --new-leader, hand leadership to that voter "
            "(a graceful transfer), else the others elect after a timeout")
    s = verb(sub, "leader-step-down", what)
    s.add_argument("tablet", metavar="TABLET", help="the tablet's id")
    s.add_argument("--new-leader", metavar="TS_UUID", help="the voter to hand leadership to")
    what = ("Kudu's last resort (unsafe_change_config) when a majority of TABLET's voters is "
            "lost for good: each "
            "surviving replica named in --voters appends a config of just those voters as a new "
            "config entry, so they can elect a leader. Writes only the lost replicas held are "
            "lost for good; refused without --force")
    u = verb(sub, "unsafe-change-config", "recover a tablet whose majority is lost (refused "
             "without --force)", description=what)
    u.add_argument("tablet", metavar="TABLET", help="the tablet's id")
    u.add_argument("--voters", required=True, metavar="UUID,UUID",
                   help="the surviving replicas' tablet server UUIDs: the new config")
    u.add_argument("--force", action="store_true", help="do it (without: say what it would do)")


async def _reports(client, tablet: str) -> dict[str, tuple[Peer, TabletReport | None]]:
    """uuid -> (server, its report of `tablet` or None) for every live tablet server."""
    return {p.uuid: (p, next((t for t in st.tablets if t.tablet_id == tablet), None))
            for p, st in await _tserver_statuses(client) if not isinstance(st, RpcError)}


def config_lines(config: ConfigState) -> str:
    members = " ".join(f"{uuid}:{kind}" for uuid, kind in config.members)
    return f"config {config.opid_index}: {members}"


async def tablet(args, client) -> int:
    if args.verb in ("add-replica", "remove-replica"):
        op = args.verb.split("-")[0]
        try:
            print(config_lines(await client.change_replica(args.tablet, op, args.ts_uuid)))
        except RpcError as e:
            if not client.change_already_made(e, op):
                raise
            print(f"{args.ts_uuid} {'is a member' if op == 'add' else 'is not a member'} of "
                  f"{args.tablet} already: nothing to change (an earlier try's answer may have "
                  "been lost)")
        return 0
    if args.verb == "leader-step-down":
        return await _step_down(args, client)
    if args.verb == "unsafe-change-config":
        return await _unsafe_change_config(args, client)
    return await _move(args, client)


async def _unsafe_change_config(args, client) -> int:
    voters = [v for v in args.voters.split(",") if v]
    if not voters or len(set(voters)) != len(voters):
        raise ValueError("--voters must name distinct tablet server UUIDs")
    reports = await _survivors(client, args.tablet, voters, print)
    if not args.force:
        print(f"refused: this rewrites {args.tablet}'s config to {', '.join(voters)} outside "
              "Raft; writes only the lost replicas hold are lost for good. Rerun with --force.",
              file=sys.stderr)
        return 1
    await _force_config(client, args.tablet, voters, reports, print)
    return 0


async def unsafe_change_config(client, tablet: str, voters: list[str], *,
                               progress=lambda _: None) -> list[ConfigState]:
    """Kudu's unsafe_change_config, forced: each of `voters` (tablet server UUIDs, each with
    a running replica of `tablet`) appends a config of just them. Raises AdminError if one
    has no running replica, RpcError as a replica refused (ILLEGAL_STATE while it leads).
    Shared by the CLI (`tablet unsafe-change-config --force`) and the simulator's unsafe
    fault (harness.sim.stack_unsafe)."""
    reports = await _survivors(client, tablet, voters, progress)
    return await _force_config(client, tablet, voters, reports, progress)


async def _survivors(client, tablet: str, voters: list[str], progress
                     ) -> dict[str, tuple[Peer, TabletReport | None]]:
    """The live servers' reports of `tablet`; AdminError unless each of `voters` has a running
    replica. Says what each voter holds."""
    reports = await _reports(client, tablet)
    for uuid in voters:
        peer, rep = reports.get(uuid, (None, None))
        if rep is None or rep.state != "RUNNING":
            raise AdminError(f"{uuid} has no running replica of {tablet} (or does not answer)")
        progress(f"{uuid} at {peer.host}:{peer.port}: term {rep.term}, role {rep.role}, "
                 f"applied {rep.applied}, config {rep.config}")
    return reports


async def _force_config(client, tablet: str, voters: list[str],
                        reports: dict[str, tuple[Peer, TabletReport | None]], progress
                        ) -> list[ConfigState]:
    out = []
    for uuid in voters:
        peer = reports[uuid][0]
        state = await client.rpc.call(peer.addr, "ts.unsafe_change_config",
                                      UnsafeChangeConfig(tablet, voters), ConfigState,
                                      to_uuid=uuid, timeout=client.timeout)
        progress(f"{uuid}: config entry {state.opid_index} appended; voters {', '.join(voters)}")
        out.append(state)
    return out


async def _step_down(args, client) -> int:
    leaders = [(p, r) for p, r in (await _reports(client, args.tablet)).values()
               if r is not None and r.role == "LEADER"]
    if not leaders:
        raise AdminError(f"tablet {args.tablet}: no live server reports leading it")
    peer, rep = max(leaders, key=lambda x: x[1].term)
    await client.rpc.call(peer.addr, "consensus.leader_step_down",
                          LeaderStepDown(args.tablet, args.new_leader), Ack, to_uuid=peer.uuid,
                          timeout=client.timeout)
    target = f", handing over to {args.new_leader}" if args.new_leader else ""
    print(f"tablet {args.tablet}: leader {peer.uuid} (term {rep.term}) stepped down{target}")
    return 0


async def _move(args, client) -> int:
    if args.source == args.dest:
        raise ValueError("FROM and TO are the same server")
    print(config_lines(await client.change_replica(args.tablet, "add", args.dest)))
    print(f"waiting for {args.dest} to be copied and promoted to voter", flush=True)

    async def voter() -> bool:
        mine = (await _reports(client, args.tablet)).get(args.dest, (None, None))[1]
        return (mine is not None and mine.state == "RUNNING"
                and [args.dest, "VOTER"] in mine.committed_config)
    await _wait_for_voter(voter, f"{args.dest} is not a voter of {args.tablet} ({args.source} "
                                 "was not removed)")
    print(config_lines(await client.change_replica(args.tablet, "remove", args.source)))
    return 0


def run_tablet(args) -> int:
    return run_with_client(args, tablet)


def run_tserver_state(args) -> int:
    return run_with_client(args, tserver_state)


def run_list(args, kind: str) -> int:
    return run_with_client(args, list_masters if kind == "master" else list_tservers)


def run_master_change(args) -> int:
    verbs = {"add": add_master, "remove": remove_master, "leader-step-down": master_step_down}
    return run_with_client(args, verbs[args.verb])
