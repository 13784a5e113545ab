"""`tessera cluster ksck`: Kudu's cluster consistency check. Checks that every master answers and
that they agree on the leader and on their config; lists every tablet of every table with its
replicas' health as the leader master places them and as the tablet servers report them,
checks each leader's committed config against the catalog, sorts tablets into healthy,
under-replicated and unavailable, and with --checksum-scan compares the replicas' rows (the
same rules as `tessera test`'s convergence check).

Exit 0 healthy, 1 problems found, 2 could not decide (no leader master, or the replicas never
reached the same applied index in time), 254 bad arguments (node.exit_codes).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass

from node.client.cli import client_tls, common_options, master_addrs
from node.exit_codes import BAD_ARGS, EXIT
from node.protocol import (
    Empty,
    MasterInfo,
    Peer,
    ServerStatus,
    TableList,
    TableLocations,
    TableName,
)
from node.rpc import RpcClient, RpcError


@dataclass(frozen=True)
class Endpoint:
    name: str
    address: str
    port: int


@dataclass
class Servers:
    """Tablet servers by address, with the DB adapter's `ask_each`, so the harness's
    check_convergence (node.tools.convergence) runs unchanged against any cluster whose addresses are known."""

    hosts: list[Endpoint]
    timeout: float = 5.0
    tls: object = None  # an ssl.SSLContext to connect with (node.security.tls.client_tls)

    def ask_each(self, hosts: list[Endpoint], daemon: str, method: str, reply: type,
                 request: object = None) -> dict:
        return asyncio.run(_ask_each(hosts, method, Empty() if request is None else request,
                                     reply, self.timeout, self.tls))


async def _ask_each(hosts: list[Endpoint], method: str, request: object, reply: type,
                    timeout: float, tls=None) -> dict:
    rpc = RpcClient(connect_timeout=1.0, tls=tls)
    try:
        answers = await asyncio.gather(*(
            rpc.call((h.address, h.port), method, request, reply, to_uuid="", timeout=timeout)
            for h in hosts), return_exceptions=True)
    finally:
        await rpc.close()
    return {h.name: a for h, a in zip(hosts, answers, strict=True) if not isinstance(a, BaseException)}


def _name(p: Peer) -> str:
    return f"{p.host}:{p.port}"


async def survey(masters: list[tuple[str, int]], timeout: float = 5.0, tls=None) -> dict:
    """Masters, tables, tablets and replica health: {"masters": [...], "leader_master",
    "tablets": [...], "summary", "problems": [...], "tservers": [Peer]}; "leader_master" is None
    when no master says it leads."""
    rpc = RpcClient(connect_timeout=1.0, tls=tls)
    problems: list[str] = []
    try:
        infos = await asyncio.gather(*(rpc.call(a, "master.info", Empty(), MasterInfo, to_uuid="",
                                                timeout=timeout) for a in masters),
                                     return_exceptions=True)
        master_rows = _masters(masters, infos, problems)
        leader = max(((a, i) for a, i in zip(masters, infos, strict=True)
                      if isinstance(i, MasterInfo) and i.role == "LEADER"),
                     key=lambda x: x[1].term, default=None)
        if leader is None:
            return {"masters": master_rows, "leader_master": None, "tablets": [], "tservers": [],
                    "problems": problems + ["no master answered as the leader"]}
        addr, info = leader
        try:
            names = (await rpc.call(addr, "master.list_tables", Empty(), TableList, to_uuid="",
                                    timeout=timeout)).tables
            locations = [await rpc.call(addr, "master.table_locations", TableName(n),
                                        TableLocations, to_uuid="", timeout=timeout)
                         for n in sorted(names)]
        except RpcError as e:  # e.g. leadership moved between the calls
            return {"masters": master_rows, "leader_master": None, "tablets": [], "tservers": [],
                    "problems": problems + [f"leader master {addr[0]}:{addr[1]}: {e}"]}
    finally:
        await rpc.close()
    peers = {p.uuid: p for p in info.tservers}
    for loc in locations:
        peers.update({p.uuid: p for t in loc.tablets for p in t.replicas})
    eps = [Endpoint(_name(p), p.host, p.port) for p in peers.values()]
    statuses = await _ask_each(eps, "ts.status", Empty(), ServerStatus, timeout, tls)
    tablets = [_tablet(loc.name, t, statuses, problems) for loc in locations for t in loc.tablets]
    summary = {s: sum(t["status"] == s for t in tablets)
               for s in ("HEALTHY", "UNDER_REPLICATED", "UNAVAILABLE")}
    return {"masters": master_rows, "leader_master": f"{addr[0]}:{addr[1]}", "tablets": tablets,
            "summary": summary, "problems": problems, "tservers": list(peers.values())}


def _masters(addrs: list[tuple[str, int]], infos: list, problems: list[str]) -> list[dict]:
    """One row per master; problems when one does not answer or they disagree on the leader or
    on the masters' config."""
    rows = []
    for (host, port), i in zip(addrs, infos, strict=True):
        if isinstance(i, MasterInfo):
            rows.append({"address": f"{host}:{port}", "uuid": i.uuid, "role": i.role,
                         "term": i.term, "leader": i.leader,
                         "config": sorted(i.members)})
        else:
            rows.append({"address": f"{host}:{port}", "role": "UNREACHABLE", "error": str(i)})
            problems.append(f"master {host}:{port} does not answer: {i}")
    answered = [r for r in rows if "uuid" in r]
    leaders = sorted({r["leader"] for r in answered if r["leader"]})
    if len(leaders) > 1 or (answered and not leaders):
        problems.append(f"masters disagree on the leader: {leaders or 'none known'}")
    if len({tuple(r["config"]) for r in answered}) > 1:
        problems.append("masters disagree on the masters' config: "
                        + "; ".join(f"{r['address']} {r['config']}" for r in answered))
    return rows


