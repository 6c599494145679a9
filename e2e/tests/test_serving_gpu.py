"""Real PD-disaggregated SGLang with EAGLE3 on GPUs: the router answers, greedy output equals a colocated server's,
decode accepts as many draft tokens as colocated, and the KV transfer shows in the metrics with no failures.

Runs only on the kind-gpu backend (`e2e/kind_gpu/run.sh test`, which installed the chart and loaded the images);
every test here is skipped on the default local backend, whose kwok nodes run no containers. The module fixture applies
the DisaggSpecService rendered by `e2e.kind_gpu.manifest` (same `E2E_*` variables as run.sh), waits for `Ready=True`,
sends the prompts one at a time through the router's Service (`kubectl port-forward`), and scrapes `/metrics` and
`/server_info` of every pool pod. Then the colocated reference (a plain Deployment: same image, decode's command line
minus `--disaggregation-*`) gets the same prompts: concurrently when the cluster has 3 or more GPUs, otherwise after
the PD service is deleted and its GPUs are free (`E2E_REFERENCE` overrides the choice).
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import pytest
import yaml

from e2e.kind_gpu import compare, manifest, metrics
from e2e.kind_gpu.portforward import port_forward
from e2e.support import workloads
from e2e.support.fixtures import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.kind_gpu]

PROMPTS: Final = (
    "Explain in three sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "List the first ten prime numbers, separated by commas.",
    "Summarize the plot of Romeo and Juliet in one paragraph.",
    "What is the difference between a process and a thread? Answer briefly.",
    "Translate to French: 'The weather is nice today, let us go for a walk in the park.'",
)
SERVER_PORT: Final = 30000
ROUTER_PORT: Final = 30000
READY_TIMEOUT: Final = float(os.environ.get("E2E_READY_TIMEOUT", "3600"))
"""Weights download (16 GB for Llama-3.1-8B in fp16) plus load and CUDA graph capture, on every pod."""
REQUEST_TIMEOUT: Final = 600.0


@dataclass
class Run:
    """What one deployment (the PD pair or the colocated reference) answered and exported."""

    answers: list[str] = field(default_factory=list)
    samples: dict[str, list[metrics.Sample]] = field(default_factory=dict)
    """Parsed /metrics per pod name."""
    roles: dict[str, str] = field(default_factory=dict)
    """Pod name -> prefill, decode or reference."""
    cumulative_accept: dict[str, float | None] = field(default_factory=dict)
    """Pod name -> avg_spec_accept_length of /server_info."""
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Role -> the SGLang container of the Deployment the operator rendered (PD only)."""

    def pods(self, role: str) -> list[str]:
        return sorted(p for p, r in self.roles.items() if r == role)


def _http(method: str, url: str, body: Mapping[str, Any] | None = None) -> bytes:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
        payload: bytes = response.read()
        return payload


def _chat(port: int, model: str, prompt: str, max_tokens: int) -> str:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    reply = json.loads(_http("POST", f"http://127.0.0.1:{port}/v1/chat/completions", body))
    content = reply["choices"][0]["message"]["content"]
    assert isinstance(content, str), f"no text in the reply: {reply}"
    return content


def _server_info(port: int) -> dict[str, Any]:
    # 0.5.23 serves /server_info (and /get_server_info as a deprecated alias); 0.5.2 only /get_server_info.
    for path in ("/server_info", "/get_server_info"):
        try:
            info: dict[str, Any] = json.loads(_http("GET", f"http://127.0.0.1:{port}{path}"))
            return info
        except urllib.error.HTTPError as error:
            if error.code != 404:
                raise
    raise AssertionError("neither /server_info nor /get_server_info exists")


def _kubectl_binary() -> str:
    found = shutil.which("kubectl")
    if found is None:
        raise RuntimeError("kubectl is not on PATH (e2e/kind_gpu/run.sh preflight checks for it)")
    return found


def _apply(cluster: Cluster, objects: list[dict[str, Any]]) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=manifest.dump(objects))


def _pods(cluster: Cluster, namespace: str, selector: str) -> list[str]:
    got = cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json")
    return sorted(
        p["metadata"]["name"] for p in json.loads(got.stdout)["items"] if not p["metadata"].get("deletionTimestamp")
    )


def _condition(cluster: Cluster, namespace: str, name: str, kind_: str = "dss", condition: str = "Ready") -> str:
    got = cluster.kubectl(
        "get",
        kind_,
        name,
        "-n",
        namespace,
        "-o",
        f"jsonpath={{.status.conditions[?(@.type=='{condition}')].status}}",
        check=False,
    )
    return got.stdout.strip()


