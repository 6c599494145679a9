"""The metrics pipeline's rendered configuration (`e2e/cluster/metrics.py`), without a cluster: Prometheus's relabel
rules applied to the targets its Kubernetes SD would produce, the adapter's rules and metric names, the objects
registered with the API server, the command lines, and (when it is built) the Prometheus server loading the rendered
file."""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from disaggspec.sglang.args import SERVER_PORT
from e2e.cluster import build, metrics, pki
from e2e.cluster.controlplane import COMPONENTS, METRICS_COMPONENTS, Ports, State

API_SERVER = "https://127.0.0.1:17381"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> pki.Pki:
    return pki.generate(tmp_path_factory.mktemp("pki"))


def _relabel(rules: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, str] | None:
    """Prometheus's relabelling (keep, drop, replace) of one target's labels, None when dropped. Regexes are fully
    anchored, source labels joined by `;`, a missing label is empty, `${1}` the first group."""
    labels = dict(labels)
    for rule in rules:
        value = ";".join(labels.get(name, "") for name in rule["source_labels"])
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        action = rule.get("action", "replace")
        if action == "keep" and match is None:
            return None
        if action == "drop" and match is not None:
            return None
        if action == "replace" and match is not None:
            replacement = rule.get("replacement", "$1").replace("${1}", "\\g<1>").replace("$1", "\\g<1>")
            labels[rule["target_label"]] = match.expand(replacement)
    return {name: value for name, value in labels.items() if not name.startswith("__") or name == "__address__"}


def _target(**overrides: str) -> dict[str, str]:
    """A target of the pod SD for the `http` port of a ready pool pod's server container."""
    target = {
        "__address__": f"127.121.0.7:{SERVER_PORT}",
        "__meta_kubernetes_namespace": "team-a",
        "__meta_kubernetes_pod_name": "llama-decode-abc",
        "__meta_kubernetes_pod_ip": "127.121.0.7",
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_ready": "true",
        "__meta_kubernetes_pod_container_init": "false",
        "__meta_kubernetes_pod_container_port_name": "http",
        "__meta_kubernetes_pod_container_port_number": str(SERVER_PORT),
        "__meta_kubernetes_pod_label_disaggspec_io_role": "decode",
        "__meta_kubernetes_pod_label_disaggspec_io_service": "llama",
    }
    return {**target, **overrides}


def _rules(keys: pki.Pki) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = metrics.prometheus_config(API_SERVER, keys)["scrape_configs"][0]["relabel_configs"]
    return rules


def test_prometheus_discovers_pods_of_the_local_api_server_with_its_client_certificate(keys: pki.Pki) -> None:
    config = metrics.prometheus_config(API_SERVER, keys)
    assert config["global"]["scrape_interval"] == "5s"
    (job,) = config["scrape_configs"]
    (sd,) = job["kubernetes_sd_configs"]
    assert sd["role"] == "pod" and sd["api_server"] == API_SERVER
    assert sd["tls_config"] == {
        "ca_file": str(keys.ca_cert),
        "cert_file": str(keys.client_cert(pki.PROMETHEUS)),
        "key_file": str(keys.client_key(pki.PROMETHEUS)),
    }
    assert sd["selectors"] == [{"role": "pod", "label": "disaggspec.io/role in (prefill,decode)"}]
    assert job["metrics_path"] == "/metrics" and job["scheme"] == "http"


def test_a_ready_pool_pod_is_scraped_on_its_http_port_with_its_labels(keys: pki.Pki) -> None:
    assert _relabel(_rules(keys), _target()) == {
        "__address__": f"127.121.0.7:{SERVER_PORT}",
        "namespace": "team-a",
        "pod": "llama-decode-abc",
        "service": "llama",
        "role": "decode",
    }
    # A host-network pod's own http port (render/ports.py) is the one scraped.
    moved = _relabel(_rules(keys), _target(__address__="127.121.0.7:31002", **{PORT_NUMBER: "31002"}))
    assert moved is not None and moved["__address__"] == "127.121.0.7:31002"


