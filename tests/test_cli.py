"""The `tessera` entry point: help that tells the truth and clear errors for bad input."""

import subprocess
import sys

from harness.cli import COMMANDS, main


def test_help_lists_every_registered_command():
    out = subprocess.run([sys.executable, "-m", "harness.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for name in COMMANDS:
        assert name in out.stdout


def test_unknown_command_is_a_clear_error(capsys):
    assert main(["no-such-command"]) == 2
    assert "unknown command 'no-such-command'" in capsys.readouterr().err


def test_no_command_prints_usage_and_fails(capsys):
    assert main([]) == 2
    assert "usage: tessera" in capsys.readouterr().out


def test_every_registered_command_module_imports():
    import importlib

    for module, _ in COMMANDS.values():
        mod = importlib.import_module(module)
        assert callable(mod.configure) and callable(mod.run)
