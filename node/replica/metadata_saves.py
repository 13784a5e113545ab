"""A replica's consensus-metadata saves, one at a time and in order: a new term or vote is
awaited by the Ready that holds it (no message may report a vote a crash could forget), but a
newly committed config alone is saved behind its Ready, as Kudu's leader goes on heartbeating
from its peer threads while its consensus metadata flushes. Awaited, a leader whose disk took
seconds to sync sent its followers nothing through the save, and they elected another
(harness.sim.stack_silence found it: a membership change committed on a leader with slow syncs).

Nothing waits for a committed config to be on disk but a snapshot: a snapshot carries no config,
so one past a committed config the metadata does not hold yet could outlive a crash that forgets
the config (Replica._maybe_snapshot reads `saved_config_index`). A crash before the save ends
restarts with the config entry replayed from the WAL as pending, as any config entry above the
committed one; the entry is durable here before its commit is handed over
(RaftCore._config_to_persist).

A config saved behind may run after a later Ready's awaited save: its task takes its turn only
once it first runs, and the driver's next Ready (a new term, with a newer committed config) can
take the turn first. So a save never puts a committed config on disk over a newer one. Before,
the older overwrote the newer: the replica believed the newer saved, let a snapshot past its
entry, and a restart ran the older membership (a leadership transfer's vote arriving while a
follower wrote a config's commit)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from node.consensus import HardState, RaftConfig, encode_config
from node.probes import probe
from node.tablet.cmeta import ConsensusMetadata

InThread = Callable[..., Coroutine[Any, Any, Any]]


class MetadataSaves:
    def __init__(self, cmeta: ConsensusMetadata, saved_config_index: int, in_thread: InThread,
                 spawn: Callable[[Coroutine[Any, Any, Any], str], Any],
                 failed: Callable[[BaseException], None], committed: Callable[[RaftConfig], None]):
        """`in_thread(fn, *args)`: the replica's tracked thread; `spawn(coro, name)`: a task its
        stop() cancels; `failed(err)`: fail the replica from its driver; `committed(config)`:
        what the replica does once a committed config is on disk (it logs it)."""
        self.cmeta = cmeta
        self.saved_config_index = saved_config_index  # of the committed config on disk
        self._in_thread, self._spawn, self._failed = in_thread, spawn, failed
        self._committed = committed
        self._on_disk = saved_config_index  # the committed config's index in the file
        self._turn = asyncio.Lock()  # one save at a time

    async def save(self, hs: HardState | None, config: RaftConfig | None) -> None:
        """Save a new term or vote (and a committed config with it), after any save before it."""
        async with self._turn:
            await self._in_thread(self._write, hs, config)
        if config is not None:
            self._saved(config)

    def save_behind(self, config: RaftConfig) -> None:
        """Save a newly committed config without the caller waiting; a failed save fails the
        replica."""
        async def run() -> None:
            try:
                await self.save(None, config)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a failed fsync: the replica fails, as on its own path
                self._failed(e)

        self._spawn(run(), "metadata-save")

    def _write(self, hs: HardState | None, config: RaftConfig | None) -> None:
        """In the save's turn: `_on_disk` is read and set by one save at a time."""
        if config is not None and config.opid_index < self._on_disk:
            probe("replica.cmeta.older_config_not_saved")
            config = None
            if hs is None:
                return
        self.cmeta.update(None if hs is None else (hs.term, hs.voted_for),
                          None if config is None else encode_config(config))
        if config is not None:
            self._on_disk = config.opid_index

    def _saved(self, config: RaftConfig) -> None:
        if config.opid_index < self.saved_config_index:
            return  # a newer one is on disk, and was logged
        self.saved_config_index = config.opid_index
        self._committed(config)