PORT_NAME = "__meta_kubernetes_pod_container_port_name"
PORT_NUMBER = "__meta_kubernetes_pod_container_port_number"


@pytest.mark.parametrize(
    "overrides",
    [
        {"__meta_kubernetes_pod_label_disaggspec_io_role": "router"},
        {"__meta_kubernetes_pod_label_disaggspec_io_role": ""},
        {"__meta_kubernetes_pod_ready": "false"},
        {"__meta_kubernetes_pod_phase": "Pending"},
        {"__meta_kubernetes_pod_ip": ""},
        {"__meta_kubernetes_pod_container_init": "true"},
        {PORT_NAME: "bootstrap", PORT_NUMBER: "8998", "__address__": "127.121.0.7:8998"},
    ],
    ids=["router", "no-role", "unready", "pending", "no-ip", "init-container", "bootstrap-port"],
)
def test_what_is_not_a_ready_server_port_of_a_pool_pod_is_dropped(keys: pki.Pki, overrides: dict[str, str]) -> None:
    assert _relabel(_rules(keys), _target(**overrides)) is None


def test_a_container_without_ports_is_scraped_on_sglangs_default_port(keys: pki.Pki) -> None:
    labels = _relabel(_rules(keys), _target(__address__="127.121.0.7", **{PORT_NAME: "", PORT_NUMBER: ""}))
    assert labels is not None and labels["__address__"] == f"127.121.0.7:{SERVER_PORT}"
    assert metrics.DEFAULT_SERVER_PORT == SERVER_PORT


def _custom_name(series: str) -> str | None:
    """The custom metric name the adapter's rules give a series name (Go's `${1}` is Python's `\\g<1>`)."""
    for rule in metrics.ADAPTER_RULES:
        selector = re.search(r'__name__=~"([^"]+)"', rule["seriesQuery"])
        assert selector is not None
        if re.fullmatch(selector.group(1), series):
            pattern = rule["name"]["matches"]
            return re.sub(pattern, rule["name"]["as"].replace("${1}", "\\g<1>"), series)
    return None


