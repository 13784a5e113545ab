"""`tessera kv`."""
from node.client.cli import configure_kv as configure
from node.client.cli import run_kv as run

__all__ = ["configure", "run"]