def _tablet(table: str, t, statuses: dict, problems: list[str]) -> dict:
    """One tablet's replicas as their servers report them, checked against the catalog: HEALTHY,
    UNDER_REPLICATED (a majority runs, not every replica) or UNAVAILABLE (no leader, or no
    running majority)."""
    replicas, reports = {}, []
    for p in t.replicas:
        st = statuses.get(_name(p))
        rep = next((r for r in st.tablets if r.tablet_id == t.tablet_id), None) if st else None
        replicas[_name(p)] = (
            {"uuid": p.uuid, "state": "UNREACHABLE"} if st is None else
            {"uuid": p.uuid, "state": "MISSING"} if rep is None else
            {"uuid": p.uuid, "state": rep.state, "role": rep.role, "term": rep.term,
             "applied": rep.applied, **({"error": rep.error} if rep.error else {})})
        if rep is not None:
            reports.append(rep)
    bad = [f"replica {h} ({r['uuid'][:8]}) {r['state']}" for h, r in replicas.items()
           if r["state"] != "RUNNING"]
    leader = max((r for r in reports if r.role == "LEADER"), key=lambda r: r.term, default=None)
    if leader is None:
        bad.append("no replica is the leader")
    else:
        members = sorted(u for u, _ in leader.committed_config)
        catalog = sorted(p.uuid for p in t.replicas)
        if members != catalog:
            bad.append(f"the leader's committed config {members} does not match the catalog's "
                       f"replicas {catalog}")
    running = sum(r["state"] == "RUNNING" for r in replicas.values())
    status = ("UNAVAILABLE" if leader is None or running <= len(replicas) // 2 else
              "UNDER_REPLICATED" if running < len(replicas) else "HEALTHY")
    problems += [f"tablet {t.tablet_id} of {table} ({status}): {b}" for b in bad]
    return {"table": table, "tablet": t.tablet_id, "status": status, "healthy": not bad,
            "replicas": replicas}


def configure(p) -> None:
    common_options(p)
    p.add_argument("--checksum-scan", action="store_true",
                   help="also compare the rows of each tablet's replicas (CRC32C per replica)")
    p.add_argument("--checksum-timeout", type=float, default=30.0, metavar="S",
                   help="how long replicas may take to reach the same applied index")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    from node.errors import TesseraError
    from node.tools.convergence import check_convergence

    try:
        masters = master_addrs(args.masters)
        tls = client_tls(args)
    except (TesseraError, ValueError) as e:
        print(f"tessera cluster ksck: {e}", file=sys.stderr)
        return BAD_ARGS
    report = asyncio.run(survey(masters, args.timeout, tls))
    tservers = report.pop("tservers")
    if args.checksum_scan and report["leader_master"] is not None:
        servers = Servers([Endpoint(_name(p), p.host, p.port) for p in tservers], tls=tls)
        report["checksum"] = check_convergence(servers, args.checksum_timeout)
    checksum = report.get("checksum", {}).get("verdict", "valid")
    code = (EXIT["unknown"] if report["leader_master"] is None else
            EXIT["invalid"] if report["problems"] or checksum == "invalid" else
            EXIT["unknown"] if checksum == "unknown" else EXIT["valid"])
    report["verdict"] = {EXIT["valid"]: "healthy", EXIT["invalid"]: "problems found",
                         EXIT["unknown"]: "could not decide"}[code]
    print(json.dumps(report, indent=1) if args.json else _text(report), file=sys.stdout)
    return code


def _text(report: dict) -> str:
    lines = ["masters:"]
    for m in report["masters"]:
        lines.append(f"  {m['address']} {m['role']}" + (f" {m['uuid'][:8]} term {m['term']}"
                                                       if "uuid" in m else f" {m['error']}"))
    lines.append(f"leader master: {report['leader_master'] or 'none'}")
    for t in report["tablets"]:
        lines.append(f"{t['table']} tablet {t['tablet']}: {t['status']}"
                     + ("" if t["healthy"] else " (see problems)"))
        for host, r in t["replicas"].items():
            extra = (f" {r['role']} term {r['term']} applied {r['applied']}" if "role" in r else "")
            lines.append(f"  {host} {r['uuid'][:8]} {r['state']}{extra}{' ' + r['error'] if 'error' in r else ''}")
    lines += [f"problem: {p}" for p in report["problems"]]
    if "checksum" in report:
        c = report["checksum"]
        lines.append(f"checksum scan: {c['verdict']}{': ' + c['reason'] if 'reason' in c else ''}")
        for t in c["tablets"]:
            sums = ", ".join(f"{h}={r['checksum']}" for h, r in t["replicas"].items() if r["compared"])
            lines.append(f"  tablet {t['tablet']} at index {t['applied_index']}: {sums}")
        lines += [f"  {'DIVERGENT' if e['type'] == 'divergent-replicas' else 'NO LEADER'}: "
                  f"{e['explanation']}" for e in c["errors"]]
        lines += [f"  UNAVAILABLE: {n['explanation']}" for n in c.get("notes", [])]
    if "summary" in report:
        n = report["summary"]
        lines.append(f"tablets: {n['HEALTHY']} healthy, {n['UNDER_REPLICATED']} under-replicated, "
                     f"{n['UNAVAILABLE']} unavailable")
    lines.append(report["verdict"])
    return "\n".join(lines)
