"""Which identity the session intruder (TesseraDB.intrude_sessions) speaks as, against a
recording fake RPC client (unit test; the real attack runs in test_session_intruder_e2e): the
flood opens sessions as `flooder`, the poison and close write as `intruder`, which never opens
one. When one user did both, an OpenSession whose answer was lost (its call timed out while the
tablet could not commit, then it committed) left a session of the intruder's own that it did
not know of; its poison then wrote into it, and the logs checker called that an intrusion (a
matrix's set/all cell, invalid on the engine as it is)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import node.rpc
from harness.cluster import Host
from harness.systems.tessera.deployment import TesseraDB
from node.security import pki
from node.tablet.ops import OpenSession, Rejection

TABLET = "t-0000"


class Recorder:
    """RpcClient's place: each call recorded with the identity the client was made for; an
    OpenSession opens session 7, any other write is answered NO_SESSION per op."""

    calls: list[tuple[str, str, object]] = []

    def __init__(self, connect_timeout=None, tls=None):
        self.user = tls

    async def call(self, addr, method, req, reply, to_uuid="", timeout=None):
        Recorder.calls.append((self.user, method, req))
        if method == "ts.write" and isinstance(req.op, OpenSession):
            return SimpleNamespace(result=SimpleNamespace(ok=True, value=7, error=None))
        if method == "ts.write_batch":
            no = SimpleNamespace(ok=False, error=Rejection.NO_SESSION, detail="no session")
            return SimpleNamespace(results=[no] * len(req.ops))
        if method == "ts.write":
            return SimpleNamespace(result=SimpleNamespace(ok=False, error=Rejection.NO_SESSION))
        raise node.rpc.RpcError(node.rpc.ErrorCode.NOT_AUTHORIZED, "no")

    async def close(self):
        pass


@pytest.fixture
def db(monkeypatch):
    monkeypatch.setattr(node.rpc, "RpcClient", Recorder)
    Recorder.calls = []
    d = TesseraDB(hosts=[Host("n1", "10.77.0.11")], wheels=[], remotes={})
    monkeypatch.setattr(d, "tls", lambda name="admin": name)
    monkeypatch.setattr(d, "tablet_leaders", lambda: {TABLET: "n1"})
    return d


def test_the_flood_opens_sessions_as_another_user_than_the_poison_writes_as(db):
    flood = db.intrude_sessions("flood", [TABLET], 5)
    assert flood["own_sessions"] == 5
    db.intrude_sessions("poison", [TABLET], 8)
    db.intrude_sessions("close", [TABLET], 8)
    opens = [user for user, method, req in Recorder.calls
             if method == "ts.write" and isinstance(req.op, OpenSession)]
    assert opens == [pki.FLOODER] * 5
    into_sessions = [(user, req.session) for user, method, req in Recorder.calls
                     if method in ("ts.write", "ts.write_batch") and getattr(req, "session", 0)]
    # every session id is tried, the flood's own too (the flooder's are another's to the
    # intruder), and only as the intruder, which opened none of them
    assert sorted({s for _, s in into_sessions}) == list(range(1, 9))
    assert {user for user, _ in into_sessions} == {pki.INTRUDER}