def test_the_adapter_serves_sglang_gauges_and_token_rates_as_pod_metrics_without_colons() -> None:
    names = {
        series: _custom_name(series)
        for series in (
            "sglang:num_running_reqs",
            "sglang:num_queue_reqs",
            "sglang:token_usage",
            "sglang:gen_throughput",
            "sglang:prompt_tokens_total",
            "sglang:generation_tokens_total",
        )
    }
    assert names == {
        "sglang:num_running_reqs": "sglang_num_running_reqs",
        "sglang:num_queue_reqs": "sglang_num_queue_reqs",
        "sglang:token_usage": "sglang_token_usage",
        "sglang:gen_throughput": "sglang_gen_throughput",
        "sglang:prompt_tokens_total": "sglang_prompt_tokens_per_second",
        "sglang:generation_tokens_total": "sglang_generation_tokens_per_second",
    }
    assert set(names.values()) == set(metrics.METRICS)
    assert all(":" not in name for name in metrics.METRICS)
    assert _custom_name("sglang:spec_accept_length") is None
    gauges, counters = metrics.ADAPTER_RULES
    for rule in metrics.ADAPTER_RULES:
        assert rule["resources"] == {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
        assert 'namespace!="",pod!=""' in rule["seriesQuery"]
    assert gauges["metricsQuery"] == "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)"
    assert counters["metricsQuery"] == "sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)"
    assert metrics.adapter_config() == {"rules": metrics.ADAPTER_RULES}


def test_the_custom_metrics_api_is_registered_with_the_adapter_behind_an_external_name_service() -> None:
    documents = metrics.cluster_objects(17389, b"PEM")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for document in documents:
        by_kind.setdefault(document["kind"], []).append(document)
    services = {f"{s['spec']['version']}": s["spec"] for s in by_kind["APIService"]}
    assert sorted(services) == ["v1beta1", "v1beta2"]
    for spec in services.values():
        assert spec["group"] == "custom.metrics.k8s.io"
        assert spec["service"] == {"name": "prometheus-adapter", "namespace": "disaggspec-metrics", "port": 17389}
        assert spec["insecureSkipTLSVerify"] is False and base64.b64decode(spec["caBundle"]) == b"PEM"
    (service,) = by_kind["Service"]
    assert service["spec"] == {"type": "ExternalName", "externalName": "127.0.0.1"}
    assert [n["metadata"]["name"] for n in by_kind["Namespace"]] == ["disaggspec-metrics"]
    bound = {
        (b["kind"], b["metadata"].get("namespace"), b["roleRef"]["name"], b["subjects"][0]["name"])
        for b in by_kind["ClusterRoleBinding"] + by_kind["RoleBinding"]
    }
    adapter, prometheus = pki.PROMETHEUS_ADAPTER.user, pki.PROMETHEUS.user
    assert ("ClusterRoleBinding", None, "system:auth-delegator", adapter) in bound
    assert ("RoleBinding", "kube-system", "extension-apiserver-authentication-reader", adapter) in bound
    assert ("ClusterRoleBinding", None, "disaggspec-local:prometheus", prometheus) in bound
    roles = {r["metadata"]["name"]: r["rules"] for r in by_kind["ClusterRole"]}
    assert roles["disaggspec-local:prometheus"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    assert {"namespaces", "pods"} <= set(roles["disaggspec-local:prometheus-adapter:resource-reader"][0]["resources"])


def test_the_adapters_certificate_names_the_service_the_api_server_verifies(keys: pki.Pki, tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    pki.issue_loopback_serving_cert(keys, "prometheus-adapter", cert, key, metrics.adapter_dns_names())
    sans = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert sans.value.get_values_for_type(x509.DNSName) == ["localhost", "prometheus-adapter.disaggspec-metrics.svc"]
    assert [str(ip) for ip in sans.value.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_ports_and_command_lines(tmp_path: Path) -> None:
    ports = Ports.from_base(17380)
    assert (ports.prometheus, ports.prometheus_adapter) == (17388, 17389)
    assert set(ports.of_components(True)) - set(ports.of_components(False)) == {"prometheus", "prometheus_adapter"}
    assert COMPONENTS[-2:] == METRICS_COMPONENTS
    state = State(tmp_path, ports, metrics=True)
    state.save()
    loaded = State.load(tmp_path)
    assert loaded is not None and loaded.metrics and loaded.ports == ports
    prometheus = metrics.prometheus_argv(Path("/bin/prometheus"), tmp_path, ports.prometheus)
    assert f"--web.listen-address=127.0.0.1:{ports.prometheus}" in prometheus
    adapter = metrics.adapter_argv(Path("/bin/adapter"), tmp_path, 17389, 17388, tmp_path / "a.kubeconfig")
    assert "--prometheus-url=http://127.0.0.1:17388/" in adapter and "--bind-address=127.0.0.1" in adapter
    assert "--metrics-relist-interval=5s" in adapter
    # `down` recognises its processes by the state directory in their command lines.
    assert all(any(str(tmp_path) in arg for arg in argv) for argv in (prometheus, adapter))


@pytest.mark.skipif(not build.PROMETHEUS.is_built(), reason="needs the Prometheus server (make cluster-build)")
def test_prometheus_loads_the_rendered_configuration(keys: pki.Pki, tmp_path: Path) -> None:
    """The server itself parses it (promtool, built without any service discovery, would not know
    `kubernetes_sd_configs`): it becomes ready only once its configuration is loaded, and exits on a bad one."""
    (tmp_path / metrics.PROMETHEUS_CONFIG_FILE).write_text(
        yaml.safe_dump(metrics.prometheus_config(API_SERVER, keys), sort_keys=False)
    )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    argv = metrics.prometheus_argv(build.PROMETHEUS.path("prometheus"), tmp_path, port)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            proc.terminate()
            raise AssertionError(f"prometheus did not become ready (exit {proc.poll()}):\n{proc.communicate()[0]}")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/status/config", timeout=5) as response:
            loaded = yaml.safe_load(json.load(response)["data"]["yaml"])
        assert loaded["scrape_configs"][0]["job_name"] == "disaggspec-pools"
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
