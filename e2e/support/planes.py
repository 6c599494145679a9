"""The serving plane a serving suite runs on, set up in one place: a private control plane in serving mode (pods are
Ready only through the pod runner), the operator as a local process, and the pod runner, with the router venv of
every supported release built first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from disaggspec.sglang.profiles import PROFILES
from e2e.cluster.controlplane import LocalCluster
from e2e.serving.routers import ensure_router_venv
from e2e.support.fixtures import private_cluster
from e2e.support.kube import Cluster
from e2e.support.operator_process import OperatorProcess
from e2e.support.serving import pod_runner


@dataclass(frozen=True)
class ServingPlane:
    """A private control plane in serving mode with the operator and the pod runner running against it."""

    local: LocalCluster
    cluster: Cluster
    operator: OperatorProcess
    logs: Path
    """The pod runner's log directory (one file per container)."""


@contextmanager
def serving_plane(
    stem: str,
    nodes: int,
    h100_nodes: int = 0,
    operator_env: dict[str, str] | None = None,
    prepare: Callable[[Cluster], None] | None = None,
) -> Iterator[ServingPlane]:
    """A module's serving plane: the router venvs of every supported release built (a minute or two when cold), then
    `private_cluster(stem, nodes, serving=True, h100_nodes)`, `prepare(cluster)` (node labels, say) before the
    operator starts (its log is `operator.log` in the cluster's state directory, its environment `operator_env` on
    top of the test's), then the pod runner; stopped in reverse order when the block ends."""
    for profile in PROFILES.values():
        ensure_router_venv(profile.router)
    with private_cluster(stem, nodes=nodes, serving=True, h100_nodes=h100_nodes) as (local, cluster):
        if prepare is not None:
            prepare(cluster)
        operator = OperatorProcess(cluster.kubeconfig, local.directory / "operator.log", extra_env=operator_env).start()
        try:
            with pod_runner(local.directory, cluster.kubeconfig) as logs:
                yield ServingPlane(local, cluster, operator, logs)
        finally:
            operator.stop()