def _diagnostics(cluster: Cluster, namespace: str) -> str:
    parts = [cluster.kubectl("get", "dss,deploy,pods,svc", "-n", namespace, "-o", "wide", check=False).stdout]
    parts.append(cluster.kubectl("describe", "dss", "-n", namespace, check=False).stdout[-4000:])
    for pod in _pods(cluster, namespace, "app.kubernetes.io/name in (sglang,sglang-router,sglang-reference)"):
        logs = cluster.kubectl("logs", "-n", namespace, pod, "--tail=80", check=False)
        parts.append(f"--- logs of {pod}\n{logs.stdout}{logs.stderr}")
    return "\n".join(parts)


def _scrape(cluster: Cluster, namespace: str, pod: str, role: str, run: Run) -> None:
    with port_forward(_kubectl_binary(), cluster.kubeconfig, namespace, f"pod/{pod}", SERVER_PORT) as port:
        run.samples[pod] = metrics.parse(_http("GET", f"http://127.0.0.1:{port}/metrics").decode())
        try:
            info = _server_info(port)
        except (OSError, AssertionError, ValueError) as error:
            # Only the accept-length comparison needs it, and that falls back to the metrics gauge.
            print(f"no server info from {pod}: {error}")
            info = {}
        run.cumulative_accept[pod] = metrics.avg_accept_length_from_server_info(info)
    run.roles[pod] = role


def _ask(port: int, settings: manifest.Settings, run: Run) -> None:
    # One request at a time: both servers then run the same batch shapes, so greedy decoding is comparable.
    model = settings.model_path(settings.model)
    run.answers = [_chat(port, model, prompt, settings.max_tokens) for prompt in PROMPTS]


def _allocatable_gpus(cluster: Cluster) -> int:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    return sum(int(n["status"].get("allocatable", {}).get("nvidia.com/gpu", "0")) for n in nodes)


def _run_pd(cluster: Cluster, settings: manifest.Settings) -> Run:
    ns, name = settings.namespace, settings.name
    dss = manifest.service(settings)
    manifest.check_service(dss)
    _apply(cluster, [dss])
    cluster.wait_for(
        f"DisaggSpecService {ns}/{name} Ready=True",
        lambda: _condition(cluster, ns, name) == "True",
        timeout=READY_TIMEOUT,
        interval=10,
    )
    run = Run()
    with port_forward(_kubectl_binary(), cluster.kubeconfig, ns, f"svc/{name}-router", ROUTER_PORT) as port:
        _ask(port, settings, run)
    for role in ("prefill", "decode"):
        got = workloads.deployment(cluster, ns, name, role)
        run.containers[role] = got["spec"]["template"]["spec"]["containers"][0]
        pods = _pods(cluster, ns, f"disaggspec.io/service={name},disaggspec.io/role={role}")
        assert pods, f"no {role} pod of {ns}/{name}"
        for pod in pods:
            _scrape(cluster, ns, pod, role, run)
    return run


def _delete_pd(cluster: Cluster, settings: manifest.Settings) -> None:
    ns, name = settings.namespace, settings.name
    cluster.kubectl("delete", "dss", name, "-n", ns, "--wait=true", "--timeout=300s")
    cluster.wait_for(
        "the PD pods to be gone (their GPUs freed)",
        lambda: not _pods(cluster, ns, f"disaggspec.io/service={name}"),
        timeout=300,
        interval=5,
    )


def _run_reference(cluster: Cluster, settings: manifest.Settings) -> Run:
    ns, name = settings.namespace, manifest.reference_name(settings)
    _apply(cluster, manifest.reference(settings))
    cluster.kubectl(
        "rollout",
        "status",
        f"deployment/{name}",
        "-n",
        ns,
        f"--timeout={int(READY_TIMEOUT)}s",
        timeout=READY_TIMEOUT + 60,
    )
    run = Run()
    with port_forward(_kubectl_binary(), cluster.kubeconfig, ns, f"svc/{name}", SERVER_PORT) as port:
        _ask(port, settings, run)
    pods = _pods(cluster, ns, f"{manifest.LABEL_REFERENCE}={name}")
    assert len(pods) == 1, f"expected one reference pod, got {pods}"
    _scrape(cluster, ns, pods[0], "reference", run)
    return run


@dataclass(frozen=True)
class Served:
    settings: manifest.Settings
    mode: str
    pd: Run
    reference: Run


