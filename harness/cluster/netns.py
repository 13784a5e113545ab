"""The default provider: hosts n1..nN as network namespaces on one bridge, each with its own sshd.

Each host is `ip netns exec <ns> unshare --pid --fork --kill-child --mount-proc --uts --mount`
running an init script that sets the hostname, bind-mounts the host's private /var/lib/tessera,
/opt/tessera and /tmp, hides root's shell rc (pyenv init there costs ~140 ms per SSH command), and
execs sshd as the host's pid 1. SIGKILL of the `unshare` process (recorded by pid) ends the host
and every process in it, because its child is the pid namespace's init and dies with it.

Everything `up` makes is named with a fixed prefix and recorded in a state file, so `down` removes
it by pid and by name even if the state file was lost.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from harness.cluster import ClusterError, Host

SUBNET = ipaddress.ip_network("10.77.0.0/24")  # the only addresses this project may use
BRIDGE = "tsbr0"
BRIDGE_ADDR = "10.77.0.254"
NS_PREFIX = "tessera-"
VETH_PREFIX = "ts-"
STATE_DIR = Path(os.environ.get("TESSERA_NETNS_STATE", "/run/tessera-netns"))
PRIVATE_MOUNTS = ("/var/lib/tessera", "/opt/tessera", "/tmp")
# `down` keeps one host's /opt/tessera (the wheels and the venv, stamped with their digests) and
# `up` seeds new hosts with it, so a cluster made again does not build five venvs again; the
# installer still compares the stamps and reinstalls whatever changed.
INSTALL_CACHE = Path(os.environ.get("TESSERA_NETNS_INSTALL_CACHE", "/var/cache/tessera/netns-opt"))
MAX_HOSTS = 20


def host_address(i: int) -> str:
    return str(SUBNET.network_address + 10 + i)  # n1 = .11


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise ClusterError(f"{' '.join(cmd)} failed: {(p.stderr or p.stdout).strip()}")
    return p


def _namespaces() -> set[str]:
    out = _run("ip", "netns", "list", check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _links() -> set[str]:
    out = _run("ip", "-o", "link", "show", check=False).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def _our_host_pids(state_dir: Path = STATE_DIR) -> dict[int, str]:
    """pid -> cmdline of every `unshare` that runs one of our host init scripts."""
    found = {}
    marker = str(state_dir) + "/"
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"unshare") and any(a.startswith(marker.encode()) for a in argv):
            found[int(d.name)] = b" ".join(argv).decode(errors="replace")
    return found


def _check_tools() -> None:
    missing = [t for t in ("ip", "unshare", "sshd", "ssh-keygen") if not shutil.which(t)
               and not Path(f"/usr/sbin/{t}").exists()]
    if missing:
        raise ClusterError(f"missing tools: {', '.join(missing)} (apt-get install iproute2 "
                           "util-linux openssh-server; `make demo` installs them)")
    if os.geteuid() != 0:
        raise ClusterError("the netns provider needs root (network namespaces, bridges, sshd)")


class NetnsCluster:
    def __init__(self, n: int = 5, state_dir: Path = STATE_DIR):
        if not 1 <= n <= MAX_HOSTS:
            raise ClusterError(f"--hosts must be between 1 and {MAX_HOSTS}, got {n}")
        if any(Path(state_dir).is_relative_to(m) for m in PRIVATE_MOUNTS):
            raise ClusterError(f"state dir {state_dir} would be hidden inside the hosts by their "
                               f"private {', '.join(PRIVATE_MOUNTS)}")
        self.n = n
        self.state_dir = Path(state_dir)
        self.key_file = self.state_dir / "id_ed25519"

    # -- what callers use --------------------------------------------------------------------
    def hosts(self) -> list[Host]:
        state = self._load_state()
        if not state:
            raise ClusterError("no netns cluster is up (run `tessera cluster up`)")
        return [Host(h["name"], h["address"], 22, "root", str(self.key_file), h["host_key"])
                for h in state["hosts"]]

    def up(self, progress=print) -> list[Host]:
        _check_tools()
        state = self._load_state()
        if state and len(state["hosts"]) != self.n:
            progress(f"cluster has {len(state['hosts'])} hosts, {self.n} asked: rebuilding")
            self.down(progress)
            state = None
        try:
            self._ensure_keys()
            self._ensure_bridge()
            hosts = []
            for i in range(1, self.n + 1):
                hosts.append(self._ensure_host(i, state, progress))
            self._save_state({"hosts": hosts})
        except BaseException:
            progress("cluster up failed: tearing down what was made")
            self.down(lambda *_: None)
            raise
        return self.hosts()

    def down(self, progress=print) -> None:
        for pid in _our_host_pids(self.state_dir):
            os.kill(pid, signal.SIGKILL)
            progress(f"killed host process {pid}")
        deadline = time.monotonic() + 10
        while _our_host_pids(self.state_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        for ns in sorted(_namespaces()):
            if ns.startswith(NS_PREFIX):
                _run("ip", "netns", "del", ns, check=False)
                progress(f"removed namespace {ns}")
        for link in sorted(_links()):
            if link.startswith(VETH_PREFIX) or link == BRIDGE:
                _run("ip", "link", "del", link, check=False)
                progress(f"removed link {link}")
        if self.state_dir.exists():
            _keep_install(self.state_dir)
            shutil.rmtree(self.state_dir)

    def status(self) -> list[dict]:
        state = self._load_state() or {"hosts": []}
        pids = _our_host_pids(self.state_dir)
        namespaces = _namespaces()
        rows = []
        for h in state["hosts"]:
            rows.append({
                "name": h["name"], "address": h["address"],
                "namespace": h["ns"] in namespaces,
                "process": h["pid"] in pids,
                "sshd": _port_open(h["address"], 22, timeout=0.5),
            })
        return rows

    # -- pieces ------------------------------------------------------------------------------
    def _load_state(self) -> dict | None:
        try:
            return json.loads((self.state_dir / "state.json").read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise ClusterError(f"unreadable cluster state {self.state_dir}/state.json: {e}; "
                               "run `tessera cluster down`") from None

    def _save_state(self, state: dict) -> None:
        tmp = self.state_dir / "state.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_dir / "state.json")

    def _ensure_keys(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        if not self.key_file.exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "tessera-harness",
                 "-f", str(self.key_file))
        (self.state_dir / "authorized_keys").write_text(Path(f"{self.key_file}.pub").read_text())
        (self.state_dir / "quiet.rc").write_text("# tessera host: no shell init\n")
        for d in PRIVATE_MOUNTS + ("/run/sshd",):
            Path(d).mkdir(parents=True, exist_ok=True)

    def _ensure_bridge(self) -> None:
        if BRIDGE not in _links():
            _run("ip", "link", "add", BRIDGE, "type", "bridge")
            _run("ip", "addr", "add", f"{BRIDGE_ADDR}/{SUBNET.prefixlen}", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")

    def _ensure_host(self, i: int, state: dict | None, progress) -> dict:
        name, addr = f"n{i}", host_address(i)
        ns, veth = f"{NS_PREFIX}{name}", f"{VETH_PREFIX}{name}"
        old = next((h for h in (state or {}).get("hosts", []) if h["name"] == name), None)
        if old and old["pid"] in _our_host_pids(self.state_dir) and _port_open(addr, 22, timeout=1):
            progress(f"{name} {addr}: already up")
            return old
        # Half-made or dead: remove whatever is left of this host, then build it fresh. The
        # kernel tears a dead namespace's veth down asynchronously, so wait for it to go.
        for pid, cmd in _our_host_pids(self.state_dir).items():
            if f"/{name}/init.sh" in cmd:
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while any(f"/{name}/init.sh" in c for c in _our_host_pids(self.state_dir).values()):
            if time.monotonic() > deadline:
                raise ClusterError(f"{name}: its old host process does not die")
            time.sleep(0.02)
        if ns in _namespaces():
            _run("ip", "netns", "del", ns, check=False)
        while veth in _links() and time.monotonic() < deadline:
            _run("ip", "link", "del", veth, check=False)  # may already be going: fine
            time.sleep(0.02)
        if veth in _links():
            raise ClusterError(f"{name}: link {veth} of the old host does not go away")
        hdir = self.state_dir / name
        for sub in ("lib", "opt", "tmp"):
            (hdir / sub).mkdir(parents=True, exist_ok=True)
        if INSTALL_CACHE.is_dir() and not any((hdir / "opt").iterdir()):
            shutil.copytree(INSTALL_CACHE, hdir / "opt", symlinks=True, dirs_exist_ok=True)
        os.chmod(hdir / "tmp", 0o1777)
        key = hdir / "host_key"
        if not key.exists():
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
        (hdir / "sshd_config").write_text(_sshd_config(addr, key, self.state_dir / "authorized_keys"))
        (hdir / "init.sh").write_text(_init_script(name, hdir, self.state_dir / "quiet.rc"))
        os.chmod(hdir / "init.sh", 0o755)

        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
        _run("ip", "link", "set", veth, "master", BRIDGE, "up")
        _run("ip", "link", "set", f"{veth}p", "netns", ns)
        _run("ip", "-n", ns, "link", "set", f"{veth}p", "name", "eth0")
        # A stable MAC per host: peers' ARP caches stay right when a host is rebuilt.
        _run("ip", "-n", ns, "link", "set", "eth0", "address", f"02:77:00:00:00:{10 + i:02x}")
        _run("ip", "-n", ns, "addr", "add", f"{addr}/{SUBNET.prefixlen}", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        log = open(hdir / "host.log", "ab")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, "unshare", "--pid", "--fork", "--kill-child",
             "--mount-proc", "--uts", "--mount", "--propagation", "private", str(hdir / "init.sh")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 15
        while not _port_open(addr, 22, timeout=0.5):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = (hdir / "host.log").read_text()[-500:]
                raise ClusterError(f"{name}: sshd did not come up on {addr}:22: {tail.strip()}")
            time.sleep(0.05)
        progress(f"{name} {addr}: up (pid {proc.pid})")
        host_key = Path(f"{key}.pub").read_text().split()[:2]
        return {"name": name, "address": addr, "ns": ns, "pid": proc.pid,
                "host_key": " ".join(host_key)}


def _keep_install(state_dir: Path) -> None:
    """Save the first host's stamped install as INSTALL_CACHE (replacing the old one whole)."""
    done = sorted(state_dir.glob("n*/opt/venv/.installed"))
    if not done:
        return
    tmp = INSTALL_CACHE.with_name(INSTALL_CACHE.name + ".new")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(done[0].parents[1], tmp, symlinks=True)
        shutil.rmtree(INSTALL_CACHE, ignore_errors=True)
        tmp.rename(INSTALL_CACHE)
    except OSError:  # a full disk costs the next `up` a fresh install, nothing more
        shutil.rmtree(tmp, ignore_errors=True)


