"""Ready servers per pool of one DisaggSpecService, read from the Kubernetes API while a load runs.

A server is a pod of the service (label `disaggspec.io/service=<name>`) that is Ready and not terminating
(`servicetraffic.pod_ready`, kube-proxy's rule), counted under its `disaggspec.io/role` label (prefill, decode,
router). In a multi-node pool only the leader of each LeaderWorkerSet group counts (`worker-index` 0): one server
spans the group, and the router discovers leaders only. One list call per sample, through `e2e.serving.kubeapi`
(the kubeconfig's credentials), on a worker thread so the load's event loop never waits for the API server.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from disaggspec.constants import LABEL_ROLE, LABEL_SERVICE, LWS_LABEL_WORKER_INDEX
from e2e.serving.servicetraffic import pod_ready


class PodLister(Protocol):
    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None) -> Any: ...


def ready_servers(pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Ready servers per role among `pods` (every role seen is present, with 0 when none is ready)."""
    counts: Counter[str] = Counter()
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        role = labels.get(LABEL_ROLE)
        if not role or labels.get(LWS_LABEL_WORKER_INDEX, "0") != "0":
            continue
        counts[role] += int(pod_ready(pod))
    return dict(sorted(counts.items()))


class PoolSampler:
    """`await sampler()`: the ready servers per pool of service `namespace/name` now."""

    def __init__(self, api: PodLister, namespace: str, name: str) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name

    def sample(self) -> dict[str, int]:
        """One list call (blocking)."""
        pods = self.api.request(
            "GET", f"/api/v1/namespaces/{self.namespace}/pods", query={"labelSelector": f"{LABEL_SERVICE}={self.name}"}
        )
        return ready_servers((pods or {}).get("items") or [])

    async def __call__(self) -> dict[str, int]:
        return await asyncio.to_thread(self.sample)


def from_kubeconfig(kubeconfig: Path, namespace: str, name: str) -> PoolSampler:
    from e2e.serving.kubeapi import KubeApi  # only when asked: a load without a cluster needs no credentials

    return PoolSampler(KubeApi(kubeconfig, timeout=5.0), namespace, name)
