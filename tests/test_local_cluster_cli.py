"""`tessera local-cluster`: counts are --num-masters/--num-tservers (--masters is an address
list everywhere else), and --flag takes NAME=VALUE as `tessera test --flag` does."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from node.tools.local_cluster_cli import daemon_flag


def test_flags_take_the_config_keys_form_and_reach_the_daemons_command_line():
    assert daemon_flag("log_force_fsync_all=false") == "--log-force-fsync-all=false"
    assert daemon_flag("log-segment-size-mb=1") == "--log-segment-size-mb=1"
    assert daemon_flag("--raft-heartbeat-interval-ms=100") == "--raft-heartbeat-interval-ms=100"
    for bad in ("no_such_flag=1", "log_force_fsync_all"):
        with pytest.raises(ValueError, match="want NAME=VALUE"):
            daemon_flag(bad)


def test_a_bad_flag_is_one_clear_line_and_starts_nothing(tmp_path, capsys):
    code = main(["local-cluster", "up", "--dir", str(tmp_path / "lc"), "--flag", "fsync=off"])
    assert code == 2 and "want NAME=VALUE" in capsys.readouterr().err
    assert not (tmp_path / "lc").exists()


@pytest.mark.slow
@pytest.mark.e2e
def test_up_with_counts_and_a_flag_then_down(tmp_path, capsys):
    lc = tmp_path / "lc"
    try:
        assert main(["local-cluster", "up", "--dir", str(lc), "--num-masters", "1",
                     "--num-tservers", "2", "--flag", "log_force_fsync_all=false"]) == 0
        doc = json.loads((lc / "cluster.json").read_text())
        assert [d["kind"] for d in doc["daemons"]] == ["master", "tserver", "tserver"]
        assert doc["flags"] == ["--log-force-fsync-all=false"]
    finally:
        assert main(["local-cluster", "down", "--dir", str(lc)]) == 0
