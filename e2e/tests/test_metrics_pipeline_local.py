"""The metrics pipeline of the local control plane (`up --metrics`, docs/local-control-plane.md): SGLang's own metrics
of the serving simulation's pool pods reach the custom metrics API, and the real HPA controller of
kube-controller-manager scales a Deployment on them.

The module runs a private control plane in serving mode with the pipeline (Prometheus discovering the pool pods
through the API server and scraping the emulated SGLang servers on their loopback pod IPs, prometheus-adapter behind
the `custom.metrics.k8s.io` APIService), the operator and the pod runner. Everything is real but the SGLang servers
(emulated, `docs/serving-emulator.md`); traffic goes only to 127.0.0.0/8.

The HPA's target is the decode pool's scale target, the `DisaggSpecPool` of a service with `spec.autoscaling.mode:
External` (the operator's pool Deployments are no target: the operator renders their replicas): the HPA reads the
pool's pods through the target's selector, sets the target through `/scale`, and the operator runs the pool at that
size.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any, Final

import pytest
import yaml

from disaggspec.sglang.profiles import PROFILES
from e2e.cluster import build
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.serving.continuous import continuous
from e2e.serving.routers import ensure_router_venv
from e2e.serving.traffic import Load
from e2e.support.fixtures import (
    PRIVATE_PORT_BASE,
    STATE_ROOT,
    Cluster,
    _free_port_base,
    fresh_namespace,
    install_crd,
    needs_built,
)
from e2e.support.kube import wait_for
from e2e.support.operator_process import OperatorProcess
from e2e.support.planes import ServingPlane
from e2e.support.serving import deploy, pod_runner, ready_pods, router_url, served_model
from e2e.support.workloads import example, load

pytestmark = [
    pytest.mark.integration,
    pytest.mark.local_only,
    pytest.mark.wall_seconds(90),
    needs_built(build.PROMETHEUS, build.PROMETHEUS_ADAPTER, reason="needs prometheus and prometheus-adapter"),
]

NODES = 2
RELEASE: Final = "0.5.2"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta1"
METRIC = "sglang_num_running_reqs"
TOKENS_PER_SECOND = 5
"""The decode servers' emulated per-request pace (`emulator.disaggspec.io/tokens-per-second`): a request of 20 tokens
runs 4 s, so 8 concurrent streams keep `sglang:num_running_reqs` above the HPA's target of 2 per pod between
scrapes."""


@pytest.fixture(scope="module")
def plane() -> Iterator[ServingPlane]:
    """`planes.serving_plane`, with the metrics pipeline: a private control plane in serving mode started with
    `metrics=True`, the CRD, the operator and the pod runner; stopped in reverse order."""
    if os.environ.get("DISAGGSPEC_TEST_KUBECONFIG"):
        pytest.skip("the metrics pipeline runs with the local control plane")
    ensure_router_venv(PROFILES[RELEASE].router)
    local = LocalCluster(STATE_ROOT / f"test-cluster-metrics-{os.getpid()}")
    base = _free_port_base(PRIVATE_PORT_BASE)
    state = local.up(port_base=base, nodes=NodeShape(count=NODES), timeout=180, serving=True, metrics=True)
    try:
        cluster = install_crd(Cluster(state.kubeconfig, local=True))
        operator = OperatorProcess(cluster.kubeconfig, local.directory / "operator.log").start()
        try:
            with pod_runner(local.directory, cluster.kubeconfig) as logs:
                yield ServingPlane(local, cluster, operator, logs)
        finally:
            operator.stop()
    finally:
        local.down()


def _custom_metric(cluster: Cluster, namespace: str, metric: str, selector: str = "") -> dict[str, float]:
    """pod -> value of `metric` for every pod of `namespace` the custom metrics API lists (empty when it has none
    yet: the adapter answers 404 until its next relisting finds the series)."""
    path = f"{CUSTOM}/namespaces/{namespace}/pods/*/{metric}"
    if selector:
        path += f"?labelSelector={selector}"
    result = cluster.kubectl("get", "--raw", path, check=False)
    if result.returncode != 0:
        return {}
    return {item["describedObject"]["name"]: _quantity(item["value"]) for item in json.loads(result.stdout)["items"]}


def _quantity(value: str) -> float:
    """A resource quantity as the API writes metric values: plain, or with the milli suffix."""
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def test_the_custom_metrics_api_lists_the_pool_pods_with_their_sglang_metrics(plane: ServingPlane) -> None:
    cluster = plane.cluster
    discovery = json.loads(cluster.kubectl("get", "--raw", CUSTOM).stdout)
    assert discovery["groupVersion"] == "custom.metrics.k8s.io/v1beta1"
    with fresh_namespace(cluster, "metrics") as namespace:
        obj = load(example("llama"))
        obj["spec"]["sglang"] = {"version": RELEASE, "image": f"disaggspec/sglang:v{RELEASE}-disaggspec"}
        obj = deploy(cluster, namespace, obj, timeout=150)
        name = obj["metadata"]["name"]
        pool = {
            p["metadata"]["name"]: role
            for role in ("prefill", "decode")
            for p in ready_pods(cluster, namespace, name, role)
        }
        assert sorted(pool.values()) == ["decode", "prefill"], pool
        url = router_url(cluster, namespace, obj)
        traffic = Load(url=url, model=served_model(obj), streams=2, requests=10_000, duration=90.0, max_tokens=16)
        decode = {pod for pod, role in pool.items() if role == "decode"}

        def listed(metric: str) -> dict[str, float] | None:
            found = _custom_metric(cluster, namespace, metric)
            return found if set(pool) <= set(found) else None

        def generating() -> dict[str, float] | None:
            found = listed("sglang_generation_tokens_per_second")
            return found if found and any(found[pod] > 0 for pod in decode) else None

        with continuous(traffic) as flow:
            running = wait_for("every pool pod in sglang_num_running_reqs", lambda: listed(METRIC), 90, 1)
            # Counters as rates over a minute: tokens flow through the decode pool while the traffic runs.
            generated = wait_for("a generation token rate above zero on the decode pool", generating, 60, 1)
            prompt = wait_for("every pool pod's prompt token rate", lambda: listed("sglang_prompt_tokens_per_second"))
            for metric in ("sglang_num_queue_reqs", "sglang_token_usage", "sglang_gen_throughput"):
                assert listed(metric) is not None, metric
            report = flow.stop()
        assert report.succeeded, report.summary()
        assert all(value >= 0 for value in running.values()), running
        # The router pod has no SGLang server: Prometheus keeps only the pool pods.
        assert set(running) == set(pool), (running, pool)
        # The API filters by label selector, as the HPA controller asks it to.
        assert set(_custom_metric(cluster, namespace, METRIC, "disaggspec.io/role=decode")) == decode
        print(f"custom metrics: running {running}, prompt tokens/s {prompt}, generated tokens/s {generated}")


def _autoscaled(namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The llama example with `spec.autoscaling.mode: External` (decode 1 to 3) whose decode servers stream at
    `TOKENS_PER_SECOND` (the emulator's per-request pace), and an autoscaling/v2 HPA on its decode scale target (the
    DisaggSpecPool `<name>-decode`) on the mean `sglang_num_running_reqs` of the pool's pods (target 2 per pod, no
    stabilization in either direction, so the test sees each decision at once)."""
    obj = load(example("llama"))
    obj["spec"]["sglang"] = {"version": RELEASE, "image": f"disaggspec/sglang:v{RELEASE}-disaggspec"}
    obj["spec"]["decode"]["podAnnotations"] = {"emulator.disaggspec.io/tokens-per-second": str(TOKENS_PER_SECOND)}
    obj["spec"]["autoscaling"] = {"mode": "External", "prefill": {"maxReplicas": 1}, "decode": {"maxReplicas": 3}}
    name = obj["metadata"]["name"]
    target = {"apiVersion": "disaggspec.io/v1alpha1", "kind": "DisaggSpecPool", "name": f"{name}-decode"}
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": f"{name}-decode", "namespace": namespace},
        "spec": {
            "scaleTargetRef": target,
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {"metric": {"name": METRIC}, "target": {"type": "AverageValue", "averageValue": "2"}},
                }
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0},
                "scaleDown": {"stabilizationWindowSeconds": 0},
            },
        },
    }
    return obj, hpa


