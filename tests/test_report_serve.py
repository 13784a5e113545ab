"""`tessera serve`: the store as static files on loopback."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from reports import serve

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_bind_to_loopback_port_8080():
    parser = argparse.ArgumentParser()
    serve.configure(parser)
    args = parser.parse_args([])
    assert (args.bind, args.port, args.store) == ("127.0.0.1", 8080, "store")


@pytest.mark.e2e
def test_serves_store_files_and_404s_the_rest(tmp_path):
    (tmp_path / "index.html").write_text("<h1>runs</h1>")
    (tmp_path / "t" / "r").mkdir(parents=True)
    (tmp_path / "t" / "r" / "report.html").write_text("<p>VALID</p>")
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "serve", str(tmp_path), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:(\d+)/index\.html", line)
        assert url, line
        base = f"http://127.0.0.1:{url.group(1)}"
        with urllib.request.urlopen(f"{base}/index.html", timeout=10) as r:
            assert r.status == 200 and b"runs" in r.read()
        with urllib.request.urlopen(f"{base}/t/r/report.html", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/html") and r.read() == b"<p>VALID</p>"
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/nope.html", timeout=10)
        assert missing.value.code == 404
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()
        proc.stderr.close()


def test_missing_store_is_an_error(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    serve.configure(parser)
    assert serve.run(parser.parse_args([str(tmp_path / "none")])) == 254
    assert "no such directory" in capsys.readouterr().err
