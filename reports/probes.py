"""The code probes a chaos run's daemons fired (node.probes), read from the run directory: each
daemon's `--probes-file`, collected with its log as nodes/<host>/<daemon>.probes, one probe name
a line on its first hit (so a daemon killed with SIGKILL has said where it had been)."""

from __future__ import annotations

from pathlib import Path

from node import probes


def run_probes(run_dir: Path) -> dict | None:
    """node.probes.summarize over the run's daemons, with what each fired ("by_daemon":
    host/daemon -> names); None for a run without probe files (another system, or a run
    recorded before daemons wrote them)."""
    files = sorted(run_dir.glob("nodes/*/*.probes"))
    if not files:
        return None
    fired = {f"{f.parent.name}/{f.stem}": sorted(set(f.read_text(errors="replace").split()))
             for f in files}
    return {**probes.summarize([dict.fromkeys(names, 1) for names in fired.values()]),
            "by_daemon": fired}


def fired(results: dict) -> list[str]:
    """The probes a run's results.json says fired (none when it has no probes)."""
    reached = results.get("probes")
    return sorted(reached["runs"]) if isinstance(reached, dict) and isinstance(
        reached.get("runs"), dict) else []


def across(runs: list[dict]) -> dict:
    """node.probes.summarize over many runs' results.json: what a store's runs reached."""
    return {**probes.summarize([dict.fromkeys(fired(r), 1) for r in runs if fired(r)]),
            "runs_with_probes": sum(1 for r in runs if fired(r))}
