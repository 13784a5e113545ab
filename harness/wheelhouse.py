"""The wheelhouse every host installs from: the control machine builds the project's wheel and
the engine's dependencies once per Python version and source digest (cached), and every host
installs its uploaded copy with `pip --no-index`, so no host ever needs a package index. A
host whose Python has no matching wheelhouse gets one built with a matching interpreter found
here, or a clear error.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from harness.cluster import ClusterError

PACKAGES = ("node", "harness", "nemeses", "workloads", "reports")  # pyproject's packages.find
HOST_EXTRAS = "host,pysyncobj"  # what every host installs: one wheelhouse serves every system


def cache_dir() -> Path:
    """Where this machine keeps what it builds for the hosts: $TESSERA_CACHE_DIR, else
    $XDG_CACHE_HOME/tessera, else ~/.cache/tessera. Wheels are a function of the source and the
    Python that built them, not of a store, so every store and run shares them."""
    if os.environ.get("TESSERA_CACHE_DIR"):
        return Path(os.environ["TESSERA_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tessera"


def wheel_dir(version: str = f"{sys.version_info[0]}.{sys.version_info[1]}") -> Path:
    """The cached wheelhouse for hosts on Python `version` ("3.11"; this one's by default)."""
    return cache_dir() / f"wheels-py{version}"


def source_digest(project: Path, python: str) -> str:
    """What the project's wheel is made of: pyproject.toml and every file of its packages
    (__pycache__ aside), the interpreter that builds it and the extras it carries. Equal
    digests give equal wheels (build_wheelhouse fixes the build's timestamp)."""
    h = hashlib.sha256(f"{python}\0{HOST_EXTRAS}\0".encode())
    files = [project / "pyproject.toml"]
    for package in PACKAGES:
        for folder, dirs, names in os.walk(project / package):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            files += [Path(folder) / n for n in sorted(names)]
    for f in files:
        h.update(str(f.relative_to(project)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def build_wheelhouse(dest: Path, project: Path, log=print, python: str = sys.executable) -> list[Path]:
    """Wheels for the project and its engine dependencies, built on this machine by `python`
    (whose version and ABI the compiled ones get). A wheelhouse already built from the same
    source (its SOURCE stamp equals source_digest) is kept as it is: the build is ~5 s of every
    run otherwise. Concurrent runs take turns on a lock in `dest`."""
    import fcntl

    dest.mkdir(parents=True, exist_ok=True)
    stamp = dest / "SOURCE"
    with open(dest / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = source_digest(project, python)
        if stamp.exists() and stamp.read_text().strip() == digest:
            log(f"wheels in {dest} are current (source {digest[:12]})")
            return check_wheelhouse(dest)
        stamp.unlink(missing_ok=True)  # a build cut short leaves no stamp behind
        for old in dest.glob("tessera-*.whl"):
            old.unlink()  # the project's wheel is rebuilt each time; dependencies are reused
        shutil.rmtree(project / "build", ignore_errors=True)  # stale build/lib would leak into it
        log(f"building wheels into {dest}" + ("" if python == sys.executable else f" with {python}"))
        # A fixed timestamp makes the wheel's bytes a function of the source alone, so hosts
        # that hold the same digest (harness.deployment.Deployment._install) keep their install instead of redoing it.
        env = {**os.environ, "SOURCE_DATE_EPOCH": "315532800"}
        p = subprocess.run([python, "-m", "pip", "wheel", "-q", "-w", str(dest), f"{project}[{HOST_EXTRAS}]"],
                           capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise ClusterError(f"building the wheelhouse failed: {p.stderr.strip()[-800:]}")
        wheels = check_wheelhouse(dest)
        stamp.write_text(digest + "\n")
        return wheels


PYTHON_VERSION = ["python3", "-c", "import sys; print(*sys.version_info[:2])"]


def python_version(where: str, line: str) -> str:
    """"3.11" from PYTHON_VERSION's answer ("3 11"); ClusterError when none came."""
    parts = line.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ClusterError(f"{where}: no python3 answered ({line.strip() or 'no output'}); "
                           "install python3 and python3-venv there")
    return ".".join(parts)


def wheelhouse_for(hosts_versions: dict[str, str], project: Path, log=print,
                   find=None) -> list[Path]:
    """The wheelhouse the hosts can install, in cache_dir(): built by this Python when theirs
    is the same, else by an interpreter of their version found here (`find_python`); one
    directory per Python version. `hosts_versions`: host -> `python3`'s "3 11" line there."""
    lines = {v.strip() for v in hosts_versions.values()}
    if len(lines) != 1:
        raise ClusterError("the hosts run different Pythons: " + ", ".join(
            f"{h} {v.strip() or 'none'}" for h, v in sorted(hosts_versions.items())))
    version = python_version("the hosts", lines.pop())
    if version == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return build_wheelhouse(wheel_dir(version), project, log)
    python = (find or find_python)(version)
    if python is None:
        raise ClusterError(
            f"the hosts run Python {version} and this machine has no python{version} to build "
            f"wheels for them (looked on PATH and in ~/.pyenv/versions): install one, or build a "
            f"wheelhouse on a machine with it (`python{version} -m pip wheel -w DIR "
            f"'.[{HOST_EXTRAS}]'`) and pass --wheelhouse DIR")
    log(f"the hosts run Python {version}, this machine {sys.version.split()[0]}")
    return build_wheelhouse(wheel_dir(version), project, log, python=python)


def find_python(version: str) -> str | None:
    """An interpreter of `version` ("3.12") here that runs and says so: pythonX.Y on PATH (a
    pyenv shim there may name a version pyenv will not run), else pyenv's newest."""
    pyenv = sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"),
                   key=lambda p: [int(x) for x in p.parts[-3].split(".") if x.isdigit()])
    for candidate in [shutil.which(f"python{version}"), *map(str, reversed(pyenv))]:
        if candidate is None:
            continue
        try:
            said = subprocess.run([candidate, *PYTHON_VERSION[1:]], capture_output=True,
                                  text=True, timeout=30).stdout.split()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ".".join(said) == version:
            return candidate
    return None


def check_wheelhouse(path: Path) -> list[Path]:
    wheels = sorted(Path(path).glob("*.whl"))
    if not any(w.name.startswith("tessera-") for w in wheels):
        raise ClusterError(f"no tessera wheel in {path} (build one with `pip wheel -w {path} .`)")
    return wheels


def check_python(host: str, version_line: str, wheels: list[Path]) -> None:
    """ClusterError unless `host`'s python3 (`version_line`: "3 11") can install the compiled
    wheels (cpXY tags): a wheelhouse built by another Python fails there in pip, late and
    obscurely."""
    built = sorted({tag[2:] for w in wheels for tag in w.name.split("-")[2].split(".")
                    if tag.startswith("cp") and tag[2:].isdigit()})
    have = python_version(host, version_line)
    if built and have.replace(".", "") not in built:
        want = " or ".join(f"{v[0]}.{v[1:]}" for v in built)
        raise ClusterError(
            f"{host} has Python {have}, but the wheelhouse's compiled wheels are for Python "
            f"{want}: give the hosts python{want} (the Vagrantfile's Debian 12 boxes have 3.11), "
            f"or build the wheelhouse with that Python (`python{have} -m pip wheel -w DIR "
            f"'.[{HOST_EXTRAS}]'`, then --wheelhouse DIR)")


def wheels_digest(wheels: list[Path]) -> str:
    h = hashlib.sha256()
    for w in sorted(wheels):
        h.update(w.name.encode() + b"\0" + w.read_bytes())
    return h.hexdigest()[:16]
