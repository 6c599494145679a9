"""pytest fixtures and helpers shared by the e2e suites: one real cluster per session and a namespace per test,
private clusters (`private_cluster`), fresh namespaces on any cluster, and the skip marker for tests that need the
built binaries (`needs_built`). The serving suites' whole plane is `planes.serving_plane`, the shared fakes of the
suites that need no cluster are in `fakes.py`.

By default the session brings up the local control plane (`e2e/cluster`) in its own state directory and port range,
so it never collides with a `make demo` or `make cluster-up` cluster, and stops it at the end. Set
`DISAGGSPEC_TEST_KUBECONFIG` to run the suites against an existing cluster instead (a kind cluster with GPUs, or a
`make cluster-up` one); a plain `KUBECONFIG` is deliberately not used, so tests never run against whatever cluster a
shell happens to point at.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from e2e.cluster import build
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.cluster.processes import port_free
from e2e.support.kube import Cluster, CommandFailed

__all__ = ["Cluster", "CommandFailed"]

STATE_ROOT = Path(__file__).resolve().parents[2] / ".state"
TEST_PORT_BASE = 17379
PORTS_PER_CLUSTER = 10
SESSION_NODES = 8
SESSION_H100_NODES = 4


BACKENDS = ("local", "kind-gpu")


def needs_built(
    *components: build.Component, reason: str = "needs the binaries (make cluster-build)"
) -> pytest.MarkDecorator:
    """Skip unless every one of `components` is built (`python -m e2e.cluster build`, cached across checkouts)."""
    return pytest.mark.skipif(not all(component.is_built() for component in components), reason=reason)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--backend",
        choices=BACKENDS,
        default=os.environ.get("DISAGGSPEC_E2E_BACKEND", "local"),
        help="local: the embedded control plane with kwok GPU nodes (CI); kind-gpu: the cluster in "
        "DISAGGSPEC_TEST_KUBECONFIG, with real GPUs and the chart's operator running in it (e2e/kind_gpu/run.sh)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    backend = config.getoption("--backend")
    for item in items:
        if backend == "local" and item.get_closest_marker("kind_gpu"):
            item.add_marker(pytest.mark.skip(reason="needs real GPUs: the kind-gpu backend (e2e/kind_gpu/run.sh)"))
        if backend == "kind-gpu" and item.get_closest_marker("local_only"):
            item.add_marker(pytest.mark.skip(reason="needs the local backend's kwok GPU nodes"))


@pytest.fixture(scope="session")
def backend(request: pytest.FixtureRequest) -> str:
    """The e2e backend this session runs against: `local` or `kind-gpu`."""
    value: str = request.config.getoption("--backend")
    if value == "kind-gpu" and not os.environ.get("DISAGGSPEC_TEST_KUBECONFIG"):
        raise pytest.UsageError("--backend kind-gpu needs DISAGGSPEC_TEST_KUBECONFIG (e2e/kind_gpu/run.sh sets it)")
    return value


def _clear_abandoned_test_clusters() -> None:
    """Stop test clusters whose pytest process is gone (killed before its teardown ran)."""
    for directory in STATE_ROOT.glob("test-cluster-*"):
        owner = directory.name.rsplit("-", 1)[-1]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            LocalCluster(directory).down(quiet=True)


CLUSTERS_PER_WORKER = 10
"""Port ranges each pytest-xdist worker searches (its own slice, so two workers never race for the same range)."""


def _worker_index() -> int:
    """This process's pytest-xdist worker number (gw0 -> 0), 0 without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0


def _free_port_base(first: int = TEST_PORT_BASE) -> int:
    start = first + _worker_index() * CLUSTERS_PER_WORKER * PORTS_PER_CLUSTER
    for base in range(start, start + CLUSTERS_PER_WORKER * PORTS_PER_CLUSTER, PORTS_PER_CLUSTER):
        if all(port_free(port) for port in range(base, base + PORTS_PER_CLUSTER)):
            return base
    raise RuntimeError(f"no free loopback port range in {start}..{start + CLUSTERS_PER_WORKER * PORTS_PER_CLUSTER}")


PRIVATE_PORT_BASE = TEST_PORT_BASE + 50 * PORTS_PER_CLUSTER
"""Private clusters take their ports from above the session clusters' range."""


