"""Kudu's --rpc-authentication / --rpc-encryption on Tessera's RPC: mutual TLS, and what a
connection is allowed once it is open.

Each mode is `required`, `optional` or `disabled`, as in Kudu:
- encryption required: plaintext connections get one answer (NOT_AUTHORIZED, "this server
  requires TLS") to each call and nothing else; optional: TLS when the client starts it;
  disabled: TLS is not offered.
- authentication required: only a certificate the cluster CA signed gets anything; optional: a
  connection without one is served only from --trusted-subnets; disabled: nobody is asked.

A server tells TLS from Tessera's framing by the first byte: a TLS record starts 0x16, which as
the first byte of a frame's length would mean a frame over 350 MB, far over any frame limit.

An unauthenticated connection that is let in (authentication disabled, or optional from a
trusted subnet) may call everything: Kudu's would claim any user name it likes, the service's
included, so granting less would only look safer. That is why deployments run with both modes
required, and why the trusted subnets matter.
"""

from __future__ import annotations

import ipaddress
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from node.security import pki
from node.security.acl import ALL_ROLES, Acl, Identity, Role

MODES = ("required", "optional", "disabled")
# Kudu's --trusted_subnets default: loopback, link-local and the private ranges.
KUDU_TRUSTED_SUBNETS = "127.0.0.0/8,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,169.254.0.0/16"
TLS_RECORD = 0x16  # a TLS handshake record's first byte


def parse_subnets(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """--trusted-subnets; ValueError naming the bad entry."""
    nets = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            nets.append(ipaddress.ip_network(part, strict=False))
        except ValueError as e:
            raise ValueError(f"--trusted-subnets: {e}") from None
    return tuple(nets)


@dataclass(frozen=True)
class RpcSecurity:
    """A daemon's security flags, checked (`check`) before anything starts."""

    authentication: str = "disabled"
    encryption: str = "disabled"
    files: pki.CertFiles | None = None  # this daemon's certificate, key and CA
    acl: Acl = field(default_factory=Acl)
    trusted_subnets: str = KUDU_TRUSTED_SUBNETS

    def check_modes(self) -> None:
        """The two modes alone: each a known one, and a combination that can work."""
        for flag, mode in (("--rpc-authentication", self.authentication),
                           ("--rpc-encryption", self.encryption)):
            if mode not in MODES:
                raise ValueError(f"{flag} must be required, optional or disabled, not {mode!r}")
        if self.authentication == "required" and self.encryption == "disabled":
            raise ValueError("--rpc-authentication required needs TLS: Tessera authenticates "
                             "by certificate (no Kerberos), so --rpc-encryption cannot be disabled")

    def check(self) -> None:
        """ValueError with a one-line reason for a combination that cannot work."""
        self.check_modes()
        if "required" in (self.authentication, self.encryption) and self.files is None:
            raise ValueError("--rpc-authentication or --rpc-encryption required needs "
                             "--rpc-certificate-file, --rpc-private-key-file and "
                             "--rpc-ca-certificate-file")
        parse_subnets(self.trusted_subnets)
        if self.files is not None:
            for what, path in (("--rpc-certificate-file", self.files.cert),
                               ("--rpc-private-key-file", self.files.key),
                               ("--rpc-ca-certificate-file", self.files.ca)):
                if not Path(path).is_file():
                    raise ValueError(f"{what} {path}: no such file")
            try:
                self.server_context()
                client_context(self.files)
            except (ssl.SSLError, OSError) as e:
                raise ValueError(f"cannot load the RPC certificate {self.files.cert}: {e}") from None

    @property
    def tls(self) -> bool:
        """Whether this server offers TLS at all."""
        return self.encryption != "disabled" and self.files is not None

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.files.cert, self.files.key)
        ctx.load_verify_locations(self.files.ca)
        ctx.verify_mode = {"required": ssl.CERT_REQUIRED, "optional": ssl.CERT_OPTIONAL,
                           "disabled": ssl.CERT_NONE}[self.authentication]
        return ctx

    def client_context(self) -> ssl.SSLContext | None:
        """What this daemon's own outgoing connections use: its certificate, the service's."""
        return client_context(self.files) if self.tls else None

    def admit(self, peer_ip: str, tls: bool, peercert: dict | None) -> Admission:
        """Who a new connection is and what it may call, from how it came in."""
        if peercert:
            name, kind = subject(peercert)
            return Admission(Identity(name, self.acl.roles(name, kind == pki.SERVICE)))
        who = f"unauthenticated connection from {peer_ip}"
        if not tls and self.encryption == "required":
            return Admission(Identity(who, Role(0), False),
                             "this server requires TLS (--rpc-encryption required)")
        if self.authentication == "disabled":
            return Admission(Identity(who, ALL_ROLES, False))
        if self.authentication == "optional" and _in(peer_ip, parse_subnets(self.trusted_subnets)):
            return Admission(Identity(who, ALL_ROLES, False))
        why = ("this server requires a certificate from the cluster CA "
               "(--rpc-authentication required)" if self.authentication == "required" else
               "unauthenticated connections are accepted only from --trusted-subnets")
        return Admission(Identity(who, Role(0), False), why)


DISABLED = RpcSecurity()


@dataclass(frozen=True)
class Admission:
    identity: Identity
    refusal: str = ""  # why nothing is allowed, when nothing is


def _in(ip: str, nets) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    return any(addr in n for n in nets)


def subject(peercert: dict) -> tuple[str, str]:
    """(common name, organizational unit) of a certificate as ssl.getpeercert() gives it."""
    fields = {k: v for rdn in peercert.get("subject", ()) for k, v in rdn}
    return fields.get("commonName", "?"), fields.get("organizationalUnitName", "")


def client_context(files: pki.CertFiles | None, ca: Path | None = None) -> ssl.SSLContext:
    """A client's TLS context: it trusts only the cluster CA (`files.ca`, or `ca` for a client
    with no certificate of its own) and presents `files`' certificate. Host names are not
    checked: the servers' certificates name daemons, not addresses; the client checks instead
    that the server's certificate is the service's (RpcClient), and the RPC envelope carries
    the UUID it meant to reach."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(files.ca if files is not None else ca)
    if files is not None:
        ctx.load_cert_chain(files.cert, files.key)
    return ctx


def identity_files(cert: str | Path) -> pki.CertFiles:
    """An identity as the CLI names it, by its certificate: NAME.pem, with NAME.key and the CA's
    ca.pem beside it (the layout node.security.pki.issue writes)."""
    cert = Path(cert)
    return pki.CertFiles(cert, cert.with_suffix(".key"), cert.parent / "ca.pem")


def client_tls(cert: str | Path | None) -> ssl.SSLContext | None:
    """The client TLS context for the identity whose certificate is `cert` (None: plaintext);
    ValueError naming what is missing or unreadable."""
    if not cert:
        return None
    files = identity_files(cert)
    for path in (files.cert, files.key, files.ca):
        if not path.is_file():
            raise ValueError(f"TLS identity {cert}: {path} is missing")
    try:
        return client_context(files)
    except (ssl.SSLError, OSError) as e:
        raise ValueError(f"TLS identity {cert}: {e}") from None
