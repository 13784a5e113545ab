"""What TesseraDB installs on a host: the slow dependency install only when the dependency wheels
changed, Tessera's wheel whenever it changed, nothing when the host's stamp matches. The remote
here is a recording stand-in with a real file for the stamp; the real SSH path is exercised by
every e2e run (tests/test_harness_e2e.py)."""

from pathlib import Path

from harness.cluster import Host
from harness.control import Result
from harness.db import ROOT, TesseraDB


class RecordingRemote:
    def __init__(self, stamp_file: Path):
        self.stamp_file = stamp_file
        self.commands: list[str] = []

    def run(self, argv, **kw):
        cmd = " ".join(argv)
        self.commands.append(cmd)
        out = self.stamp_file.read_text() if argv[0] == "cat" and self.stamp_file.exists() else ""
        return Result("h1", cmd, 0, out, "")

    def sh(self, script, **kw):
        self.commands.append(script)
        if ".installed" in script:
            self.stamp_file.write_text(script.split("echo ", 1)[1].split(" > ")[0] + "\n")
        return Result("h1", script, 0, "", "")

    def put(self, local, remote):
        self.commands.append(f"put {Path(local).name}")


def _wheels(d: Path, tessera: bytes, dep: bytes) -> list[Path]:
    d.mkdir(exist_ok=True)
    (d / "tessera-0.1.0-py3-none-any.whl").write_bytes(tessera)
    (d / "msgspec-0.22.0-any.whl").write_bytes(dep)
    return sorted(d.iterdir())


def _install(tmp_path, remote, wheels) -> list[str]:
    remote.commands.clear()
    db = TesseraDB([Host("h1", "10.77.0.11")], wheels, {"h1": remote}, masters=1, log=lambda m: None)
    db._install(db.hosts[0])
    return [c for c in remote.commands if "pip" in c or "-m venv" in c or c.startswith("put")]


def test_install_reinstalls_only_what_changed(tmp_path):
    remote = RecordingRemote(tmp_path / "stamp")
    first = _install(tmp_path, remote, _wheels(tmp_path / "a", b"t1", b"d1"))
    assert any("python3 -m venv" in c for c in first), first
    assert any("[host]" in c and "--no-deps" not in c for c in first), first

    assert _install(tmp_path, remote, _wheels(tmp_path / "b", b"t1", b"d1")) == []

    only_tessera = _install(tmp_path, remote, _wheels(tmp_path / "c", b"t2", b"d1"))
    pips = [c for c in only_tessera if "pip" in c]
    assert len(pips) == 1 and "--no-deps" in pips[0] and "tessera-0.1.0" in pips[0], only_tessera
    assert not any("python3 -m venv" in c for c in only_tessera)

    deps_changed = _install(tmp_path, remote, _wheels(tmp_path / "d", b"t2", b"d2"))
    assert any("python3 -m venv" in c for c in deps_changed)
    assert not any("--no-deps" in c for c in deps_changed)


def test_a_host_with_an_old_style_stamp_gets_a_full_install(tmp_path):
    remote = RecordingRemote(tmp_path / "stamp")
    (tmp_path / "stamp").write_text("0123456789abcdef\n")
    done = _install(tmp_path, remote, _wheels(tmp_path / "a", b"t1", b"d1"))
    assert any("python3 -m venv" in c for c in done), done
    assert ROOT in " ".join(done)
