"""What TesseraDB installs on a host: the slow dependency install only when the dependency wheels
changed, Tessera's wheel whenever it changed, nothing when the host's stamp matches. The remote
here is a recording stand-in with a real file for the stamp; the real SSH path is exercised by
every e2e run (tests/test_harness_e2e.py)."""

from pathlib import Path

from harness.cluster import Host
from harness.control import Result
from harness.deployment import ROOT
from harness.systems.tessera.deployment import TesseraDB


class RecordingRemote:
    def __init__(self, stamp_file: Path, python: str = "3 11\n"):
        self.stamp_file, self.python = stamp_file, python
        self.commands: list[str] = []
        self.has_pip = True  # the venv's bin/pip is there

    def run(self, argv, **kw):
        cmd = " ".join(argv)
        self.commands.append(cmd)
        out = self.stamp_file.read_text() if argv[0] == "cat" and self.stamp_file.exists() else ""
        if argv[:2] == ["python3", "-c"]:
            out = self.python
        return Result("h1", cmd, 0, out, "")

    def sh(self, script, **kw):
        self.commands.append(script)
        if "cat" in script and ".installed" in script:  # the stamp, read only over a pip
            out = self.stamp_file.read_text() if (
                self.has_pip and self.stamp_file.exists()) else ""
            return Result("h1", script, 0, out, "")
        if ".installed" in script:
            self.stamp_file.write_text(script.split("echo ", 1)[1].split(" > ")[0] + "\n")
            self.has_pip = True
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
    return [c for c in remote.commands if ".installed" not in c
            and ("pip" in c or "-m venv" in c or c.startswith("put"))]


def test_install_reinstalls_only_what_changed(tmp_path):
    remote = RecordingRemote(tmp_path / "stamp")
    first = _install(tmp_path, remote, _wheels(tmp_path / "a", b"t1", b"d1"))
    assert any("python3 -m venv" in c for c in first), first
    assert any("[host,pysyncobj]" in c and "--no-deps" not in c for c in first), first

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


def test_a_host_whose_python_cannot_take_the_wheels_is_refused_before_any_copy(tmp_path):
    import pytest

    from harness.cluster import ClusterError

    d = tmp_path / "w"
    wheels = _wheels(d, b"t", b"d")
    (d / "msgspec-0.22.0-any.whl").rename(d / "msgspec-0.18.6-cp311-cp311-manylinux_2_17_x86_64.whl")
    wheels = sorted(d.iterdir())
    for python, words in (("3 9\n", "has Python 3.9, but the wheelhouse's compiled wheels are for "
                                     "Python 3.11"),
                          ("", "no python3 answered")):
        remote = RecordingRemote(tmp_path / "stamp", python=python)
        with pytest.raises(ClusterError, match=words):
            _install(tmp_path, remote, wheels)
        assert not any(c.startswith("put") or "pip" in c for c in remote.commands)
    assert _install(tmp_path, RecordingRemote(tmp_path / "stamp2"), wheels)  # 3.11 installs


def test_the_wheelhouse_is_built_for_the_hosts_python(tmp_path, monkeypatch):
    """Hosts on this machine's Python get the usual wheelhouse; hosts on another get one built
    by an interpreter of theirs, in its own directory; none found, or hosts that disagree, is a
    clear error. (The build itself is stubbed here: tests/test_harness_e2e.py builds one for
    Python 3.12 hosts for real.)"""
    import sys

    import pytest

    from harness import wheelhouse as db
    from harness.cluster import ClusterError

    built = []
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(db, "build_wheelhouse",
                        lambda dest, project, log, python=sys.executable: built.append((dest, python)))
    mine = f"{sys.version_info[0]} {sys.version_info[1]}\n"
    db.wheelhouse_for({"n1": mine, "n2": mine}, tmp_path, log=lambda m: None)
    db.wheelhouse_for({"n1": "3 99\n"}, tmp_path, log=lambda m: None,
                      find=lambda v: f"/opt/python{v}")
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert built == [(tmp_path / f"wheels-py{here}", sys.executable),
                     (tmp_path / "wheels-py3.99", "/opt/python3.99")]
    with pytest.raises(ClusterError, match="no python3.99 to build wheels for them"):
        db.wheelhouse_for({"n1": "3 99\n"}, tmp_path, find=lambda v: None)
    with pytest.raises(ClusterError, match="different Pythons: n1 3 11, n2 3 12"):
        db.wheelhouse_for({"n1": "3 11\n", "n2": "3 12\n"}, tmp_path)
    with pytest.raises(ClusterError, match="no python3 answered"):
        db.wheelhouse_for({"n1": ""}, tmp_path)


