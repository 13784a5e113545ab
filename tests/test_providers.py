"""Host providers other than netns: parsing only (no VMs or remote machines here)."""

import subprocess
import sys

import pytest

from harness.cluster import ClusterError
from harness.cluster.hostsfile import load
from harness.cluster.vagrant import parse_ssh_config

SSH_CONFIG = """Host n1
  HostName 192.168.121.11
  User vagrant
  Port 22
  IdentityFile "/home/u/.vagrant/machines/n1/libvirt/private_key"
  StrictHostKeyChecking no

Host n2
  HostName 127.0.0.1
  User vagrant
  Port 2201
  IdentityFile /k2
"""


def test_vagrant_ssh_config():
    n1, n2 = parse_ssh_config(SSH_CONFIG)
    assert (n1.name, n1.address, n1.port, n1.user) == ("n1", "192.168.121.11", 22, "vagrant")
    assert n1.key_file.endswith("n1/libvirt/private_key")
    assert (n2.address, n2.port, n2.key_file) == ("127.0.0.1", 2201, "/k2")


def test_hosts_file(tmp_path):
    key = tmp_path / "k"
    key.write_text("x")
    f = tmp_path / "h.toml"
    f.write_text(f'[[host]]\naddress = "a"\nkey = "{key}"\n[[host]]\nname = "db2"\naddress = "b"\nport = 2222\n')
    a, b = load(f)
    assert (a.name, a.address, a.port, a.user, a.key_file) == ("n1", "a", 22, "root", str(key))
    assert (b.name, b.port) == ("db2", 2222)


@pytest.mark.parametrize("text,message", [
    ("", "no \\[\\[host\\]\\] entries"),
    ('[[host]]\nname = "x"\n', "has no address"),
    ('[[host]]\naddress = "a"\nkey = "/nonexistent/key"\n', "does not exist"),
    ('[[host]]\naddress = "a"\npassword = "x"\n', "unknown keys"),
    ("[[host]\n", "cannot read hosts file"),
])
def test_bad_hosts_file(tmp_path, text, message):
    f = tmp_path / "h.toml"
    f.write_text(text)
    with pytest.raises(ClusterError, match=message):
        load(f)


_VAGRANTFILE_HOSTS = """
module Vagrant
  def self.configure(*) end
end
load ARGV[0]
puts HOSTS.map { |n, ip| "#{n}=#{ip}" }.join(" ")
"""


