"""Generates the local control plane's PKI: a CA, the API server's serving cert, client certs, service-account keys.

Everything is written once into the cluster's state directory with 0600 private keys. Certificates are valid for
a year and bound to 127.0.0.1/localhost plus the in-cluster names of the `kubernetes` Service, so in-cluster clients
(kwok pods never run, but the TLS names stay honest) and host clients both verify the server.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=365)
# The first address of the service CIDR the API server is started with; it backs the `kubernetes` Service.
KUBERNETES_SERVICE_IP = "10.96.0.1"


@dataclass(frozen=True)
class ClientIdentity:
    """A client certificate's subject: Kubernetes reads the user from CN and the groups from O."""

    filename: str
    user: str
    groups: tuple[str, ...] = ()


ADMIN = ClientIdentity("admin", "kubernetes-admin", ("system:masters",))
CONTROLLER_MANAGER = ClientIdentity("controller-manager", "system:kube-controller-manager")
SCHEDULER = ClientIdentity("scheduler", "system:kube-scheduler")
# kwok updates node and pod status for every fake node, as a kubelet would; system:masters keeps it simple and the
# operator's own RBAC is tested with a separate, restricted identity.
KWOK = ClientIdentity("kwok", "system:kwok-controller", ("system:masters",))
# The LeaderWorkerSet controller runs on the host, not in a pod, so it cannot have a service-account token: its client
# certificate carries the user name (and groups) the service account `lws-system/lws-controller-manager` of an
# in-cluster install would have, so the module's own ClusterRoleBinding to that service account applies (`lws.py`).
LWS_CONTROLLER = ClientIdentity(
    "lws-controller",
    "system:serviceaccount:lws-system:lws-controller-manager",
    ("system:serviceaccounts", "system:serviceaccounts:lws-system"),
)
# The aggregation layer's front proxy: the API server presents this certificate when it proxies a request to an
# aggregated API server (custom.metrics.k8s.io: prometheus-adapter), which trusts the user in its X-Remote-* headers
# only from a certificate of the request-header CA whose CN is in --requestheader-allowed-names (this one).
FRONT_PROXY_CLIENT = ClientIdentity("front-proxy-client", "front-proxy-client")
# The metrics pipeline (`up --metrics`, `metrics.py`): Prometheus lists and watches pods for its Kubernetes service
# discovery, prometheus-adapter authenticates and authorizes requests by delegation and lists namespaces and pods;
# each gets only the RBAC `metrics.py` binds to its user.
PROMETHEUS = ClientIdentity("prometheus", "disaggspec:prometheus")
PROMETHEUS_ADAPTER = ClientIdentity("prometheus-adapter", "disaggspec:prometheus-adapter")
CLIENTS = (
    ADMIN,
    CONTROLLER_MANAGER,
    SCHEDULER,
    KWOK,
    LWS_CONTROLLER,
    FRONT_PROXY_CLIENT,
    PROMETHEUS,
    PROMETHEUS_ADAPTER,
)


@dataclass(frozen=True)
class Pki:
    """Paths of the generated files."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def serving_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def serving_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    def client_cert(self, client: ClientIdentity) -> Path:
        return self.directory / f"{client.filename}.crt"

    def client_key(self, client: ClientIdentity) -> Path:
        return self.directory / f"{client.filename}.key"


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False),  # digitalSignature, keyEnc.
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def generate(directory: Path) -> Pki:
    """Create every key and certificate the control plane needs in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    now = datetime.datetime.now(datetime.UTC)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("disaggspec-local-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(pki.ca_key, ca_key)
    _write_cert(pki.ca_cert, ca_cert)

    serving_key = ec.generate_private_key(ec.SECP256R1())
    dns_names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    dns_names.append("kubernetes.default.svc.cluster.local")
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", KUBERNETES_SERVICE_IP)]
    serving = _issue(_name("kube-apiserver"), serving_key, ca_cert, ca_key, ExtendedKeyUsageOID.SERVER_AUTH, sans)
    _write_key(pki.serving_key, serving_key)
    _write_cert(pki.serving_cert, serving)

    for client in CLIENTS:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(_name(client.user, client.groups), key, ca_cert, ca_key, ExtendedKeyUsageOID.CLIENT_AUTH)
        _write_key(pki.client_key(client), key)
        _write_cert(pki.client_cert(client), cert)

    # Service-account tokens are signed with RSA: every JWT consumer supports RS256.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.sa_key, sa_key)
    pki.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pki


def issue_loopback_serving_cert(
    keys: Pki, common_name: str, cert_path: Path, key_path: Path, dns_names: tuple[str, ...] = ()
) -> None:
    """Issue a serving certificate from the local CA of `keys` for a server on 127.0.0.1 (IP SAN 127.0.0.1, DNS SAN
    localhost, and `dns_names`): a webhook server the API server calls by `url: https://127.0.0.1:<port>/...`,
    verified with the CA as the webhook configuration's caBundle; or an aggregated API server, which the API server
    verifies by the name of its APIService's Service (`<service>.<namespace>.svc`, given in `dns_names`)."""
    ca_cert = x509.load_pem_x509_certificate(keys.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(keys.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{keys.ca_key} is not the EC key `generate` writes")
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in ("localhost", *dns_names)]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    cert = _issue(_name(common_name), key, ca_cert, ca_key, ExtendedKeyUsageOID.SERVER_AUTH, sans)
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    key_path.parent.mkdir(parents=True, exist_ok=True)
    _write_key(key_path, key)
    _write_cert(cert_path, cert)