def test_find_python_takes_one_that_runs_and_says_its_version(tmp_path, monkeypatch):
    """PATH first, then pyenv's versions newest first; a candidate that fails (a pyenv shim
    for a version pyenv will not run) or answers another version is passed over."""
    from harness.wheelhouse import find_python

    def exe(path: Path, says: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"#!/bin/sh\n{says}\n")
        path.chmod(0o755)

    versions = tmp_path / ".pyenv" / "versions"
    exe(tmp_path / "bin" / "python3.12", "echo 'pyenv: python3.12: command not found' >&2; exit 127")
    exe(versions / "3.12.10" / "bin" / "python3.12", "echo 3 11")  # lies: passed over
    exe(versions / "3.12.1" / "bin" / "python3.12", "echo 3 12")
    exe(versions / "3.9.18" / "bin" / "python3.9", "echo 3 9")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert find_python("3.12") == str(versions / "3.12.1/bin/python3.12")
    assert find_python("3.9") == str(versions / "3.9.18/bin/python3.9")
    assert find_python("3.7") is None


def test_a_wheelhouse_built_from_the_same_source_is_kept(tmp_path, monkeypatch):
    """The build is skipped exactly when the SOURCE stamp equals the source's digest: a package
    file or pyproject.toml edited, or another interpreter, rebuilds; bytecode caches do not.
    (pip is stubbed; the end-to-end runs build for real.)"""
    import subprocess

    from harness import wheelhouse as db

    project, dest = tmp_path / "project", tmp_path / "wheels"
    (project / "node" / "__pycache__").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'tessera'\n")
    (project / "node" / "a.py").write_text("x = 1\n")
    builds = []

    def pip(argv, **kw):
        builds.append(argv[0])
        (dest / f"tessera-0-{len(builds)}.whl").write_text("")
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(db.subprocess, "run", pip)

    def build(python="py"):
        return db.build_wheelhouse(dest, project, lambda m: None, python=python)

    build()
    assert len(builds) == 1 and (dest / "SOURCE").read_text().strip() == db.source_digest(project, "py")
    assert [w.name for w in build()] == ["tessera-0-1.whl"] and len(builds) == 1
    (project / "node" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    build()
    assert len(builds) == 1
    (project / "node" / "a.py").write_text("x = 2\n")
    build()
    (project / "pyproject.toml").write_text("[project]\nname = 'tessera2'\n")
    build()
    build(python="other")
    assert builds == ["py", "py", "py", "other"]
    assert (dest / "SOURCE").read_text().strip() == db.source_digest(project, "other")
    assert [w.name for w in dest.glob("tessera-*.whl")] == ["tessera-0-4.whl"]  # old ones gone


def test_a_stamp_over_a_venv_without_pip_is_no_stamp(tmp_path):
    """An install cut short (or a copy of one) can leave the stamp and no pip: the host is
    installed again from the venv up, not handed a pip that is not there."""
    remote = RecordingRemote(tmp_path / "stamp")
    _install(tmp_path, remote, _wheels(tmp_path / "a", b"t1", b"d1"))
    remote.has_pip = False
    again = _install(tmp_path, remote, _wheels(tmp_path / "b", b"t2", b"d1"))
    assert any("python3 -m venv" in c for c in again), again