@pytest.fixture(scope="module")
def served(cluster: Cluster, backend: str) -> Iterator[Served]:
    assert backend == "kind-gpu"
    settings = manifest.Settings.from_env(os.environ)
    operator_ns = os.environ.get("E2E_OPERATOR_NAMESPACE", "disaggspec-system")
    operator = os.environ.get("E2E_OPERATOR_DEPLOYMENT", "disaggspec-disaggspec-operator")
    cluster.kubectl("rollout", "status", f"deployment/{operator}", "-n", operator_ns, "--timeout=300s", timeout=360)
    mode = manifest.reference_mode(os.environ.get("E2E_REFERENCE", "auto"), _allocatable_gpus(cluster))
    ns = settings.namespace
    _apply(cluster, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}])
    token = os.environ.get("HF_TOKEN", "")
    if settings.uses_hf_secret:
        # Through stdin, never argv: the token must not show in a process list or a failure message.
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest.hf_secret(settings, token)))
    try:
        if mode == "concurrent":
            _apply(cluster, manifest.reference(settings))
            pd = _run_pd(cluster, settings)
            reference = _run_reference(cluster, settings)
        else:
            pd = _run_pd(cluster, settings)
            _delete_pd(cluster, settings)
            reference = _run_reference(cluster, settings)
    except BaseException:
        print(_diagnostics(cluster, ns))
        raise
    print(f"reference mode: {mode}; PD answers: {pd.answers}; reference answers: {reference.answers}")
    yield Served(settings, mode, pd, reference)
    if os.environ.get("E2E_KEEP", "0") != "1":
        cluster.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found")


def test_router_answers_every_chat_request(served: Served) -> None:
    assert len(served.pd.answers) == len(PROMPTS)
    empty = [PROMPTS[i] for i, answer in enumerate(served.pd.answers) if not answer.strip()]
    assert not empty, f"the PD router returned empty answers for {empty}"


def test_greedy_output_equals_the_colocated_server(served: Served) -> None:
    assert all(a.strip() for a in served.reference.answers), "the colocated reference returned an empty answer"
    verdict = compare.greedy_outputs_match(PROMPTS, served.pd.answers, served.reference.answers)
    print(verdict.message)
    assert verdict.ok, verdict.message


def _gauge(run: Run, role: str) -> float | None:
    try:
        values = [metrics.accept_length(run.samples[pod]) for pod in run.pods(role)]
    except metrics.MetricsError as error:
        print(f"no accept-length gauge on a {role} pod: {error}")
        return None
    return sum(values) / len(values) if values else None


def _cumulative(run: Run, role: str) -> float | None:
    values = [run.cumulative_accept[pod] for pod in run.pods(role)]
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def test_pd_accept_length_is_at_least_the_colocated_one(served: Served) -> None:
    pd_gauge, ref_gauge = _gauge(served.pd, "decode"), _gauge(served.reference, "reference")
    lengths = compare.choose_accept_lengths(
        _cumulative(served.pd, "decode"), _cumulative(served.reference, "reference"), pd_gauge, ref_gauge
    )
    assert lengths is not None, "neither server reported an accept length (no speculative decode step ran?)"
    verdict = compare.accept_length_verdict(lengths)
    print(f"{verdict.message}; gauges: PD {pd_gauge}, colocated {ref_gauge}")
    assert verdict.ok, verdict.message


def test_kv_transfer_metrics_present_and_no_failures(served: Served) -> None:
    version = served.settings.sglang_version
    problems = [
        f"{role} pod {pod}: {problem}"
        for role in ("prefill", "decode")
        for pod in served.pd.pods(role)
        for problem in metrics.transfer_problems(version, role, served.pd.samples[pod], len(PROMPTS))
    ]
    note = metrics.TRANSFER_EVIDENCE[version].note
    if note:
        print(f"SGLang {version}: {note}")
    assert not problems, "the KV transfer metrics show a problem:\n" + "\n".join(problems)


def test_pools_served_with_the_tcp_transfer(served: Served) -> None:
    """What the operator rendered (and the pods ran) carries the TCP choice: mooncake_tcp, or mooncake with
    MC_FORCE_TCP=1 on 0.5.2. Without it Mooncake would try RDMA devices the kind pods do not have."""
    assert set(served.pd.containers) == {"prefill", "decode"}
    for role, container in served.pd.containers.items():
        command = container["command"]
        backend = command[command.index("--disaggregation-transfer-backend") + 1]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert backend == "mooncake_tcp" or (backend == "mooncake" and env.get("MC_FORCE_TCP") == "1"), (
            f"{role} transfers with {backend} and MC_FORCE_TCP={env.get('MC_FORCE_TCP')}: not TCP"
        )
