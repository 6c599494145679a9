"""The optional metrics pipeline of the local control plane (`up --metrics`): Prometheus scraping the SGLang servers
of the pool pods, and prometheus-adapter serving what it scraped as the custom metrics API
(`custom.metrics.k8s.io`), so the real HPA controller of kube-controller-manager can scale on SGLang's own metrics.

Both run on the host like every other component, so what an in-cluster install gets from its manifests is rendered
here:

- **Prometheus** (`prometheus_config`): one scrape job, Kubernetes service discovery of pods (role `pod`) against the
  local API server with a client certificate of the local CA (`pki.PROMETHEUS`, RBAC: get/list/watch pods). It keeps
  the pods labelled `disaggspec.io/role` prefill or decode (the SD's label selector, then a relabel rule) that are
  Running, Ready and have a pod IP, and scrapes `http://<podIP>:<port>/metrics`, the port being the container port
  named `http` (the SGLang server's `--port`, where its `/metrics` is mounted with `--enable-metrics`; the operator
  names it so in `render/pool.py`, and its own health monitor scrapes it the same way), else, for a container that
  declares no port, `DEFAULT_SERVER_PORT`. Every sample carries `namespace`, `pod`, `service` and `role` (the pod's
  `disaggspec.io/service` and `disaggspec.io/role` labels).
- **prometheus-adapter** (`adapter_config`, `ADAPTER_RULES`): pod custom metrics named without colons (`METRICS`).
  It serves TLS on 127.0.0.1 with a certificate of the local CA and authenticates to the API server with a client
  certificate (`pki.PROMETHEUS_ADAPTER`), with the RBAC of a delegating aggregated API server (`cluster_objects`).
- **The APIService** (`cluster_objects`): `v1beta1` and `v1beta2` of `custom.metrics.k8s.io` (the adapter serves
  both; the HPA controller picks the preferred one from discovery) backed by the Service
  `disaggspec-metrics/prometheus-adapter`, of type ExternalName `127.0.0.1`, with the local CA as caBundle
  (`insecureSkipTLSVerify` stays false: the adapter's certificate names `prometheus-adapter.disaggspec-metrics.svc`,
  the name the API server verifies). Why ExternalName: there is no kube-proxy, so a ClusterIP would lead nowhere,
  and the API server refuses loopback addresses in EndpointSlices and Endpoints, so `--enable-aggregator-routing`
  (which routes to an endpoint address) cannot reach a process on 127.0.0.1 either; the aggregator's default
  resolver sends an ExternalName Service's traffic to `https://<externalName>:<APIService port>`.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any, Final

from e2e.cluster import pki

Document = dict[str, Any]

NAMESPACE: Final = "disaggspec-metrics"
"""The namespace of the adapter's Service (the APIService's backend), created by `cluster_objects`."""
ADAPTER_SERVICE: Final = "prometheus-adapter"
API_GROUP: Final = "custom.metrics.k8s.io"
API_VERSIONS: Final = ("v1beta1", "v1beta2")
PROMETHEUS_CONFIG_FILE: Final = "prometheus.yml"
PROMETHEUS_DATA_DIR: Final = "prometheus-data"
ADAPTER_CONFIG_FILE: Final = "prometheus-adapter.yaml"
ADAPTER_CERT_DIR: Final = "prometheus-adapter-certs"
"""Subdirectory of the state directory with the adapter's serving certificate (`tls.crt`, `tls.key`)."""
SCRAPE_INTERVAL: Final = "5s"
"""Short, for tests: a gauge's change reaches the custom metrics API within about 5 s of scrape plus the adapter's
query."""
RELIST_INTERVAL: Final = "5s"
"""How often the adapter re-reads the series Prometheus has (its default, 10 minutes, would hide the metrics of a pod
that appeared after the last listing for that long)."""
METRICS_MAX_AGE: Final = "1m"
"""How far back a relisting looks for series: a few scrapes, so a series is not dropped for one late sample."""
RATE_WINDOW: Final = "1m"
ROLE_LABEL: Final = "disaggspec.io/role"
SERVICE_LABEL: Final = "disaggspec.io/service"
ROLES: Final = ("prefill", "decode")
DEFAULT_SERVER_PORT: Final = 30000
"""SGLang's default `--port` (`disaggspec.sglang.args.SERVER_PORT`; this layer does not import the operator)."""