@contextmanager
def private_cluster(
    stem: str, nodes: int = 4, serving: bool = False, h100_nodes: int = 0
) -> Iterator[tuple[LocalCluster, Cluster]]:
    """A local control plane of its own (state directory, ports), with the CRD installed, for tests that stop or
    restart its components or need serving mode (`serving=True`: pods are Ready only through the pod runner);
    stopped when the block ends. The session cluster is never touched."""
    _clear_abandoned_test_clusters()
    local = LocalCluster(STATE_ROOT / f"test-cluster-{stem}-{os.getpid()}")
    base = _free_port_base(PRIVATE_PORT_BASE)
    shape = NodeShape(count=nodes, second_product_nodes=h100_nodes)
    state = local.up(port_base=base, nodes=shape, timeout=180, serving=serving)
    try:
        handle = Cluster(state.kubeconfig, local=True)
        install_crd(handle)
        yield local, handle
    finally:
        local.down()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    given = os.environ.get("DISAGGSPEC_TEST_KUBECONFIG")
    if given:
        yield Cluster(Path(given), local=False)
        return
    _clear_abandoned_test_clusters()
    # One cluster per pytest process: two sessions running at once (a developer and an editor plugin, say) must not
    # share, or tear down, each other's control plane.
    local = LocalCluster(STATE_ROOT / f"test-cluster-{os.getpid()}")
    # The multi-node example takes four whole H100 nodes (two tp16 groups of two pods); the other examples run on the
    # H200 nodes, where the pods of the previous test may still hold theirs while its namespace goes.
    shape = NodeShape(count=SESSION_NODES, second_product_nodes=SESSION_H100_NODES)
    state = local.up(port_base=_free_port_base(), nodes=shape)
    try:
        yield Cluster(state.kubeconfig, local=True)
    finally:
        local.down()


CRD_FILE = Path(__file__).resolve().parents[2] / "crds"
"""Both CRDs: the DisaggSpecService and its per-pool scale target, the DisaggSpecPool."""
CRD_NAME = "disaggspecservices.disaggspec.io"
CRD_NAMES = (CRD_NAME, "disaggspecpools.disaggspec.io")


def crd_established(cluster: Cluster) -> bool:
    # Right after a create, `.status.conditions` is still null and `kubectl wait` errors out: poll instead.
    for name in CRD_NAMES:
        got = cluster.kubectl(
            "get", "crd", name, "-o", "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False
        )
        if got.stdout.strip() != "True":
            return False
    return True


def install_crd(cluster: Cluster) -> Cluster:
    """Install the committed CRD; return once it is established and served."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    cluster.wait_for("the CRD to be Established", lambda: crd_established(cluster))
    cluster.wait_for(
        "disaggspecservices to be served",
        lambda: cluster.kubectl("get", "disaggspecservices", "-A", check=False).returncode == 0,
    )
    return cluster


@pytest.fixture(scope="session")
def installed_crd(cluster: Cluster) -> Cluster:
    """The session cluster with the committed CRD installed, established and served."""
    return install_crd(cluster)


@contextmanager
def fresh_namespace(cluster: Cluster, stem: str) -> Iterator[str]:
    """A new namespace `t-<stem>-<random>` with its `default` ServiceAccount (pods are rejected until it exists),
    deleted (without waiting) when the block ends."""
    name = f"t-{stem}-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    try:
        try:
            cluster.wait_for(
                f"ServiceAccount default in {name}",
                lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
            )
        except AssertionError:
            # The controller-manager may still be recovering from a fault test's API-server outage (seen once in
            # make test on 2 cores): the namespace's tests need the account, not that controller, so create it.
            created = cluster.kubectl("create", "serviceaccount", "default", "-n", name, check=False)
            if created.returncode != 0 and "AlreadyExists" not in created.stderr:
                raise
        yield name
    finally:
        cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def short_stem(request: pytest.FixtureRequest) -> str:
    """A namespace stem from the test's function name (parameters and the `test_` prefix dropped, 20 characters), for
    the private planes, whose namespaces also carry their own prefixes."""
    name: str = request.node.name
    return name.split("[")[0].removeprefix("test_")[:20].replace("_", "-").strip("-")


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, named after the test; deleted afterwards."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    with fresh_namespace(cluster, slug) as name:
        yield name
