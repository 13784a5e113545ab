"""Cluster providers. Each gives the same thing: hosts reachable over SSH as root.

`netns` builds them on this machine; `vagrant` and `hosts` describe machines that exist elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from node.errors import TesseraError


class ClusterError(TesseraError):
    """A cluster could not be made, reached or removed; the message says which host and why."""


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: str = ""
    host_key: str = ""  # "<type> <base64>" when known: the control layer verifies it strictly
