"""The cluster's certificate authority: Kudu's internal PKI without Kerberos. The deployer makes
one CA per cluster (or brings the operator's) and issues every certificate; the CA's key stays
with the deployer, never on a tablet server, so a host's disk cannot mint a superuser.

A certificate says who it is in its subject: the common name is the identity the ACLs match
(`admin`, `client`, `tserver@n1`) and the organizational unit is its kind, `service` for the
daemons and `user` for everyone else. Only the CA can put `service` there; that is what makes
the internal RPCs the daemons' alone.

Files are PEM, as `ssl.SSLContext.load_cert_chain` and `load_verify_locations` read them, so the
daemons need only Python's ssl module; minting needs `cryptography` (the deployer's side).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

SERVICE = "service"
USER = "user"
CA_NAME = "tessera-ca"
ADMIN = "admin"  # the operator's superuser name: deployments put it in --superuser-acl
CLIENT = "client"  # the workloads' user name
# A second user, as the README's threat model allows one: the session-intruder nemesis acts as
# it against the workloads' sessions (their owner is CLIENT)
INTRUDER = "intruder"
# A third, the session-intruder's flood: it opens sessions of its own. INTRUDER never opens one,
# so any session its writes land in is another identity's. (When one user did both, an
# OpenSession whose answer was lost, committed after the call's deadline, left a session of the
# intruder's own that it then wrote into, and the checker called that an intrusion.)
FLOODER = "flooder"


@dataclass(frozen=True)
class CertFiles:
    """One identity's files: its certificate, its private key, and the CA that signed it."""

    cert: Path
    key: Path
    ca: Path

    def exist(self) -> bool:
        return self.cert.is_file() and self.key.is_file() and self.ca.is_file()


def _x509():
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    return x509, hashes, serialization, ec, NameOID


def _write_key(path: Path, key) -> None:
    _, _, serialization, _, _ = _x509()
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # never world-readable
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _write_cert(path: Path, cert) -> None:
    _, _, serialization, _, _ = _x509()
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def create_ca(dir: Path, days: int = 3650) -> CertFiles:
    """A new self-signed CA in `dir` (ca.pem, ca.key); its files."""
    x509, hashes, _, ec, NameOID = _x509()
    dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(key, hashes.SHA256()))
    files = CertFiles(dir / "ca.pem", dir / "ca.key", dir / "ca.pem")
    _write_key(files.key, key)
    _write_cert(files.cert, cert)
    return files


def load_ca(cert: Path, key: Path):
    """The operator's CA (--ca-cert/--ca-key); ValueError with the reason if it is not one."""
    x509, _, serialization, _, _ = _x509()
    try:
        ca_cert = x509.load_pem_x509_certificate(cert.read_bytes())
        ca_key = serialization.load_pem_private_key(key.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"cannot load the CA {cert} / {key}: {e}") from None
    try:
        ca = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        ca = False
    if not ca:
        raise ValueError(f"{cert} is not a CA certificate (no basicConstraints CA:TRUE)")
    if ca_cert.public_key().public_numbers() != ca_key.public_key().public_numbers():
        raise ValueError(f"{key} is not the private key of {cert}")
    return ca_cert, ca_key


def issue(ca: CertFiles, dir: Path, name: str, kind: str, days: int = 365) -> CertFiles:
    """A certificate for `name` of `kind` (SERVICE or USER), signed by the CA in `ca`, written as
    dir/NAME.pem and dir/NAME.key with the CA's certificate copied beside as dir/ca.pem."""
    if kind not in (SERVICE, USER):
        raise ValueError(f"certificate kind must be {SERVICE} or {USER}, not {kind!r}")
    x509, hashes, _, ec, NameOID = _x509()
    ca_cert, ca_key = load_ca(ca.cert, ca.key)
    dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                         x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, kind)])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    stem = name.replace("/", "_")
    files = CertFiles(dir / f"{stem}.pem", dir / f"{stem}.key", dir / "ca.pem")
    _write_key(files.key, key)
    _write_cert(files.cert, cert)
    if files.ca.resolve() != ca.cert.resolve():
        files.ca.write_bytes(ca.cert.read_bytes())
    return files


def cluster_credentials(dir: Path, server_names: list[str], ca: CertFiles | None = None
                        ) -> dict[str, CertFiles]:
    """Everything a deployment needs in `dir`: the CA (a new one unless `ca` is given), a
    service certificate per server name, the operator's (`admin`), the workloads' (`client`) and
    two other users' (`intruder`, `flooder`). Keyed by name."""
    ca = ca or create_ca(dir / "ca")
    out = {n: issue(ca, dir / "certs", n, SERVICE) for n in server_names}
    for user in (ADMIN, CLIENT, INTRUDER, FLOODER):
        out[user] = issue(ca, dir / "certs", user, USER)
    return out
