"""A LocalCluster for a test module: one master and three tablet servers, real processes on
loopback. A module-scoped fixture does `yield from loopback_cluster(tmp_path_factory, "name")`."""

from __future__ import annotations

import signal

from node.tools.local_cluster import LocalCluster


def loopback_cluster(tmp_path_factory, name: str):
    c = LocalCluster(tmp_path_factory.mktemp(name) / "lc", masters=1, tservers=3)
    c.up(timeout=60)
    try:
        yield c
    finally:
        for daemon in c.daemons:  # a test may have paused one: down() must find it answering
            c.signal(daemon, signal.SIGCONT)
        c.down()
