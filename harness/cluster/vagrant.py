"""The `vagrant` provider: the VMs of the project's Vagrantfile (run from the directory holding
it, after `vagrant up`).

`vagrant ssh-config` gives each VM's key; the harness then logs in as root (the Vagrantfile's
provisioner authorizes that key for root) on the VM's private-network address, because the
database's own traffic, the partitions and the client all use that network, not Vagrant's
forwarded SSH port."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.cluster import ClusterError, Host


def parse_ssh_config(text: str) -> list[Host]:
    hosts, cur = [], None
    for raw in text.splitlines():
        parts = raw.strip().split(None, 1)
        if len(parts) != 2:
            continue
        key, value = parts[0].lower(), parts[1].strip().strip('"')
        if key == "host":
            cur = {"name": value}
            hosts.append(cur)
        elif cur is not None:
            cur[key] = value
    out = []
    for h in hosts:
        if "hostname" not in h:
            raise ClusterError(f"vagrant ssh-config: host {h['name']} has no HostName")
        out.append(Host(h["name"], h["hostname"], int(h.get("port", 22)), h.get("user", "vagrant"),
                        h.get("identityfile", "")))
    return out


def private_address(name: str) -> str:
    """The Vagrantfile's addressing: n1 = 192.168.56.11 ... (VirtualBox's host-only range)."""
    if not (name.startswith("n") and name[1:].isdigit()):
        raise ClusterError(f"vagrant host {name!r} is not one of the Vagrantfile's n1..n5")
    return f"192.168.56.{10 + int(name[1:])}"


def hosts(directory: Path) -> list[Host]:
    if not shutil.which("vagrant"):
        raise ClusterError("vagrant is not installed (apt-get install vagrant), or use --provider netns")
    p = subprocess.run(["vagrant", "ssh-config"], cwd=directory, capture_output=True, text=True)
    if p.returncode != 0:
        raise ClusterError(f"vagrant ssh-config failed (is `vagrant up` done?): {p.stderr.strip()[-400:]}")
    found = parse_ssh_config(p.stdout)
    if not found:
        raise ClusterError("vagrant ssh-config listed no hosts")
    return [Host(h.name, private_address(h.name), 22, "root", h.key_file) for h in found]
