"""`tessera cluster build-box`: a Debian 12 box for Vagrant's libvirt provider, built here from
Debian packages, for machines that cannot reach Vagrant Cloud (or should not).

The box is one disk image: an MBR, one ext4 partition labelled `root` with the system
mmdebstrap installed (Debian's cloud kernel, systemd, sshd, python3 and what the nemeses use on
a host), booted by extlinux straight into that kernel. Each VM made from it gets its own SSH
host keys and machine id at its first boot (so DHCP leases and host keys differ), DHCP on
every ethN (the management network; Vagrant configures the private one), the user `vagrant`
with Vagrant's insecure key (which `vagrant up` replaces), and sudo without a password.
Nothing in the guests needs the network after the build: the Vagrantfile's provisioner skips
apt when the packages are there.

Measured on this machine: the install takes about 2 minutes (packages from the Debian mirror),
and a guest boots to a login under qemu's TCG in about a minute.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness.cluster import ClusterError

DEFAULT_NAME = "tessera/bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
# Beside the base system: a kernel that boots under KVM and TCG alike, what Vagrant and the
# harness log in with, and what the Vagrantfile's provisioner would otherwise install.
PACKAGES = ("systemd-sysv", "udev", "linux-image-cloud-amd64", "initramfs-tools",
            "openssh-server", "sudo", "ca-certificates", "python3", "python3-venv", "iptables",
            "iproute2", "faketime", "fuse3", "libfuse2", "libnetfilter-queue1", "rsync")
TOOLS = {"mmdebstrap": "mmdebstrap", "extlinux": "extlinux", "qemu-img": "qemu-utils",
         "losetup": "mount", "sfdisk": "fdisk", "mkfs.ext4": "e2fsprogs", "vagrant": "vagrant"}
MBR = Path("/usr/lib/EXTLINUX/mbr.bin")
PARTITION_START = 2048  # sectors of 512 bytes: the partition starts 1 MiB in
VAGRANT_KEY = "keys/vagrant.pub"  # in Vagrant's gem directory


def fstab() -> str:
    return "LABEL=root / ext4 defaults,errors=remount-ro 0 1\n"


def dhcp_network() -> str:
    """systemd-networkd: DHCP on every ethN. Vagrant writes its own file for the private
    network's NIC, which sorts before this one and so wins for it."""
    return "[Match]\nName=eth*\n\n[Network]\nDHCP=ipv4\nLinkLocalAddressing=no\n"


def host_keys_unit() -> str:
    """Host keys made at a VM's first boot: the box ships none, so no two VMs share them."""
    return ("[Unit]\nDescription=SSH host keys of this VM, made at its first boot\n"
            "Before=ssh.service\nConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\n\n"
            "[Service]\nType=oneshot\nExecStart=/usr/bin/ssh-keygen -A\n\n"
            "[Install]\nWantedBy=multi-user.target\n")


def extlinux_conf(kernel: str, initrd: str) -> str:
    """Boot the box's kernel at once; interface names eth0, eth1... as Vagrant expects them,
    and the console on the serial port (`virsh console`)."""
    return (f"DEFAULT linux\nTIMEOUT 1\nLABEL linux\n  KERNEL /boot/{kernel}\n"
            f"  APPEND initrd=/boot/{initrd} root=LABEL=root rw console=ttyS0 net.ifnames=0\n")


def metadata(disk_gb: int) -> str:
    return json.dumps({"provider": "libvirt", "format": "qcow2", "virtual_size": disk_gb}) + "\n"


def missing_tools() -> list[str]:
    """The Debian packages to install before a build (each named once)."""
    need = {pkg for tool, pkg in TOOLS.items() if not shutil.which(tool)}
    if not MBR.is_file():
        need.add("extlinux")
    return sorted(need)


def vagrant_public_key() -> Path:
    """Vagrant's insecure public key, which `vagrant up` expects a fresh box to accept."""
    p = subprocess.run(["gem", "contents", "vagrant"], capture_output=True, text=True)
    for line in p.stdout.splitlines() if p.returncode == 0 else []:
        if line.endswith(VAGRANT_KEY):
            return Path(line)
    found = sorted(Path("/usr/share/rubygems-integration/all/gems").glob(f"vagrant-*/{VAGRANT_KEY}"))
    if not found:
        raise ClusterError("cannot find Vagrant's insecure key (keys/vagrant.pub): is vagrant "
                           "installed from Debian's package?")
    return found[-1]


