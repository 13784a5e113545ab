"""An attacker against a default deployment: `tessera test --leave-db-running` on netns hosts
(the daemons run with --rpc-authentication and --rpc-encryption required, as every deployment
does), then, from this process, every admin and internal RPC as four outsiders: no TLS at all,
TLS with no certificate, a certificate no cluster CA signed (claiming the service role), and
the workloads' own user certificate. Each call is refused and nothing changes: the rows, every
replica's term, config and state, the masters and the tablet servers they know. Then the same
kinds of call from the right identity get past authorization (README "Security")."""

import asyncio
import os
from pathlib import Path

import pytest
from netns_run import tessera

from harness.systems.tessera.deployment import MASTER_PORT, TSERVER_PORT
from node.client import TesseraClient
from node.consensus.messages import AppendEntries, VoteRequest
from node.protocol import (
    Ack,
    AddMaster,
    BeginCopySession,
    ChangeConfig,
    Consensus,
    CopySessionId,
    CreateTablet,
    DeleteTablet,
    Empty,
    FetchCopyChunk,
    LeaderStepDown,
    MasterInfo,
    Peer,
    RemoveMaster,
    ReplicaChange,
    ServerStatus,
    StartTabletCopy,
    TSHeartbeat,
    UnsafeChangeConfig,
)
from node.rpc import ErrorCode, RpcClient, RpcError
from node.security import pki
from node.security.tls import client_context, client_tls
from node.tablet.superblock import HashBucket, OpId

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.netns]
HOSTS = [f"10.77.0.{11 + i}" for i in range(5)]
BIG = 10**12  # a term no cluster reaches


def _attacks(target: ServerStatus, host: str, master: MasterInfo) -> list[tuple[tuple[str, int], str, object, type]]:
    """(address, method, request, reply type): every admin and internal RPC, aimed to hurt."""
    rep = target.tablets[0]
    tid, me = rep.tablet_id, Peer(target.uuid, target.host, target.port)
    evil = Peer("e" * 32, "10.77.0.99", TSERVER_PORT)
    ts, ms = (target.host, target.port), (host, MASTER_PORT)
    vote = VoteRequest(BIG, "e" * 32, target.uuid, BIG, BIG)
    append = AppendEntries(BIG, "e" * 32, target.uuid, 0, 0, (), 0)
    other = next(u for u, _ in rep.config if u != target.uuid)
    return [
        # a forged copy request: a bogus source, a huge caller term, a made-up retained_from
        (ts, "ts.start_tablet_copy", StartTabletCopy(tid, evil, BIG, "RUNNING", OpId(BIG, BIG)),
         Ack),
        (ts, "consensus", Consensus(tid, [vote], [evil]), Ack),
        (ts, "consensus", Consensus(tid, [append], [evil]), Ack),
        (ts, "ts.delete_tablet", DeleteTablet(tid), Ack),
        (ts, "ts.unsafe_change_config", UnsafeChangeConfig(tid, [target.uuid]), Ack),
        (ts, "ts.change_config", ChangeConfig(tid, "remove", Peer(other, "x", 1),
                                              rep.committed_config_index), Ack),
        (ts, "consensus.leader_step_down", LeaderStepDown(tid), Ack),
        (ts, "ts.create_tablet", CreateTablet("evil-tablet", "test", HashBucket(0, 1), [me]), Ack),
        (ts, "ts.begin_copy_session", BeginCopySession(tid, "e" * 32), Ack),
        (ts, "ts.fetch_copy_chunk", FetchCopyChunk("s", 0, 0, 1 << 20), Ack),
        (ts, "ts.end_copy_session", CopySessionId("s"), Ack),
        (ms, "master.ts_heartbeat", TSHeartbeat(ServerStatus(evil.uuid, evil.host, evil.port, [])),
         Ack),
        (ms, "master.remove_master", RemoveMaster(master.uuid), Ack),
        (ms, "master.add_master", AddMaster(evil), Ack),
        (ms, "master.change_replica", ReplicaChange(tid, "remove", other), Ack),
    ]


async def _state(admin: RpcClient) -> dict:
    """What an attack could change: each server's replicas (state, role, term, config), the
    masters' roles and terms and the tablet servers they know. (Not applied indexes: followers
    still apply the rows just written.)"""
    out = {}
    for h in HOSTS:
        st = await admin.call((h, TSERVER_PORT), "ts.status", Empty(), ServerStatus, to_uuid="",
                              timeout=5)
        out[h] = sorted((t.tablet_id, t.state, t.role, t.term, str(t.config)) for t in st.tablets)
    for h in HOSTS[:3]:
        info = await admin.call((h, MASTER_PORT), "master.info", Empty(), MasterInfo, to_uuid="",
                                timeout=5)
        out[f"master {h}"] = (info.uuid, info.role, info.term, sorted(p.uuid for p in info.tservers))
    return out


