"""The code probes a chaos run's daemons fired (node.probes), read from the run directory: each
daemon's `--probes-file`, collected with its log as nodes/<host>/<daemon>.probes, one probe name
a line on its first hit (so a daemon killed with SIGKILL has said where it had been); and the
client's, CLIENT_FILE, since Tessera's client library runs in the harness's own process and its
rare branches (a coalesced batch, a retry, a copied value) are the engine's probes too."""

from __future__ import annotations

from pathlib import Path

from node import probes

CLIENT_FILE = "client.probes"  # in the run directory: the probes the harness's client fired


def write_client_probes(run_dir: Path, hits: dict[str, int]) -> None:
    """The probes the run's client fired, one name a line, if it fired any (another system's
    client has none)."""
    if hits:
        (run_dir / CLIENT_FILE).write_text("".join(f"{name}\n" for name in sorted(hits)))


def run_probes(run_dir: Path) -> dict | None:
    """node.probes.summarize over the run's daemons and its client, with what each fired
    ("by_daemon": host/daemon -> names, the client's as "client"); None for a run without
    probe files (another system, or a run recorded before daemons wrote them)."""
    files = sorted(run_dir.glob("nodes/*/*.probes"))
    if not files:
        return None
    fired = {f"{f.parent.name}/{f.stem}": _names(f) for f in files}
    if (client := run_dir / CLIENT_FILE).exists():
        fired["client"] = _names(client)
    return {**probes.summarize([dict.fromkeys(names, 1) for names in fired.values()]),
            "by_daemon": fired}


def check_alarms(run_dir: Path) -> dict | None:
    """A run-level check: the alarms (node.probes.ALARMS) the run's client or daemons raised,
    each a bug the moment its branch is taken, whose only symptom in the history is a caller
    waiting out its deadline, which every checker must accept. Invalid when any was raised;
    None for a run without probe files (another system)."""
    files = sorted(run_dir.glob("nodes/*/*.probes"))
    client = run_dir / CLIENT_FILE
    fired = {f"{f.parent.name}/{f.stem}": _names(f) for f in files}
    if client.exists():
        fired["client"] = _names(client)
    if not files and not fired:
        return None
    errors = [{"type": "alarm", "where": where, "alarm": name,
               "explanation": f"{where}: {probes.ALARMS[name]} ({name})"}
              for where, names in sorted(fired.items()) for name in names if name in probes.ALARMS]
    return {"checker": "alarms", "verdict": "invalid" if errors else "valid", "errors": errors,
            "read": sorted(fired)}


def _names(path: Path) -> list[str]:
    """The probe names a probes file holds, each once."""
    return sorted(set(path.read_text(errors="replace").split()))


def fired(results: dict) -> list[str]:
    """The probes a run's results.json says fired (none when it has no probes)."""
    reached = results.get("probes")
    return sorted(reached["runs"]) if isinstance(reached, dict) and isinstance(
        reached.get("runs"), dict) else []


def across(runs: list[dict]) -> dict:
    """node.probes.summarize over many runs' results.json: what a store's runs reached."""
    return {**probes.summarize([dict.fromkeys(fired(r), 1) for r in runs if fired(r)]),
            "runs_with_probes": sum(1 for r in runs if fired(r))}
