"""The `hosts` provider: existing machines listed in a TOML file.

    [[host]]
    name = "n1"            # optional, defaults to n1, n2, ... in file order
    address = "192.0.2.11"
    port = 22              # optional
    user = "root"          # optional
    key = "~/.ssh/id_ed25519"
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from harness.cluster import ClusterError, Host


def load(path: Path) -> list[Host]:
    try:
        doc = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ClusterError(f"cannot read hosts file {path}: {e}") from None
    entries = doc.get("host")
    if not isinstance(entries, list) or not entries:
        raise ClusterError(f"{path}: no [[host]] entries")
    hosts = []
    for i, e in enumerate(entries, 1):
        if not isinstance(e, dict) or "address" not in e:
            raise ClusterError(f"{path}: host #{i} has no address")
        unknown = set(e) - {"name", "address", "port", "user", "key", "host_key"}
        if unknown:
            raise ClusterError(f"{path}: host #{i}: unknown keys {sorted(unknown)}")
        key = str(Path(e["key"]).expanduser()) if e.get("key") else ""
        if key and not Path(key).exists():
            raise ClusterError(f"{path}: host #{i}: key file {key} does not exist")
        hosts.append(Host(e.get("name", f"n{i}"), e["address"], int(e.get("port", 22)),
                          e.get("user", "root"), key, e.get("host_key", "")))
    return hosts