def _decode_replicas(cluster: Cluster, namespace: str, name: str) -> list[int]:
    """spec.replicas of the service's decode Deployments (one per revision)."""
    selector = f"disaggspec.io/service={name},disaggspec.io/role=decode"
    out = cluster.kubectl("get", "deployments", "-n", namespace, "-l", selector, "-o", "json").stdout
    return sorted(int(item["spec"]["replicas"]) for item in json.loads(out)["items"])


def _hpa(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "hpa", name, "-n", namespace, "-o", "json").stdout
    found: dict[str, Any] = json.loads(out)
    return found


def test_the_hpa_controller_scales_a_decode_pool_through_its_scale_target(plane: ServingPlane) -> None:
    cluster = plane.cluster
    started = time.monotonic()
    with fresh_namespace(cluster, "hpa") as namespace:
        obj, hpa = _autoscaled(namespace)
        obj = deploy(cluster, namespace, obj, timeout=150)
        name, target = obj["metadata"]["name"], hpa["metadata"]["name"]
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(hpa))
        # Idle: the HPA reads a valid metric (0 running requests) through the target's selector and keeps 1.
        wait_for(
            "the HPA reading sglang_num_running_reqs",
            lambda: _condition(_hpa(cluster, namespace, target), "ScalingActive") == "ValidMetricFound",
            timeout=90,
            interval=1,
        )
        assert _decode_replicas(cluster, namespace, name) == [1]
        url = router_url(cluster, namespace, obj)
        # 12 streams against a target of 2 per pod: 3 pods stay over target unless two thirds of the streams are
        # between decodes at once (8 streams let the HPA dip to 2 in one run).
        traffic = Load(url=url, model=served_model(obj), streams=12, requests=10_000, duration=150.0, max_tokens=20)
        with continuous(traffic) as flow:
            wait_for(
                "the HPA to scale the decode pool to 3 through its DisaggSpecPool",
                lambda: _decode_replicas(cluster, namespace, name) == [3],
                timeout=120,
            )
            wait_for("3 decode servers ready", lambda: len(ready_pods(cluster, namespace, name, "decode")) == 3, 90)
            hpa_seen = _hpa(cluster, namespace, target)
            # Read while the traffic still holds the HPA at 3: with no scale-down stabilization it goes down as soon
            # as the running requests dip (a run that read the pool after stopping the traffic saw 2).
            pool: dict[str, Any] = {}

            def pool_at_3() -> bool:
                pool.update(json.loads(cluster.kubectl("get", "dsp", target, "-n", namespace, "-o", "json").stdout))
                return bool(pool["spec"]["replicas"] == 3 and pool["status"].get("desiredReplicas") == 3)

            wait_for("the DisaggSpecPool at 3 in spec and status", pool_at_3, timeout=30, interval=1)
            report = flow.stop()
        assert report.succeeded and not report.failures, report.summary()
        (current,) = hpa_seen["status"]["currentMetrics"]
        assert current["type"] == "Pods" and current["pods"]["metric"]["name"] == METRIC, current
        # The traffic is over: no running request on any pod, so back to the minimum, and the operator follows.
        wait_for(
            "the HPA to scale the decode pool back to 1",
            lambda: _decode_replicas(cluster, namespace, name) == [1],
            timeout=120,
        )
        events = cluster.kubectl(
            "get", "events", "-n", namespace, "--field-selector", "reason=SuccessfulRescale", "-o", "json"
        ).stdout
        messages = [event["message"] for event in json.loads(events)["items"]]
        assert any("New size: 3" in m and f"{METRIC} above target" in m for m in messages), messages
        assert any("New size: 1" in m for m in messages), messages
    print(f"HPA on the decode DisaggSpecPool up and down in {time.monotonic() - started:.0f}s: {messages}")


def _condition(hpa: dict[str, Any], kind: str) -> str:
    """The reason of the HPA's condition `kind` ("" when it has none yet)."""
    for condition in hpa.get("status", {}).get("conditions") or []:
        if condition["type"] == kind and condition["status"] == "True":
            return str(condition["reason"])
    return ""
