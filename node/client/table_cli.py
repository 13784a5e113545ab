"""`tessera table`."""
from node.client.cli import configure_table as configure
from node.client.cli import run_table as run

__all__ = ["configure", "run"]
