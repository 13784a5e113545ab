"""`tessera tserver`: run a tablet server."""

from node import daemon_cli


def configure(p):
    daemon_cli.configure(p, "tserver")


run = daemon_cli.run
