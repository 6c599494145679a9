"""The per-pool scale targets (spec.autoscaling, `DisaggSpecPool`) against a real API server: `kubectl scale` sizes a
pool through the `/scale` subresource, the size survives resyncs, a change of spec.<pool>.replicas and a rollout,
the limits clamp it, and unsetting spec.autoscaling prunes the targets and gives the size back to the spec.

The real HPA controller scaling a pool through a target is in e2e/tests (it needs the metrics pipeline).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.support.fixtures import Cluster
from e2e.support.operator_process import OperatorProcess
from e2e.support.workloads import example, get, load, wait_ready
from tests.integration.conftest import running_operator

pytestmark = pytest.mark.integration

RESYNC_SECONDS = 3
"""A resync every 3 s: a pass that reverted a scale would show within the test's waits."""


@pytest.fixture(scope="module")
def resyncing_operator(installed_crd: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(
        installed_crd, tmp_path_factory, {"DISAGGSPEC_RESYNC_SECONDS": str(RESYNC_SECONDS)}
    ) as process:
        yield process


def _autoscaled(path: Path) -> dict[str, Any]:
    obj = load(path)
    obj["spec"]["autoscaling"] = {
        "mode": "External",
        "prefill": {"maxReplicas": 3},
        "decode": {"minReplicas": 1, "maxReplicas": 4},
    }
    return obj


def _apply(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))


def _decode_replicas(cluster: Cluster, namespace: str, name: str) -> list[int]:
    """spec.replicas of every decode workload of the service (one per revision), newest revision order unknown."""
    listed = get(cluster, namespace, "deployments", "-l", f"disaggspec.io/service={name},disaggspec.io/role=decode")
    return sorted(int(item["spec"]["replicas"]) for item in listed["items"])


def _scale(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    path = f"/apis/disaggspec.io/v1alpha1/namespaces/{namespace}/disaggspecpools/{name}/scale"
    scale: dict[str, Any] = json.loads(cluster.kubectl("get", "--raw", path).stdout)
    return scale


def test_kubectl_scale_sizes_the_pool_and_nothing_reverts_it(
    resyncing_operator: OperatorProcess, cluster: Cluster, namespace: str
) -> None:
    obj = _autoscaled(example("llama"))
    name = obj["metadata"]["name"]
    _apply(cluster, namespace, obj)
    wait_ready(cluster, namespace, name)
    target = f"{name}-decode"
    cluster.wait_for(
        "the decode scale target",
        lambda: cluster.kubectl("get", "dsp", target, "-n", namespace, check=False).returncode == 0,
    )
    created = get(cluster, namespace, "dsp", target)
    assert created["spec"]["replicas"] == obj["spec"]["decode"].get("replicas", 1)
    assert created["metadata"]["ownerReferences"][0]["kind"] == "DisaggSpecService"
    cluster.wait_for(
        "the scale subresource's selector",
        lambda: (
            _scale(cluster, namespace, target)["status"].get("selector")
            == f"disaggspec.io/service={name},disaggspec.io/role=decode"
        ),
    )

    # kubectl scale through /scale: the pool follows, and passes every 3 s leave it there.
    cluster.kubectl("scale", "dsp", target, "--replicas=3", "-n", namespace)
    cluster.wait_for("decode at 3", lambda: _decode_replicas(cluster, namespace, name) == [3], timeout=60)
    cluster.wait_for(
        "status.autoscaling.decode",
        lambda: (
            (get(cluster, namespace, "dss", name)["status"].get("autoscaling") or {}).get("decode", {})
            == {"target": 3, "replicas": 3, "minReplicas": 1, "maxReplicas": 4}
        ),
    )
    uid = get(cluster, namespace, "dsp", target)["metadata"]["uid"]

    # spec.decode.replicas is only the initial value: changing it (within the limits) changes nothing.
    obj["spec"]["decode"]["replicas"] = 2
    _apply(cluster, namespace, obj)
    generation = get(cluster, namespace, "dss", name)["metadata"]["generation"]
    cluster.wait_for(
        "the edit reconciled",
        lambda: get(cluster, namespace, "dss", name)["status"].get("observedGeneration") == generation,
    )
    # Several resyncs later the pool and the target are unchanged.
    seen = []
    for _ in range(3):
        time.sleep(RESYNC_SECONDS + 1)
        seen.append(_decode_replicas(cluster, namespace, name))
    assert seen == [[3], [3], [3]]
    assert get(cluster, namespace, "dsp", target)["spec"]["replicas"] == 3

    # Beyond the limits: the target keeps what was asked, the pool runs the ceiling, the target's status says why.
    cluster.kubectl("scale", "dsp", target, "--replicas=9", "-n", namespace)
    cluster.wait_for("decode clamped at 4", lambda: _decode_replicas(cluster, namespace, name) == [4], timeout=60)
    cluster.wait_for(
        "the clamp reported",
        lambda: "maxReplicas 4" in (get(cluster, namespace, "dsp", target).get("status") or {}).get("message", ""),
    )
    assert get(cluster, namespace, "dsp", target)["spec"]["replicas"] == 9

    # A rollout (new image): the new revision grows to the scaled size, the target is the same object.
    cluster.kubectl("scale", "dsp", target, "--replicas=2", "-n", namespace)
    cluster.wait_for("decode at 2", lambda: _decode_replicas(cluster, namespace, name) == [2], timeout=60)
    obj["spec"]["sglang"]["image"] = obj["spec"]["sglang"]["image"] + "-next"
    _apply(cluster, namespace, obj)
    cluster.wait_for(
        "the rollout done at the scaled size",
        lambda: (
            _decode_replicas(cluster, namespace, name) == [2]
            and len(get(cluster, namespace, "dss", name)["status"].get("revisions") or []) == 1
            and get(cluster, namespace, "dss", name)["status"]["revisions"][0]["traffic"] == "Active"
        ),
        timeout=180,
    )
    assert get(cluster, namespace, "dsp", target)["metadata"]["uid"] == uid

    # Autoscaling off: the targets are pruned and spec.decode.replicas (2 since the edit) rules again.
    obj["spec"]["decode"]["replicas"] = 1
    del obj["spec"]["autoscaling"]
    _apply(cluster, namespace, obj)
    cluster.wait_for(
        "the scale targets pruned",
        lambda: not get(cluster, namespace, "dsp", "-l", f"disaggspec.io/service={name}")["items"],
        timeout=60,
    )
    cluster.wait_for(
        "decode back at the spec's 1", lambda: _decode_replicas(cluster, namespace, name) == [1], timeout=60
    )
