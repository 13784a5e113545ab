"""Host providers other than netns: parsing only (no VMs or remote machines here)."""

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


def test_vagrant_hosts_use_the_private_network():
    import re
    from pathlib import Path

    from harness.cluster.vagrant import private_address

    assert private_address("n1") == "192.168.56.11" and private_address("n5") == "192.168.56.15"
    # the Vagrantfile's own addresses are these (VirtualBox refuses host-only addresses
    # outside 192.168.56.0/21 unless configured)
    vagrantfile = (Path(__file__).resolve().parents[1] / "Vagrantfile").read_text()
    assert re.search(r'"192\.168\.56\.#\{10 \+ i\}"', vagrantfile)
    with pytest.raises(ClusterError, match="not one of"):
        private_address("db")


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
