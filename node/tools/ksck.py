"""`tessera ksck`: Kudu's cluster consistency check. Lists every tablet of every table with its
replicas' health as the leader master places them and as the tablet servers report them, and
with --checksum-scan compares the replicas' rows (the same rules as the harness's convergence
check: reports.checkers.convergence).

Exit 0 healthy, 1 problems found, 2 could not decide (no leader master, or the replicas never
reached the same applied index in time).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass

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
    check_convergence runs unchanged against any cluster whose addresses are known."""

    hosts: list[Endpoint]
    timeout: float = 5.0

    def ask_each(self, hosts: list[Endpoint], daemon: str, method: str, reply: type,
                 request: object = None) -> dict:
        return asyncio.run(_ask_each(hosts, method, Empty() if request is None else request,
                                     reply, self.timeout))


async def _ask_each(hosts: list[Endpoint], method: str, request: object, reply: type,
                    timeout: float) -> dict:
    rpc = RpcClient(connect_timeout=1.0)
    try:
        answers = await asyncio.gather(*(
            rpc.call((h.address, h.port), method, request, reply, to_uuid="", timeout=timeout)
            for h in hosts), return_exceptions=True)
    finally:
        await rpc.close()
    return {h.name: a for h, a in zip(hosts, answers, strict=True) if not isinstance(a, BaseException)}


def _name(p: Peer) -> str:
    return f"{p.host}:{p.port}"


async def survey(masters: list[tuple[str, int]], timeout: float = 5.0) -> dict:
    """Tables, tablets and replica health: {"leader_master", "tablets": [...], "problems": [...],
    "tservers": [Peer]}; "leader_master" is None when no master says it leads."""
    rpc = RpcClient(connect_timeout=1.0)
    try:
        infos = await asyncio.gather(*(rpc.call(a, "master.info", Empty(), MasterInfo, to_uuid="",
                                                timeout=timeout) for a in masters),
                                     return_exceptions=True)
        leader = next(((a, i) for a, i in zip(masters, infos, strict=True)
                       if isinstance(i, MasterInfo) and i.role == "LEADER"), None)
        if leader is None:
            return {"leader_master": None, "tablets": [], "tservers": [],
                    "problems": ["no master answered as the leader"]}
        addr, info = leader
        try:
            names = (await rpc.call(addr, "master.list_tables", Empty(), TableList, to_uuid="",
                                    timeout=timeout)).tables
            locations = [await rpc.call(addr, "master.table_locations", TableName(n),
                                        TableLocations, to_uuid="", timeout=timeout)
                         for n in sorted(names)]
        except RpcError as e:  # e.g. leadership moved between the calls
            return {"leader_master": None, "tablets": [], "tservers": [],
                    "problems": [f"leader master {addr[0]}:{addr[1]}: {e}"]}
    finally:
        await rpc.close()
    peers = {p.uuid: p for p in info.tservers}
    for loc in locations:
        peers.update({p.uuid: p for t in loc.tablets for p in t.replicas})
    eps = [Endpoint(_name(p), p.host, p.port) for p in peers.values()]
    statuses = await _ask_each(eps, "ts.status", Empty(), ServerStatus, timeout)
    tablets, problems = [], []
    for loc in locations:
        for t in loc.tablets:
            replicas = {}
            for p in t.replicas:
                st = statuses.get(_name(p))
                rep = next((r for r in st.tablets if r.tablet_id == t.tablet_id), None) if st else None
                replicas[_name(p)] = (
                    {"uuid": p.uuid, "state": "UNREACHABLE"} if st is None else
                    {"uuid": p.uuid, "state": "MISSING"} if rep is None else
                    {"uuid": p.uuid, "state": rep.state, "role": rep.role, "term": rep.term,
                     "applied": rep.applied, **({"error": rep.error} if rep.error else {})})
            bad = [f"{h} {r['state']}" for h, r in replicas.items() if r["state"] != "RUNNING"]
            if not any(r.get("role") == "LEADER" for r in replicas.values()):
                bad.append("no replica is the leader")
            problems += [f"tablet {t.tablet_id} of {loc.name}: {b}" for b in bad]
            tablets.append({"table": loc.name, "tablet": t.tablet_id, "healthy": not bad,
                            "replicas": replicas})
    return {"leader_master": f"{addr[0]}:{addr[1]}", "tablets": tablets, "problems": problems,
            "tservers": list(peers.values())}


def configure(p) -> None:
    p.add_argument("--masters", required=True, help="comma-separated master HOST:PORT list")
    p.add_argument("--checksum-scan", action="store_true",
                   help="also compare the rows of each tablet's replicas (CRC32C per replica)")
    p.add_argument("--checksum-timeout", type=float, default=30.0, metavar="S",
                   help="how long replicas may take to reach the same applied index")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args) -> int:
    from harness.convergence import check_convergence
    from node.client import parse_addrs

    report = asyncio.run(survey(parse_addrs(args.masters, 7051)))
    tservers = report.pop("tservers")
    if args.checksum_scan and report["leader_master"] is not None:
        servers = Servers([Endpoint(_name(p), p.host, p.port) for p in tservers])
        report["checksum"] = check_convergence(servers, args.checksum_timeout)
    checksum = report.get("checksum", {}).get("verdict", "valid")
    code = (2 if report["leader_master"] is None else
            1 if report["problems"] or checksum == "invalid" else 2 if checksum == "unknown" else 0)
    report["verdict"] = {0: "healthy", 1: "problems found", 2: "could not decide"}[code]
    print(json.dumps(report, indent=1) if args.json else _text(report), file=sys.stdout)
    return code


def _text(report: dict) -> str:
    lines = [f"leader master: {report['leader_master'] or 'none'}"]
    for t in report["tablets"]:
        lines.append(f"{t['table']} tablet {t['tablet']}: {'OK' if t['healthy'] else 'UNHEALTHY'}")
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
        lines += [f"  DIVERGENT: {e['explanation']}" for e in c["errors"]]
    lines.append(report["verdict"])
    return "\n".join(lines)