def _port_open(addr: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((addr, port), timeout=timeout):
            return True
    except OSError:
        return False


def _sshd_config(addr: str, host_key: Path, authorized: Path) -> str:
    return "\n".join([
        "Port 22", f"ListenAddress {addr}", f"HostKey {host_key}", "PidFile none",
        f"AuthorizedKeysFile {authorized}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no", "PrintMotd no", "UseDNS no", "MaxStartups 100:30:200",
        "MaxSessions 100", "Subsystem sftp internal-sftp", "",
    ])


def _init_script(name: str, hdir: Path, quiet_rc: Path) -> str:
    mounts = "\n".join(f"mount --bind {hdir / sub} {target}"
                       for sub, target in zip(("lib", "opt", "tmp"), PRIVATE_MOUNTS, strict=True))
    return f"""#!/bin/sh
# Host {name}: its own hostname, private dirs, quiet shell, and sshd as pid 1.
set -e
hostname {name}
# The machine's FUSE mounts copied into this mount namespace would keep their daemons alive
# after the machine unmounts them (a lazyfs test beside the netns tests waited on one).
awk '$3 ~ /^fuse/ {{print $2}}' /proc/self/mounts | while read -r m; do umount -l "$m" || true; done
{mounts}
[ -e /root/.bashrc ] && mount --bind {quiet_rc} /root/.bashrc
exec /usr/sbin/sshd -D -e -f {hdir / 'sshd_config'}
"""