async def _attack(certs: Path, tmp: Path) -> None:
    admin = RpcClient(tls=client_tls(certs / "admin.pem"))
    service = RpcClient(tls=client_context(pki.CertFiles(certs / "tserver@n1.pem",
                                                        certs / "tserver@n1.key",
                                                        certs / "ca.pem")))
    client = TesseraClient([(h, MASTER_PORT) for h in HOSTS[:3]], timeout=20,
                           tls=client_tls(certs / "client.pem"))
    try:
        rows = {f"sec{i}": i for i in range(20)}
        for k, v in rows.items():
            await client.table("test").write(k, v)
        infos = [await admin.call((h, MASTER_PORT), "master.info", Empty(), MasterInfo,
                                  to_uuid="", timeout=5) for h in HOSTS[:3]]
        host, master = next((h, i) for h, i in zip(HOSTS[:3], infos, strict=True)
                            if i.role == "LEADER")
        # the tablet server leading a tablet: the copy attack on it would have wiped the leader
        statuses = [await admin.call((h, TSERVER_PORT), "ts.status", Empty(), ServerStatus,
                                     to_uuid="", timeout=5) for h in HOSTS]
        target = next(s for s in statuses if any(t.role == "LEADER" for t in s.tablets))
        target = ServerStatus(target.uuid, target.host, target.port,
                              [t for t in target.tablets if t.role == "LEADER"])
        before = await _state(admin)

        rogue = pki.issue(pki.create_ca(tmp / "rogue-ca"), tmp / "rogue", "tserver@n1",
                           pki.SERVICE)  # a certificate no cluster CA signed
        outsiders = {
            "plaintext": RpcClient(connect_timeout=2),
            "tls, no certificate": RpcClient(connect_timeout=2,
                                             tls=client_context(None, ca=certs / "ca.pem")),
            "self-signed service certificate": RpcClient(connect_timeout=2, tls=client_context(
                pki.CertFiles(rogue.cert, rogue.key, certs / "ca.pem"))),
            "user certificate": RpcClient(connect_timeout=2, tls=client_tls(certs / "client.pem")),
        }
        attacks = _attacks(target, host, master)
        refusals = {}
        for who, rpc in outsiders.items():
            for addr, method, req, reply in attacks:
                with pytest.raises(RpcError) as e:
                    await rpc.call(addr, method, req, reply, to_uuid="", timeout=3)
                refusals[(who, method)] = e.value
            await rpc.close()
        for (who, method), e in refusals.items():
            if who in ("plaintext", "user certificate"):  # answered, naming who was refused
                assert e.code == ErrorCode.NOT_AUTHORIZED, (who, method, e)
                name = "client" if who == "user certificate" else "unauthenticated"
                assert name in e.message, (who, method, e)
            else:  # the TLS handshake itself fails: no request is ever read
                assert e.code in (ErrorCode.NETWORK, ErrorCode.NOT_AUTHORIZED), (who, method, e)
                assert not e.maybe_delivered or e.code == ErrorCode.NETWORK
        await asyncio.sleep(2)  # what an accepted attack would have set going, given time
        assert await _state(admin) == before
        for k, v in rows.items():
            assert (await client.table("test").read(k)) == v, k

        # The right identities get past authorization: the service's consensus call is taken
        # (an empty batch), and the operator's admin calls reach the engine, which answers them
        # on their merits (here, refusing a removal it cannot do).
        ack = await service.call((target.host, target.port), "consensus",
                                 Consensus(target.tablets[0].tablet_id, []), Ack, to_uuid="",
                                 timeout=5)
        assert ack.ok
        with pytest.raises(RpcError) as e:
            await admin.call((host, MASTER_PORT), "master.remove_master",
                             RemoveMaster("no-such-master"), Ack, to_uuid="", timeout=5)
        assert e.value.code not in (ErrorCode.NOT_AUTHORIZED, ErrorCode.NETWORK), e.value
        bogus = StartTabletCopy("no-such-tablet", Peer("e" * 32, "10.77.0.99", TSERVER_PORT),
                                BIG, "RUNNING", OpId(BIG, BIG))
        for rpc, method, req in ((service, "ts.start_tablet_copy", bogus),
                                 (admin, "ts.delete_tablet", DeleteTablet("no-such-tablet"))):
            try:  # the engine's own answer: the copy is refused (no such replica), the
                await rpc.call((target.host, target.port), method, req, Ack, to_uuid="",
                               timeout=5)  # delete of nothing is done already
            except RpcError as e:
                assert e.code not in (ErrorCode.NOT_AUTHORIZED, ErrorCode.NETWORK), (method, e)
        await admin.call((target.host, target.port), "consensus.leader_step_down",  # Ack: it did
                         LeaderStepDown(target.tablets[0].tablet_id), Ack, to_uuid="", timeout=5)
    finally:
        await client.close()
        await admin.close()
        await service.close()


def test_a_default_deployment_refuses_outsiders_every_admin_and_internal_rpc(no_netns_cluster, env, tmp_path):
    """--leave-db-running leaves the daemons up for the attack: the cluster goes down after it."""
    out = tessera("test", "--workload", "register", "--time-limit", "5", "--store",
                  str(tmp_path / "store"), "--leave-db-running", env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    run_dir = Path(out.stdout.strip().splitlines()[-1])
    assert os.path.exists(run_dir / "tls" / "ca" / "ca.key")  # the run keeps its CA
    asyncio.run(_attack(run_dir / "tls" / "certs", tmp_path))
