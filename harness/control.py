"""The one way the harness runs anything on a test host: SSH through paramiko.

Connections are opened once per host and reused (a command costs a few ms instead of a new
handshake). Commands are argument lists joined with shlex quoting, so values from a test's
configuration can never become shell syntax. Every command, its exit status and its output go to
the run's control log. A transient SSH failure before the command started is retried on a fresh
connection; once a command may have started it is never re-run, because many are not idempotent
(kill, iptables -A).
"""

from __future__ import annotations

import base64
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import paramiko

from harness.cluster import ClusterError, Host

CONNECT_TIMEOUT = 10.0
CONNECT_ATTEMPTS = 3
# sshd may send a command's exit status before the last of its output: the output is read until
# the channel's end-of-file, waiting this long past the exit for it. A background process the
# command left holding its stdout keeps the end-of-file away for good, hence a bound at all.
EOF_GRACE = 5.0


@dataclass(frozen=True)
class Result:
    host: str
    command: str
    exit_status: int
    stdout: str
    stderr: str


class Remote:
    """A reusable SSH connection to one host. Thread-safe: paramiko multiplexes channels."""

    def __init__(self, host: Host, log: Callable[[str], None] | None = None):
        self.host = host
        self.log = log or (lambda _line: None)
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    def _connect(self) -> paramiko.SSHClient:
        h = self.host
        client = paramiko.SSHClient()
        if h.host_key:
            kind, b64 = h.host_key.split()[:2]
            key = paramiko.PKey.from_type_string(kind, base64.b64decode(b64))
            client.get_host_keys().add(h.address if h.port == 22 else f"[{h.address}]:{h.port}",
                                       kind, key)
            client.set_missing_host_key_policy(paramiko.RejectPolicy())
        else:  # hosts the harness did not make: trust on first use, like ssh's accept-new
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        last: Exception | None = None
        for attempt in range(CONNECT_ATTEMPTS):
            try:
                sock = socket.create_connection((h.address, h.port), timeout=CONNECT_TIMEOUT)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                client.connect(h.address, h.port, username=h.user, key_filename=h.key_file or None,
                               sock=sock, timeout=CONNECT_TIMEOUT, banner_timeout=CONNECT_TIMEOUT,
                               auth_timeout=CONNECT_TIMEOUT, look_for_keys=not h.key_file,
                               allow_agent=False)
                return client
            except paramiko.BadHostKeyException as e:
                raise ClusterError(f"{h.name} ({h.address}): host key mismatch: {e}") from None
            except paramiko.AuthenticationException as e:
                raise ClusterError(f"{h.name} ({h.address}): SSH authentication failed as "
                                   f"{h.user} with key {h.key_file or '(default)'}: {e}") from None
            except (OSError, paramiko.SSHException) as e:
                last = e
                time.sleep(0.2 * (attempt + 1))
        raise ClusterError(f"{h.name} ({h.address}:{h.port}): unreachable over SSH: {last}")

    def _transport(self) -> paramiko.Transport:
        """The host's SSH connection, made again only once it is gone. A live one is never
        replaced, even after a session failed to open on it: the commands other threads run
        on it would lose their channels and read as ended without an exit status."""
        with self._lock:
            t = self._client.get_transport() if self._client else None
            if t is None or not t.is_active():
                if self._client:
                    # what ended it: an EOFError is the server closing the connection
                    why = t.get_exception() if t is not None else None
                    self._client.close()
                    cause = repr(why) if why else "no error kept"
                    self.log(f"{self.host.name}: SSH connection lost ({cause}), connecting again")
                self._client = self._connect()
            return self._client.get_transport()

    def run(self, argv: Sequence[str], *, timeout: float = 60.0, check: bool = True,
            stdin: bytes | None = None) -> Result:
        """Run a command given as arguments (quoted here)."""
        return self.sh(shlex.join(argv), timeout=timeout, check=check, stdin=stdin)

    def sh(self, script: str, *, timeout: float = 60.0, check: bool = True,
           stdin: bytes | None = None) -> Result:
        """Run a literal shell script. Only for fixed text: quote values with shlex.quote."""
        chan = None
        # With no input to send, the command's stdin is /dev/null and no EOF is sent: paramiko
        # sends an EOF outside the channel's lock, so a command that ends at once (iptables -N)
        # could have its channel closed by the server first, and sshd drops the whole
        # connection for an EOF on a freed channel ("ieof packet referred to nonexistent
        # channel"), failing every command on it (about 4 in 1,000 fast ones from 8 threads).
        command = script if stdin is not None else f"exec </dev/null; {script}"
        for attempt in range(2):
            try:
                chan = self._transport().open_session(timeout=CONNECT_TIMEOUT)
                chan.exec_command(command)
                break
            except (paramiko.SSHException, OSError, EOFError) as e:
                if attempt:
                    raise ClusterError(f"{self.host.name}: cannot start command: {e}") from None
        assert chan is not None
        if stdin is not None:
            chan.sendall(stdin)
            chan.shutdown_write()  # the command reads to the end first: it cannot have ended
        out, err = bytearray(), bytearray()
        deadline = time.monotonic() + timeout
        exited: float | None = None  # when the exit status came
        while True:
            select.select([chan], [], [], 0.1)
            while chan.recv_ready():
                out += chan.recv(65536)
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
            if chan.exit_status_ready() and exited is None:
                exited = time.monotonic()
            drained = not chan.recv_ready() and not chan.recv_stderr_ready()
            # closed without an EOF: the connection died, and no EOF will come
            if exited is not None and drained and (chan.eof_received or chan.closed):
                break
            if exited is not None and drained and time.monotonic() - exited > EOF_GRACE:
                self.log(f"{self.host.name} $ {script}\n  output still open {EOF_GRACE:g}s "
                         "after the exit: a background process holds it")
                break
            if time.monotonic() > deadline:
                chan.close()
                self.log(f"{self.host.name} $ {script}\n  TIMEOUT after {timeout}s")
                raise ClusterError(f"{self.host.name}: command timed out after {timeout}s: {script}")
        status = chan.recv_exit_status()
        try:
            chan.close()
        except (paramiko.SSHException, OSError, EOFError):
            pass  # the connection died after the output: the status says so (-1) if it came first
        res = Result(self.host.name, script, status, out.decode(errors="replace"),
                     err.decode(errors="replace"))
        self.log(f"{self.host.name} $ {script}\n  exit {status}"
                 + (f"\n  out: {res.stdout.strip()[:2000]}" if res.stdout.strip() else "")
                 + (f"\n  err: {res.stderr.strip()[:2000]}" if res.stderr.strip() else ""))
        if check and status == -1:  # paramiko's status when none came
            raise ClusterError(f"{self.host.name}: `{script}` ended without an exit status (its "
                               "SSH connection closed, or a signal killed the shell)")
        if check and status != 0:
            raise ClusterError(f"{self.host.name}: `{script}` exited {status}: "
                               f"{(res.stderr or res.stdout).strip()[-500:]}")
        return res

    def put(self, local: str, remote: str) -> None:
        """Copy a local file to `remote`, replacing it in one step: a daemon starting while the
        harness rewrites its certificate or config reads the old file or the new, never a
        truncated one (SFTP's put alone truncates first, then writes)."""
        with paramiko.SFTPClient.from_transport(self._transport()) as sftp:
            part = _part_name(remote)
            sftp.put(local, part)
            sftp.posix_rename(part, remote)
        self.log(f"{self.host.name} put {local} -> {remote}")

    def write(self, remote: str, data: bytes) -> None:
        """Write `data` to `remote`, replacing it in one step (as put does)."""
        with paramiko.SFTPClient.from_transport(self._transport()) as sftp:
            part = _part_name(remote)
            with sftp.open(part, "wb") as f:
                f.write(data)
            sftp.posix_rename(part, remote)
        self.log(f"{self.host.name} write {len(data)} bytes -> {remote}")

    def get(self, remote: str, local: str) -> None:
        with paramiko.SFTPClient.from_transport(self._transport()) as sftp:
            sftp.get(remote, local)
        self.log(f"{self.host.name} get {remote} -> {local}")

    def close(self) -> None:
        with self._lock:
            if self._client:
                self._client.close()
                self._client = None


def _part_name(remote: str) -> str:
    """Where a file is written before it is renamed over `remote`: beside it, so the rename
    stays within one file system."""
    return f"{remote}.part-{threading.get_ident()}-{time.monotonic_ns()}"
