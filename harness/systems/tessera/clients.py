"""Tessera's clients for a run: the test table made writable before the clock starts, and the
workload's clients over one TesseraClient. The chaos runs (harness.systems.tessera.deployment.TesseraDB.open_clients) and
the whole-stack simulator (harness.sim.stack) both open their clients here."""

from __future__ import annotations

import asyncio
from collections import Counter


def workload_clients(client, table: str, names: dict, binds: list[str] | None, workload):
    """(clients(thread) for harness.runner.run, an async close for after it). Node-bound
    (`binds`): thread t talks to binds[t mod n]; else any replica. How the threads' writes reach
    the client is `workload.writes` (workloads.base.WRITE_MODES): `own`, a handle each; `shared`,
    the threads of one bind share one handle's client sessions, so the writes they issue in one
    loop turn leave as one ts.write_batch, each thread keeping a handle of its own, so each op's
    `node` is still the replica that answered it; `session-background` and `session-manual`,
    the threads of one bind share one batching session (AUTO_FLUSH_BACKGROUND or MANUAL_FLUSH:
    node.client.Table._op flushes after each apply), so their concurrent writes go out
    together. In every mode each op stays one op of the history (the runner records it)."""
    from node.client.session import Sessions

    options = workload.session_options()  # the session modes'
    sessions: dict = {}  # bind -> Session, with a session mode
    shared: dict = {}  # bind -> Sessions, with writes=shared

    def clients(thread: int):
        bind = binds[thread % len(binds)] if binds else None
        if options is None:
            if workload.writes == "shared":
                return client.table(table, names, bind=bind,
                                    sessions=shared.setdefault(bind, Sessions()))
            return client.table(table, names, bind=bind)
        if bind not in sessions:
            sessions[bind] = client.new_session(table, options, bind=bind)
        return client.table(table, names, bind=bind, session=sessions[bind])

    async def close() -> dict | None:
        """Flush what is still buffered (ops whose callers gave up are dropped, never sent);
        with a session mode how many batches the sessions sent and why they were cut, with
        `shared` how many requests carried the writes (None with `own`)."""
        await asyncio.gather(*(s.close() for s in sessions.values()), return_exceptions=True)
        if shared:
            sent = sum((s.sent for s in shared.values()), Counter())
            requests, writes = sum(sent.values()), sum(n * k for n, k in sent.items())
            return {"coalesced": {
                "handles_sharing": len(shared), "requests": requests, "writes": writes,
                "mean_writes_per_request": round(writes / requests, 2) if requests else 0.0,
                "requests_with_several": sum(k for n, k in sent.items() if n > 1)}}
        if not sessions:
            return None
        reasons = sum((s.flush_reasons for s in sessions.values()), Counter())
        batches, ops = sum(reasons.values()), sum(s.ops_cut for s in sessions.values())
        return {"mode": workload.writes, "sessions": len(sessions), "batches": batches, "ops": ops,
                "mean_ops_per_batch": round(ops / batches, 2) if batches else 0.0,
                "cut_by": dict(reasons)}

    return clients, close


async def accept_test_table(client, tablets: int, replication_factor: int,
                            timeout: float = 60.0):
    """Create the table `test` and wait until every tablet has a leader that accepts writes, so
    the clock (and the first fault) starts on a working cluster. Probe keys live outside every
    workload's keys. Returns the table's locations. Event-loop time: the simulator runs it too."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            await client.create_table("test", num_tablets=tablets,
                                      replication_factor=replication_factor)
            break
        except Exception as e:
            if "exists" in str(e):
                break
            if loop.time() > deadline:
                raise RuntimeError(f"cluster never accepted the test table: {e}") from e
            await asyncio.sleep(1)
    table = client.table("test")
    locs = await client.locations("test", refresh=True)
    probes = {}
    for i in range(10_000):
        key = f"_ready{i}"
        bucket = next(t.tablet_id for t in locs.tablets if t.partition.contains(key))
        probes.setdefault(bucket, key)
        if len(probes) == len(locs.tablets):
            break
    for key in probes.values():
        while True:
            try:
                await table.write(key, 1)
                break
            except Exception as e:
                if loop.time() > deadline:
                    raise RuntimeError(f"test table never became writable: {e}") from e
                await asyncio.sleep(0.5)
    return locs
