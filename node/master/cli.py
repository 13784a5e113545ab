"""`tessera master`: run a master."""

from node import daemon_cli


def configure(p):
    daemon_cli.configure(p, "master")


run = daemon_cli.run