GAUGES: Final = ("num_running_reqs", "num_queue_reqs", "token_usage", "gen_throughput")
"""SGLang gauges exposed as pod metrics `sglang_<name>`, summed over the pod's series (DP/TP ranks)."""
COUNTERS: Final = ("prompt_tokens", "generation_tokens")
"""SGLang counters (`sglang:<name>_total`) exposed as their per-second rate over `RATE_WINDOW`,
`sglang_<name>_per_second`, summed per pod."""
METRICS: Final = (*(f"sglang_{g}" for g in GAUGES), *(f"sglang_{c}_per_second" for c in COUNTERS))
"""Every custom metric name the adapter serves for pods (and, summed, for namespaces)."""


def _meta(label: str) -> str:
    """The SD meta label of a pod label (Prometheus replaces every character outside [a-zA-Z0-9_] by `_`)."""
    return "__meta_kubernetes_pod_label_" + "".join(ch if ch.isalnum() else "_" for ch in label)


def prometheus_config(api_server: str, keys: pki.Pki) -> Document:
    """Prometheus's configuration file: one job scraping the SGLang servers of the pool pods (module docstring)."""
    tls = {
        "ca_file": str(keys.ca_cert),
        "cert_file": str(keys.client_cert(pki.PROMETHEUS)),
        "key_file": str(keys.client_key(pki.PROMETHEUS)),
    }
    relabel: list[Document] = [
        {"source_labels": [_meta(ROLE_LABEL)], "regex": "|".join(ROLES), "action": "keep"},
        {
            "source_labels": ["__meta_kubernetes_pod_phase", "__meta_kubernetes_pod_ready"],
            "regex": "Running;true",
            "action": "keep",
        },
        {"source_labels": ["__meta_kubernetes_pod_ip"], "regex": ".+", "action": "keep"},
        # Init containers are listed too (their ports would be scraped while the pod runs): never a server.
        {"source_labels": ["__meta_kubernetes_pod_container_init"], "regex": "true", "action": "drop"},
        # The SD yields one target per container port, and one per container that declares none: keep the port named
        # `http`, and the port-less containers, whose server is taken to listen on SGLang's default port.
        {
            "source_labels": [
                "__meta_kubernetes_pod_container_port_name",
                "__meta_kubernetes_pod_container_port_number",
            ],
            "regex": "http;.*|;",
            "action": "keep",
        },
        {
            "source_labels": ["__meta_kubernetes_pod_container_port_number", "__meta_kubernetes_pod_ip"],
            "regex": ";(.+)",
            "target_label": "__address__",
            "replacement": f"${{1}}:{DEFAULT_SERVER_PORT}",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": [_meta(SERVICE_LABEL)], "target_label": "service"},
        {"source_labels": [_meta(ROLE_LABEL)], "target_label": "role"},
    ]
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": "4s", "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": "disaggspec-pools",
                "metrics_path": "/metrics",
                "scheme": "http",
                # A server whose response names no content type is still read as the text format.
                "fallback_scrape_protocol": "PrometheusText0.0.4",
                "kubernetes_sd_configs": [
                    {
                        "role": "pod",
                        "api_server": api_server,
                        "tls_config": tls,
                        "selectors": [{"role": "pod", "label": f"{ROLE_LABEL} in ({','.join(ROLES)})"}],
                    }
                ],
                "relabel_configs": relabel,
            }
        ],
    }


_RESOURCES: Final = {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}

ADAPTER_RULES: Final[list[Document]] = [
    {
        "seriesQuery": f'{{__name__=~"sglang:({"|".join(GAUGES)})",namespace!="",pod!=""}}',
        "resources": _RESOURCES,
        "name": {"matches": "^sglang:(.*)$", "as": "sglang_${1}"},
        "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
    },
    {
        "seriesQuery": f'{{__name__=~"sglang:({"|".join(COUNTERS)})_total",namespace!="",pod!=""}}',
        "resources": _RESOURCES,
        "name": {"matches": "^sglang:(.*)_total$", "as": "sglang_${1}_per_second"},
        "metricsQuery": f"sum(rate(<<.Series>>{{<<.LabelMatchers>>}}[{RATE_WINDOW}])) by (<<.GroupBy>>)",
    },
]
"""prometheus-adapter's discovery rules: which series become which custom metric, and the query behind it."""


