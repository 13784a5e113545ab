"""The `hosts` provider: existing machines listed in a TOML file, or inline as Jepsen's CLI
takes them (`--nodes n1,n2 --username root --ssh-private-key KEY`, `from_nodes`).

    [[host]]
    name = "n1"            # optional, defaults to n1, n2, ... in file order
    address = "192.0.2.11"
    port = 22              # optional
    user = "root"          # optional
    key = "~/.ssh/id_ed25519"
"""

from __future__ import annotations

import socket
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


def from_nodes(nodes: list[str], user: str = "root", key: str | None = None) -> list[Host]:
    """Hosts n1..nN from `HOST[:PORT]` items, each HOST resolved to its address here: faults
    match hosts by address (iptables rules, the interface holding it)."""
    if not nodes:
        raise ClusterError("--nodes: no hosts given")
    key_file = str(Path(key).expanduser()) if key else ""
    if key_file and not Path(key_file).exists():
        raise ClusterError(f"--ssh-private-key: {key_file} does not exist")
    hosts = []
    for i, item in enumerate(nodes, 1):
        name, sep, port = item.rpartition(":") if item.count(":") == 1 else (item, "", "")
        if not name or (sep and not port.isdigit()):
            raise ClusterError(f"--nodes: {item!r} is not HOST or HOST:PORT")
        try:
            address = socket.gethostbyname(name)
        except OSError as e:
            raise ClusterError(f"--nodes: cannot resolve {name!r}: {e}") from None
        hosts.append(Host(f"n{i}", address, int(port or 22), user, key_file))
    if len({(h.address, h.port) for h in hosts}) != len(hosts):
        raise ClusterError(f"--nodes: a host is listed twice: {','.join(nodes)}")
    return hosts
