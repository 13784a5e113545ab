"""Cluster providers. Each gives the same thing: hosts reachable over SSH as root.

`netns` builds them on this machine; `vagrant` and `hosts` describe machines that exist elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass


class ClusterError(Exception):
    """A cluster could not be made, reached or removed; the message says which host and why. The
    harness's own error, not the engine's: nemeses that raise it know nothing of any system."""


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: str = ""
    host_key: str = ""  # "<type> <base64>" when known: the control layer verifies it strictly