@pytest.mark.parametrize("subnet", [None, "10.77.0.0/25"])
def test_the_harness_addresses_the_vms_as_the_vagrantfile_makes_them(subnet, monkeypatch):
    """The Vagrantfile itself (its HOSTS, evaluated by ruby) and the harness agree on each VM's
    private address: by default VirtualBox's host-only range (it refuses addresses outside
    192.168.56.0/21 unless configured), or TESSERA_VAGRANT_SUBNET's."""
    import subprocess
    from pathlib import Path

    from harness.cluster.vagrant import private_address

    if subnet:
        monkeypatch.setenv("TESSERA_VAGRANT_SUBNET", subnet)
    else:
        monkeypatch.delenv("TESSERA_VAGRANT_SUBNET", raising=False)
    monkeypatch.setenv("TESSERA_VAGRANT_DRIVER", "kvm")
    vagrantfile = Path(__file__).resolve().parents[1] / "Vagrantfile"
    out = subprocess.run(["ruby", "-e", _VAGRANTFILE_HOSTS, str(vagrantfile)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    made = dict(pair.split("=") for pair in out.stdout.split())
    assert list(made) == ["n1", "n2", "n3", "n4", "n5"]
    assert made == {name: private_address(name) for name in made}
    assert made["n1"] == ("10.77.0.11" if subnet else "192.168.56.11")
    with pytest.raises(ClusterError, match="not one of"):
        private_address("db")
    monkeypatch.setenv("TESSERA_VAGRANT_SUBNET", "10.77.0.0/33")
    with pytest.raises(ValueError, match="TESSERA_VAGRANT_SUBNET='10.77.0.0/33' is not"):
        private_address("n1")


def test_vagrantfile_validates():
    import shutil
    import subprocess
    from pathlib import Path

    if not shutil.which("vagrant"):  # make test installs it; a missing tool is a failure
        pytest.fail("vagrant is not installed (apt-get install vagrant)")
    out = subprocess.run(["vagrant", "validate"], cwd=Path(__file__).resolve().parents[1],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "validated successfully" in out.stdout, out.stdout + out.stderr


def test_cluster_commands_drive_vagrant(tmp_path):
    """`tessera cluster status --provider vagrant` asks the real vagrant about the Vagrantfile's
    VMs (none is created on this machine: no hypervisor, so exit 1); `up` away from a checkout
    says where to run it. `vagrant up` itself cannot run here."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def tessera(*argv, cwd):
        return subprocess.run([sys.executable, "-m", "harness.cli", "cluster", *argv], cwd=cwd,
                              capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
                              env={**__import__("os").environ, "PYTHONPATH": str(root)})

    status = tessera("status", "--provider", "vagrant", "--json", cwd=root)
    assert status.returncode == 1, status.stderr
    import json
    assert [r["name"] for r in json.loads(status.stdout)] == ["n1", "n2", "n3", "n4", "n5"]
    up = tessera("up", "--provider", "vagrant", cwd=tmp_path)
    assert up.returncode == 1 and f"no Vagrantfile in {tmp_path}: run from the checkout" in up.stderr


def test_vagrant_up_refuses_a_subnet_the_netns_cluster_holds_before_starting_anything(
        tmp_path, monkeypatch):
    """The VMs may use the test subnet only while no netns cluster is up on it (the bridges'
    routes would collide); checked before vagrant or libvirt is touched."""
    from harness.cluster import netns, vagrant

    (tmp_path / "Vagrantfile").write_text("")
    monkeypatch.setenv("TESSERA_VAGRANT_SUBNET", "10.77.0.0/25")
    monkeypatch.setattr(netns, "_namespaces", lambda: {"tessera-n1"})
    monkeypatch.setattr(vagrant, "ensure_libvirtd", lambda *a: pytest.fail("libvirtd touched"))
    with pytest.raises(ClusterError, match="the netns cluster is up on 10.77.0.0/24"):
        vagrant.up(tmp_path, say=lambda m: None)


def test_the_box_boots_its_own_kernel_from_the_partition_its_fstab_names():
    """The built box's pieces agree with each other: extlinux boots the installed kernel and
    initrd with root=LABEL=root, the label mkfs gives and fstab mounts; eth names as Vagrant
    expects; the metadata is vagrant-libvirt's."""
    import json

    from harness.cluster import vagrant_box as vb

    conf = vb.extlinux_conf("vmlinuz-6.1.0-50-cloud-amd64", "initrd.img-6.1.0-50-cloud-amd64")
    assert "KERNEL /boot/vmlinuz-6.1.0-50-cloud-amd64" in conf
    assert "initrd=/boot/initrd.img-6.1.0-50-cloud-amd64" in conf
    assert "root=LABEL=root" in conf and "net.ifnames=0" in conf and "console=ttyS0" in conf
    assert vb.fstab().startswith("LABEL=root / ext4")
    assert "Name=eth*" in vb.dhcp_network()
    assert json.loads(vb.metadata(6)) == {"provider": "libvirt", "format": "qcow2",
                                          "virtual_size": 6}
    assert "linux-image-cloud-amd64" in vb.PACKAGES and "python3" in vb.PACKAGES


def test_build_box_refuses_bad_input_before_touching_anything(tmp_path):
    from harness.cluster.vagrant_box import build_box

    with pytest.raises(ValueError, match="--disk-gb must be between 2 and 64, not 1"):
        build_box(tmp_path / "out", disk_gb=1)
    assert not (tmp_path / "out").exists()
    out = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "build-box",
                          "--disk-gb", "99", "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert out.returncode == 254 and out.stderr.strip() == (
        "tessera cluster build-box: --disk-gb must be between 2 and 64, not 99"), out.stderr


def test_the_kvm_probe_reads_a_console_until_it_says_enough_or_time_is_up():
    """`cluster up --provider vagrant` boots the box under KVM to learn whether KVM works here
    (nested, it may stop the guest: "KVM internal error"); the reading stops at the first
    mark, at the deadline, or when the process exits, and the process is gone after."""
    import time

    from harness.cluster.vagrant import _serial_until

    t = time.monotonic()
    said = _serial_until(["sh", "-c", "echo SeaBIOS; echo Linux version 6.1; sleep 60"],
                         ("Linux version", "KVM internal error"), 30)
    assert "Linux version" in said and time.monotonic() - t < 20
    t = time.monotonic()
    assert _serial_until(["sh", "-c", "echo SeaBIOS; sleep 60"], ("Linux version",), 1) == \
        "SeaBIOS\n" and time.monotonic() - t < 20
    assert _serial_until(["sh", "-c", "echo KVM internal error >&2"], ("Linux version",), 30) \
        == "KVM internal error\n"