def build_box(out_dir: Path, name: str = DEFAULT_NAME, mirror: str = DEFAULT_MIRROR,
              disk_gb: int = 6, add: bool = True,
              say: Callable[[str], None] = print) -> Path:
    """Build the box file in `out_dir` and, with `add`, add it to Vagrant as `name`. Checks
    its arguments (ValueError) and every tool (ClusterError) first, and leaves no mount or loop
    device behind, whatever fails."""
    if not 2 <= disk_gb <= 64:
        raise ValueError(f"--disk-gb must be between 2 and 64, not {disk_gb}")
    if os.geteuid() != 0:
        raise ClusterError("building a box needs root (a loop device and a chroot)")
    if need := missing_tools():
        raise ClusterError(f"missing tools: apt-get install {' '.join(need)}")
    key = vagrant_public_key()
    out_dir.mkdir(parents=True, exist_ok=True)
    box = out_dir / f"{name.replace('/', '-')}.box"
    with tempfile.TemporaryDirectory(prefix="tessera-box-", dir=out_dir) as tmp:
        work = Path(tmp)
        raw = work / "disk.raw"
        with raw.open("wb") as f:
            f.truncate(disk_gb << 30)
        _run(["sfdisk", "-q", str(raw)], stdin=f"start={PARTITION_START}, type=83, bootable\n")
        loop = _run(["losetup", "-f", "--show", "-o", str(PARTITION_START * 512),
                     str(raw)]).stdout.strip()
        root = work / "root"
        root.mkdir()
        try:
            _run(["mkfs.ext4", "-q", "-L", "root", loop])
            _run(["mount", loop, str(root)])
            try:
                say(f"installing Debian {SUITE} from {mirror} (about 2 minutes)")
                _run(["mmdebstrap", "--quiet", "--variant=important",
                      f"--include={','.join(PACKAGES)}", SUITE, str(root), mirror])
                say("configuring the box: boot loader, network, users, first-boot keys")
                _configure(root, key)
            finally:
                _run(["umount", "-R", str(root)], check=False)
        finally:
            _run(["losetup", "-d", loop], check=False)
        with raw.open("r+b") as f:  # extlinux's MBR boots the partition marked bootable
            f.write(MBR.read_bytes()[:440])
        _run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(work / "box.img")])
        raw.unlink()
        (work / "metadata.json").write_text(metadata(disk_gb))
        # uncompressed: the image is already sparse-converted, and gzip would take a minute
        _run(["tar", "-cf", str(box), "-C", str(work), "metadata.json", "box.img"])
    say(f"box file: {box} ({box.stat().st_size >> 20} MiB)")
    if add:
        _run(["vagrant", "box", "add", "--force", "--name", name, str(box)])
        say(f"added to Vagrant as {name} (libvirt): TESSERA_VAGRANT_BOX={name} selects it")
    return box


def _configure(root: Path, key: Path) -> None:
    """The installed system made a box: files written from here, services enabled in it."""
    (root / "etc/fstab").write_text(fstab())
    (root / "etc/hostname").write_text("tessera-box\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n")
    (root / "etc/systemd/network/99-dhcp.network").write_text(dhcp_network())
    (root / "etc/systemd/system/ssh-host-keys.service").write_text(host_keys_unit())
    for unit in ("systemd-networkd", "ssh-host-keys.service"):
        _run(["chroot", str(root), "systemctl", "enable", unit])
    _run(["chroot", str(root), "useradd", "-m", "-s", "/bin/bash", "vagrant"])
    pub = key.read_text()
    for home, owner in ((root / "home/vagrant", "vagrant"), (root / "root", "root")):
        ssh = home / ".ssh"
        ssh.mkdir(mode=0o700, exist_ok=True)
        (ssh / "authorized_keys").write_text(pub)
        (ssh / "authorized_keys").chmod(0o600)
        _run(["chroot", str(root), "chown", "-R", f"{owner}:{owner}",
              f"/{home.relative_to(root)}/.ssh"])
    sudoers = root / "etc/sudoers.d/vagrant"
    sudoers.write_text("vagrant ALL=(ALL) NOPASSWD:ALL\n")
    sudoers.chmod(0o440)
    (root / "etc/ssh/sshd_config.d/vagrant.conf").write_text("UseDNS no\n")
    for k in (root / "etc/ssh").glob("ssh_host_*"):
        k.unlink()
    (root / "etc/machine-id").write_text("")  # each VM makes its own at first boot
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    boot = root / "boot"
    kernel = sorted(p.name for p in boot.glob("vmlinuz-*"))[-1]
    initrd = sorted(p.name for p in boot.glob("initrd.img-*"))[-1]
    (boot / "extlinux").mkdir(exist_ok=True)
    (boot / "extlinux/extlinux.conf").write_text(extlinux_conf(kernel, initrd))
    _run(["extlinux", "--install", str(boot / "extlinux")])
    _run(["chroot", str(root), "apt-get", "clean"])


def _run(argv: list[str], stdin: str | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise ClusterError(f"{' '.join(argv[:3])}... failed (exit {p.returncode}): "
                           f"{(p.stderr or p.stdout).strip()[-800:]}")
    return p
