"""The pool sampler against the real API server of the session cluster: ready servers per pool, by role label."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from e2e.serving.load.pools import from_kubeconfig
from e2e.support.fixtures import Cluster

pytestmark = pytest.mark.integration


def _pod(name: str, role: str, *, schedulable: bool = True, service: str = "llama") -> str:
    spec: dict[str, object] = {"containers": [{"name": "main", "image": "noop:1"}]}
    if not schedulable:
        spec["nodeSelector"] = {"no-such-node": "true"}  # stays Pending: never Ready
    labels = {"disaggspec.io/service": service, "disaggspec.io/role": role}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}
    return yaml.safe_dump(pod)


def test_ready_servers_per_pool_from_the_api(cluster: Cluster, namespace: str) -> None:
    manifests = [
        _pod("p0", "prefill"),
        _pod("d0", "decode"),
        _pod("d1", "decode"),
        _pod("d2", "decode", schedulable=False),
        _pod("r0", "router"),
        _pod("other", "decode", service="other"),  # another service's pod is not counted
    ]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input="---\n".join(manifests))
    sampler = from_kubeconfig(cluster.kubeconfig, namespace, "llama")
    expected = {"decode": 2, "prefill": 1, "router": 1}
    cluster.wait_for("kwok marks the scheduled pods Ready", lambda: sampler.sample() == expected, timeout=60)
    assert asyncio.run(sampler()) == expected
    cluster.kubectl("delete", "pod", "d0", "-n", namespace, "--wait=true")
    assert sampler.sample() == {"decode": 1, "prefill": 1, "router": 1}
