"""A self-signed serving certificate for the admission webhook when none is mounted (local runs, tests); no API
access: it writes two files, which the entry point hands to the webhook server.

kopf would need an extra package to self-sign; `cryptography` is already a dependency of the kubernetes stack. The
certificate is its own CA (kopf hands it to the API server as the webhook's caBundle) and names the host the API
server dials. In a cluster the chart mounts a certificate instead.
"""

from __future__ import annotations

import datetime
import ipaddress
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def self_signed(host: str, directory: Path | None = None) -> tuple[Path, Path]:
    """Write `tls.crt` and `tls.key` for `host` into `directory` (a new temp dir by default); return their paths."""
    where = directory or Path(tempfile.mkdtemp(prefix="disaggspec-webhook-"))
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.SubjectAlternativeName([_san(host)]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = where / "tls.crt", where / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path
