"""`tessera tablet`."""
from node.tools.admin import configure_tablet as configure
from node.tools.admin import run_tablet as run

__all__ = ["configure", "run"]
