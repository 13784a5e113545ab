"""A server's background loops (copies, heartbeats, reconciling) run until it stops
(node.server.base.ServerBase._keep). One that ends anyway is kept in `loop_ended`, and the
daemon exits on it with why, rather than serve on up but deaf: before, an OSError saving the
peer book ended the heartbeater with nothing but a log line to show it. A real tablet server
on loopback, in this process."""

from __future__ import annotations

import asyncio

from node.server import daemon_cli
from node.server.base import ServerOptions
from node.tserver.copy_trigger import CopyTrigger
from node.tserver.server import TabletServer

SERVED_S = 60  # real seconds: the copy trigger's first round comes after 1 s


def _options(tmp_path) -> ServerOptions:
    return ServerOptions(data_dir=tmp_path, rpc_port=0, http_port=0)


def test_a_daemon_whose_background_loop_ends_exits_saying_which(tmp_path, monkeypatch, capsys):
    def broken_round(self):
        raise RuntimeError("a round's bug")
    monkeypatch.setattr(CopyTrigger, "round", broken_round)
    rc = asyncio.run(asyncio.wait_for(daemon_cli._serve(_options(tmp_path), "tserver"), SERVED_S))
    assert rc == 1
    err = capsys.readouterr().err
    assert "exiting: copy-trigger loop ended: RuntimeError(\"a round's bug\")" in err


def test_a_stopped_server_has_no_loop_ended(tmp_path):
    async def main():
        server = TabletServer(_options(tmp_path))
        await server.start()
        await asyncio.sleep(1.5)  # a copy-trigger round runs
        await server.stop()
        return server.loop_ended, server.loop_failed.is_set()

    assert asyncio.run(main()) == (None, False)


def test_an_initial_master_copied_the_catalog_while_it_waited_goes_on_to_reconcile(
        tmp_path, monkeypatch):
    """While an initial master waited for the others, those already up formed the catalog with
    it in it and copied it there: its own create is refused (ALREADY_EXISTS). A clean clone's
    chaos run saw it: before, that error ended the master's reconcile loop unseen (a master
    that, once it led, would never reconcile); with the loop kept, the daemon exited on it. Now
    it takes the copied catalog and reconciles."""
    from node import probes
    from node.master.server import Master
    from node.rpc import ErrorCode, RpcError
    from node.tserver.tablet_manager import TabletManager

    real_create = TabletManager.create

    async def copied_meanwhile(self, tablet_id, *args, **kwargs):
        if tablet_id == "sys.catalog":
            raise RpcError(ErrorCode.ALREADY_EXISTS, "tablet sys.catalog is copying here")
        return await real_create(self, tablet_id, *args, **kwargs)
    monkeypatch.setattr(TabletManager, "create", copied_meanwhile)

    async def main():
        server = Master(ServerOptions(data_dir=tmp_path, rpc_port=0, http_port=0))
        await server.start()
        try:
            await asyncio.sleep(1.5)  # the loop's first round has run
            return server.loop_ended, server._tasks[-1].done()
        finally:
            await server.stop()

    with probes.expect("master.bootstrap.catalog_arrived_by_copy"):
        assert asyncio.run(main()) == (None, False)
