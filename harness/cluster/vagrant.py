"""The `vagrant` provider: the VMs of the project's Vagrantfile (run from the directory holding
it, after `vagrant up`).

`vagrant ssh-config` gives each VM's key; the harness then logs in as root (the Vagrantfile's
provisioner authorizes that key for root) on the VM's private-network address, because the
database's own traffic, the partitions and the client all use that network, not Vagrant's
forwarded SSH port."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import sys
import tempfile
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


SUBNET_ENV, DEFAULT_SUBNET = "TESSERA_VAGRANT_SUBNET", "192.168.56.0/24"


def subnet() -> ipaddress.IPv4Network:
    """The VMs' private network, as the Vagrantfile reads it (TESSERA_VAGRANT_SUBNET)."""
    text = os.environ.get(SUBNET_ENV, DEFAULT_SUBNET)
    try:
        return ipaddress.IPv4Network(text)
    except ValueError as e:
        raise ValueError(f"{SUBNET_ENV}={text!r} is not an IPv4 network such as "
                         f"{DEFAULT_SUBNET}: {e}") from None


def private_address(name: str, net: ipaddress.IPv4Network | None = None) -> str:
    """The Vagrantfile's addressing: nI is the subnet's (10 + I)th address (n1 = 192.168.56.11
    by default, VirtualBox's host-only range)."""
    if not (name.startswith("n") and name[1:].isdigit()):
        raise ClusterError(f"vagrant host {name!r} is not one of the Vagrantfile's n1..nN")
    net = net or subnet()
    address = net.network_address + 10 + int(name[1:])
    if address not in net:
        raise ClusterError(f"{name}: {address} is outside {net}")
    return str(address)


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


def _check(directory: Path) -> None:
    if not shutil.which("vagrant"):
        raise ClusterError("vagrant is not installed (apt-get install vagrant), or use --provider netns")
    if not (Path(directory) / "Vagrantfile").is_file():
        raise ClusterError(f"no Vagrantfile in {directory}: run from the checkout")


def _vagrant(directory: Path, *argv: str, capture: bool = True,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    _check(directory)
    out = {"capture_output": True} if capture else {"stdout": sys.stderr}
    return subprocess.run(["vagrant", *argv], cwd=directory, text=True, stdin=subprocess.DEVNULL,
                          env=env, **out)


def up(directory: Path, say=print, timeout: float = 600.0) -> list[Host]:
    """`vagrant up` (its progress on stderr), then each VM's hosts entry once root answers over
    SSH on its private address, with the Python it runs (the wheels must match it)."""
    _check(directory)
    net = subnet()
    from harness.cluster import netns

    if net.overlaps(netns.SUBNET) and any(n.startswith("tessera-") for n in netns._namespaces()):
        raise ClusterError(f"the netns cluster is up on {netns.SUBNET}, which {net} overlaps: "
                           "`tessera cluster down` first")
    env = None
    if uses_libvirt():
        ensure_libvirtd(say)
        if DRIVER_ENV not in os.environ and (why := kvm_unusable()):
            say(f"KVM is unusable here ({why}): the guests run under qemu's TCG, slowly "
                f"(--time-scale 10 suits them); {DRIVER_ENV}=kvm overrides")
            env = {**os.environ, DRIVER_ENV: "qemu"}
    say(f"vagrant up (the first boot may download the box; each VM is then provisioned; "
        f"private network {net})")
    if _vagrant(directory, "up", capture=False, env=env).returncode != 0:
        raise ClusterError("vagrant up failed: its output above says why")
    found = hosts(directory)
    wait_for_ssh(found, timeout, say)
    return found


DRIVER_ENV, BOX_ENV, DEFAULT_BOX = "TESSERA_VAGRANT_DRIVER", "TESSERA_VAGRANT_BOX", "debian/bookworm64"


def kvm_unusable(timeout: float = 30.0) -> str | None:
    """Why KVM cannot boot the Vagrantfile's box here, or None when it can (or when that
    cannot be tried: no /dev/kvm is its own answer, and a box not yet downloaded is left to
    Vagrant). /dev/kvm can exist and still fail: nested under another hypervisor, KVM runs the
    firmware and then stops the guest ("KVM internal error") or hangs. So the box itself is
    booted, on a throwaway overlay, until its kernel speaks on the serial console."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "no usable /dev/kvm"
    name = os.environ.get(BOX_ENV, DEFAULT_BOX).replace("/", "-VAGRANTSLASH-")
    images = sorted((Path.home() / ".vagrant.d/boxes" / name).glob("*/libvirt/box.img"))
    if not images or not shutil.which("qemu-system-x86_64"):
        return None
    with tempfile.TemporaryDirectory(prefix="tessera-kvm-") as tmp:
        overlay = Path(tmp) / "probe.qcow2"
        made = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(images[-1]),
                               "-F", "qcow2", str(overlay)], capture_output=True, text=True)
        if made.returncode != 0:
            return None
        text = _serial_until(["qemu-system-x86_64", "-accel", "kvm", "-m", "512", "-nodefaults",
                              "-nographic", "-no-reboot", "-drive", f"file={overlay},if=virtio",
                              "-serial", "stdio"], ("Linux version", "KVM internal error"),
                             timeout)
    if "Linux version" in text:
        return None
    if "KVM internal error" in text:
        return "KVM stopped the guest before its kernel ran: KVM internal error"
    return f"the box's kernel did not start within {timeout:.0f} s under KVM"


def _serial_until(argv: list[str], marks: tuple[str, ...], timeout: float) -> str:
    """What `argv` prints (stdout and stderr) until one of `marks` or `timeout`; then killed."""
    import selectors

    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    out, deadline = b"", time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(p.stdout, selectors.EVENT_READ)
            while (left := deadline - time.monotonic()) > 0 and sel.select(left):
                chunk = os.read(p.stdout.fileno(), 65536)
                out += chunk
                if not chunk or any(m.encode() in out for m in marks):
                    break  # qemu exited, or said enough
    finally:
        p.kill()
        p.wait()
        p.stdout.close()
    return out.decode(errors="replace")


def uses_libvirt() -> bool:
    """Vagrant will pick libvirt: asked for by name, or the only provider installed here."""
    chosen = os.environ.get("VAGRANT_DEFAULT_PROVIDER")
    if chosen:
        return chosen == "libvirt"
    return shutil.which("VBoxManage") is None and shutil.which("libvirtd") is not None


def ensure_libvirtd(say=print, timeout: float = 30.0) -> None:
    """libvirt's system daemon answering. Without systemd (a container) nothing starts it, so
    as root start virtlogd and libvirtd here, and say so; with systemd, say how to start it."""
    def answers() -> bool:
        return subprocess.run(["virsh", "-c", "qemu:///system", "version"], capture_output=True,
                              stdin=subprocess.DEVNULL).returncode == 0

    if not shutil.which("virsh"):
        raise ClusterError("libvirt is not installed: apt-get install libvirt-daemon-system")
    if answers():
        return
    if Path("/run/systemd/system").is_dir() or os.geteuid() != 0:
        raise ClusterError("libvirtd does not answer: systemctl start libvirtd (as root)")
    say("libvirtd is not running and there is no systemd here: starting virtlogd and libvirtd")
    for daemon in ("virtlogd", "libvirtd"):
        subprocess.run([daemon, "-d"], check=False, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while not answers():
        if time.monotonic() > deadline:
            raise ClusterError(f"libvirtd did not answer within {timeout:.0f} s of its start")
        time.sleep(0.5)


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