def adapter_config() -> Document:
    """prometheus-adapter's `--config`: custom metrics only (no resource or external metrics rules)."""
    return {"rules": ADAPTER_RULES}


def adapter_dns_names() -> tuple[str, ...]:
    """The names the adapter's serving certificate must carry: the API server verifies an aggregated API server by
    `<service>.<namespace>.svc` of its APIService's Service."""
    return (f"{ADAPTER_SERVICE}.{NAMESPACE}.svc",)


def _binding(kind: str, name: str, role_kind: str, role: str, user: str, namespace: str | None = None) -> Document:
    metadata: Document = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }


def _cluster_role(name: str, resources: list[str]) -> Document:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": resources, "verbs": ["get", "list", "watch"]}],
    }


def cluster_objects(adapter_port: int, ca_bundle: bytes) -> list[Document]:
    """What the pipeline needs in the cluster: the RBAC of both identities, the namespace and ExternalName Service
    of the adapter, and its APIServices (module docstring)."""
    prometheus, adapter = pki.PROMETHEUS.user, pki.PROMETHEUS_ADAPTER.user
    documents: list[Document] = [
        _cluster_role("disaggspec-local:prometheus", ["pods"]),
        _binding(
            "ClusterRoleBinding",
            "disaggspec-local:prometheus",
            "ClusterRole",
            "disaggspec-local:prometheus",
            prometheus,
        ),
        # Delegated authentication (TokenReview) and authorization (SubjectAccessReview) of the requests the API
        # server proxies to it, and the request-header CA and names it reads from kube-system's
        # extension-apiserver-authentication ConfigMap.
        _binding(
            "ClusterRoleBinding",
            "disaggspec-local:prometheus-adapter:auth-delegator",
            "ClusterRole",
            "system:auth-delegator",
            adapter,
        ),
        _binding(
            "RoleBinding",
            "disaggspec-local:prometheus-adapter:auth-reader",
            "Role",
            "extension-apiserver-authentication-reader",
            adapter,
            namespace="kube-system",
        ),
        # The objects its metrics describe (and the nodes and services its provider's informers may list).
        _cluster_role(
            "disaggspec-local:prometheus-adapter:resource-reader", ["namespaces", "pods", "nodes", "services"]
        ),
        _binding(
            "ClusterRoleBinding",
            "disaggspec-local:prometheus-adapter:resource-reader",
            "ClusterRole",
            "disaggspec-local:prometheus-adapter:resource-reader",
            adapter,
        ),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
            "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
        },
    ]
    bundle = base64.b64encode(ca_bundle).decode()
    for priority, version in enumerate(API_VERSIONS, start=1):
        documents.append(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.{API_GROUP}"},
                "spec": {
                    "group": API_GROUP,
                    "version": version,
                    "service": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE, "port": adapter_port},
                    "caBundle": bundle,
                    "insecureSkipTLSVerify": False,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100 * priority,
                },
            }
        )
    return documents


def prometheus_argv(binary: Path, directory: Path, port: int) -> list[str]:
    """Prometheus's command line: its configuration and TSDB in the state directory, listening on 127.0.0.1."""
    return [
        str(binary),
        f"--config.file={directory / PROMETHEUS_CONFIG_FILE}",
        f"--storage.tsdb.path={directory / PROMETHEUS_DATA_DIR}",
        "--storage.tsdb.retention.time=6h",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]


def adapter_argv(binary: Path, directory: Path, port: int, prometheus_port: int, kubeconfig: Path) -> list[str]:
    """prometheus-adapter's command line: TLS on 127.0.0.1 with the local CA's certificate, the same client
    certificate for listing objects and for delegated authn/authz, and short relisting (`RELIST_INTERVAL`)."""
    certs = directory / ADAPTER_CERT_DIR
    return [
        str(binary),
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--tls-cert-file={certs / 'tls.crt'}",
        f"--tls-private-key-file={certs / 'tls.key'}",
        f"--cert-dir={certs}",
        f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--prometheus-url=http://127.0.0.1:{prometheus_port}/",
        f"--config={directory / ADAPTER_CONFIG_FILE}",
        f"--metrics-relist-interval={RELIST_INTERVAL}",
        f"--metrics-max-age={METRICS_MAX_AGE}",
        "--v=1",
    ]
