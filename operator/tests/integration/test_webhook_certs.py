"""The webhook with a mounted certificate, as the chart's cert-manager option runs it, against a real API server.

cert-manager writes `tls.crt`/`tls.key` signed by a CA and that CA as `ca.crt`. Here a test CA plays cert-manager:
the operator must serve the leaf, register the CA (not the leaf) as the caBundle, reject a bad spec through the API
server (which proves the chain verifies), and restart itself when the files are renewed.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from e2e.support.fixtures import Cluster
from e2e.support.operator_process import WEBHOOK_CONFIGURATION, OperatorProcess
from e2e.support.workloads import example, load

pytestmark = pytest.mark.integration


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    encoding, pkcs8 = serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8
    return key.private_bytes(encoding, pkcs8, serialization.NoEncryption())


def issue(directory: Path, serial: int) -> bytes:
    """Write ca.crt, tls.crt, tls.key (a CA and a 127.0.0.1 serving cert it signed) into `directory`; return the CA."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"test-ca-{serial}")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(serial + 1)
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (directory / "ca.crt").write_bytes(ca_pem)
    (directory / "tls.crt").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (directory / "tls.key").write_bytes(_pem(key))
    return ca_pem


def test_mounted_ca_signed_certificate_is_served_registered_and_reloaded(
    installed_crd: Cluster, namespace: str, tmp_path: Path
) -> None:
    cluster = installed_crd
    certs = tmp_path / "certs"
    certs.mkdir()
    ca = issue(certs, serial=1000)
    args = [f"--webhook-{flag}={certs / file}" for flag, file in (("cert", "tls.crt"), ("key", "tls.key"))]
    args += [f"--webhook-ca={certs / 'ca.crt'}", "--cert-check-seconds=0.5"]
    operator = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log", extra_args=args).start()
    try:

        def bundle() -> str:
            return cluster.kubectl(
                "get",
                "validatingwebhookconfiguration",
                WEBHOOK_CONFIGURATION,
                "-o",
                "jsonpath={.webhooks[0].clientConfig.caBundle}",
                check=False,
            ).stdout.strip()

        cluster.wait_for("the CA as the webhook's caBundle", lambda: bundle() == base64.b64encode(ca).decode())
        obj = load(example("llama"))
        obj["spec"]["prefill"]["extraArgs"] = ["--no-such-sglang-flag"]
        result = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj), check=False)
        assert result.returncode != 0 and "[pool-extra-args-known]" in result.stderr, result.stderr

        issue(certs, serial=2000)  # the renewal
        assert operator.proc is not None
        operator.proc.wait(timeout=20)
        assert operator.proc.returncode == 0, operator.log_tail()
        assert "webhook certificate files changed" in operator.log_path.read_text()
    finally:
        operator.stop()
        cluster.kubectl("delete", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION, "--ignore-not-found")
