"""The `vagrant` provider: the VMs of the project's Vagrantfile (run from the directory holding
it, after `vagrant up`).

`vagrant ssh-config` gives each VM's key; the harness then logs in as root (the Vagrantfile's
provisioner authorizes that key for root) on the VM's private-network address, because the
database's own traffic, the partitions and the client all use that network, not Vagrant's
forwarded SSH port."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
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


def _vagrant(directory: Path, *argv: str, capture: bool = True) -> subprocess.CompletedProcess:
    if not shutil.which("vagrant"):
        raise ClusterError("vagrant is not installed (apt-get install vagrant), or use --provider netns")
    if not (Path(directory) / "Vagrantfile").is_file():
        raise ClusterError(f"no Vagrantfile in {directory}: run from the checkout")
    out = {"capture_output": True} if capture else {"stdout": sys.stderr}
    return subprocess.run(["vagrant", *argv], cwd=directory, text=True, stdin=subprocess.DEVNULL,
                          **out)


def up(directory: Path, say=print, timeout: float = 600.0) -> list[Host]:
    """`vagrant up` (its progress on stderr), then each VM's hosts entry once root answers over
    SSH on its private address, with the Python it runs (the wheels must match it)."""
    say("vagrant up (the first boot downloads the box and provisions five VMs)")
    if _vagrant(directory, "up", capture=False).returncode != 0:
        raise ClusterError("vagrant up failed: its output above says why")
    found = hosts(directory)
    wait_for_ssh(found, timeout, say)
    return found


def wait_for_ssh(found: list[Host], timeout: float, say=print) -> None:
    from harness.control import Remote

    deadline = time.monotonic() + timeout
    for h in found:
        while True:
            r = Remote(h)
            try:
                version = r.run(["python3", "-c", "import sys; print(sys.version.split()[0])"]).stdout
                say(f"{h.name} {h.address}: ssh ok, python {version.strip()}")
                break
            except ClusterError as e:
                if time.monotonic() > deadline:
                    raise ClusterError(f"{h.name} ({h.address}) never answered over SSH as root: {e}") from None
                time.sleep(2)
            finally:
                r.close()


def down(directory: Path, say=print) -> None:
    say("vagrant destroy -f")
    p = _vagrant(directory, "destroy", "-f", capture=False)
    if p.returncode != 0:
        raise ClusterError("vagrant destroy failed: its output above says why")


def status(directory: Path) -> list[dict]:
    """[{name, state}] from `vagrant status --machine-readable`."""
    p = _vagrant(directory, "status", "--machine-readable")
    if p.returncode != 0:
        raise ClusterError(f"vagrant status failed: {p.stderr.strip()[-400:]}")
    return [{"name": f[1], "state": f[3]} for f in (line.split(",") for line in p.stdout.splitlines())
            if len(f) >= 4 and f[2] == "state"]
