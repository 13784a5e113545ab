"""Daemon configuration: Kudu-named flags, a TOML file with the same keys, flags win."""

import argparse
import subprocess
import sys

import pytest

from node.server import daemon_cli


def parse(argv):
    p = argparse.ArgumentParser()
    daemon_cli.configure(p, "tserver")
    return p.parse_args(argv)


def test_defaults_follow_kudu_and_fsync_is_on():
    v = daemon_cli.resolve(parse(["--data-dir", "/d"]))
    opts = daemon_cli.build_options(v, "tserver")
    assert opts.rpc_port == 7050 and opts.heartbeat_interval_ms == 1000
    assert opts.replica.heartbeat_interval_ticks * 100 == 500
    assert opts.replica.leader_failure_max_missed_heartbeat_periods == 3
    assert opts.replica.log.log_force_fsync_all is True
    assert opts.replica.log.log_segment_size_mb == 8
    assert opts.replica.faults.enabled() == [] and v["unlock-unsafe-flags"] is False
    assert opts.replica.clock_max_error_us == 1000
    # a snapshot every 20,000 entries or 1 GiB of them (Kudu's flush_threshold_mb)
    assert (opts.replica.snapshot_interval_entries, opts.replica.snapshot_interval_mb) == (20_000, 1024)


def test_clock_max_error_reaches_the_replica_and_may_not_be_negative():
    v = daemon_cli.resolve(parse(["--data-dir", "/d", "--clock-max-error-us", "250000"]))
    assert daemon_cli.build_options(v, "tserver").replica.clock_max_error_us == 250000
    with pytest.raises(ValueError, match="clock-max-error-us must be >= 0"):
        daemon_cli.resolve(parse(["--data-dir", "/d", "--clock-max-error-us", "-1"]))


def test_the_frame_limit_reaches_the_replica_and_must_hold_a_copy_chunk():
    v = daemon_cli.resolve(parse(["--data-dir", "/d", "--rpc-max-message-size", str(8 << 20)]))
    opts = daemon_cli.build_options(v, "tserver").replica
    assert opts.rpc_max_message_size == 8 << 20
    assert opts.core_config("u").max_entry_bytes == (8 << 20) - (64 << 10)
    with pytest.raises(ValueError, match="rpc-max-message-size must be at least 1048576"):
        daemon_cli.resolve(parse(["--data-dir", "/d", "--rpc-max-message-size", "1000"]))
    with pytest.raises(ValueError, match="chunk-size-bytes must leave 65536 bytes"):
        daemon_cli.resolve(parse(["--data-dir", "/d", "--rpc-max-message-size", str(4 << 20)]))


def test_gc_thresholds_default_to_rare_full_collections_and_may_be_set():
    v = daemon_cli.resolve(parse(["--data-dir", "/d"]))
    assert daemon_cli.gc_thresholds(v) == (10000, 10, 100)
    v = daemon_cli.resolve(parse(["--data-dir", "/d", "--gc-thresholds", "700,10,10"]))
    assert daemon_cli.gc_thresholds(v) == (700, 10, 10)


def test_toml_file_and_flags_override(tmp_path):
    cfg = tmp_path / "ts.toml"
    cfg.write_text('data_dir = "/x"\nmasters = ["a:1", "b:2"]\nlog_force_fsync_all = false\n'
                   'read-mode = "lease"\n')
    v = daemon_cli.resolve(parse(["--config", str(cfg), "--read-mode", "linearizable"]))
    opts = daemon_cli.build_options(v, "tserver")
    assert str(opts.data_dir) == "/x" and opts.masters == [("a", 1), ("b", 2)]
    assert opts.replica.log.log_force_fsync_all is False
    assert opts.replica.read_mode == "linearizable"
    v = daemon_cli.resolve(parse(["--config", str(cfg), "--group-commit-queue-size-bytes", "4096"]))
    assert daemon_cli.build_options(v, "tserver").replica.log.group_commit_queue_size_bytes == 4096


@pytest.mark.parametrize("toml,argv,message", [
    ('bogus_key = 1\n', ["--data-dir", "/d"], "unknown key 'bogus_key'"),
    ('', [], "--data-dir is required"),
    ('', ["--data-dir", "/d", "--read-mode", "sloppy"], "--read-mode must be"),
    ('', ["--data-dir", "/d", "--raft-heartbeat-interval-ms", "250"], "multiple of 100"),
    ('data_dir = [', ["--data-dir", "/d"], "cannot read config"),
    ('', ["--data-dir", "/d", "--gc-thresholds", "700,10"], "--gc-thresholds must be three"),
    ('', ["--data-dir", "/d", "--gc-thresholds", "700,-1,10"], "--gc-thresholds must be three"),
    ('', ["--data-dir", "/d", "--snapshot-interval-mb", "0"], "--snapshot-interval-mb must be pos"),
    ('', ["--data-dir", "/d", "--snapshot-interval-entries", "-5"], "interval-entries must be pos"),
    ('', ["--data-dir", "/d", "--log-retain-mb", "-1"], "--log-retain-mb must be >= 0"),
    ('', ["--data-dir", "/d", "--group-commit-queue-size-bytes", "0"],
     "--group-commit-queue-size-bytes must be positive"),
])
def test_bad_configuration_is_a_clear_error(tmp_path, toml, argv, message):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    with pytest.raises(ValueError, match=message):
        daemon_cli.resolve(parse(["--config", str(cfg), *argv]))


def test_cli_reports_bad_flags_with_exit_254():
    out = subprocess.run([sys.executable, "-m", "harness.cli", "tserver", "--data-dir", "/d",
                          "--log-force-fsync-all", "maybe"], capture_output=True, text=True)
    assert out.returncode == 254 and "not a boolean" in out.stderr
    out = subprocess.run([sys.executable, "-m", "harness.cli", "tserver", "--data-dir", "/d",
                          "--rpc-addr", "host:notaport"], capture_output=True, text=True)
    assert out.returncode == 254 and "bad address" in out.stderr


def test_flag_defaults_are_the_options_classes_defaults():
    """A flag named as a field of ServerOptions, ReplicaOptions or LogOptions has that field's
    default, so the daemon and an engine built in code (the simulator, the tests) agree."""
    import dataclasses

    import msgspec

    from node.replica.replica import ReplicaOptions
    from node.server.base import ServerOptions
    from node.server.daemon_cli import FLAGS, build_options, resolve
    from node.wal import LogOptions

    fields = {f.name: f.default for cls in (ServerOptions, ReplicaOptions)
              for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    fields.update({f.name: f.default for f in msgspec.structs.fields(LogOptions)
                   if f.default is not msgspec.NODEFAULT})
    shared = [n for n in FLAGS if n.replace("-", "_") in fields]
    assert len(shared) >= 15, shared
    for name in shared:
        assert FLAGS[name][1] == fields[name.replace("-", "_")], name
    # and the options the daemon builds from its defaults are the classes' defaults
    import argparse

    from node.server.daemon_cli import configure
    p = argparse.ArgumentParser()
    configure(p, "tserver")
    built = build_options(resolve(p.parse_args(["--data-dir", "/tmp/x"])), "tserver")
    assert built.replica.log == LogOptions(faults=built.replica.log.faults)
    assert dataclasses.replace(built.replica, faults=ReplicaOptions().faults,
                               log=ReplicaOptions().log) == ReplicaOptions()
