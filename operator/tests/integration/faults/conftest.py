"""Fixtures of the fault tests: a private control plane per test module (`plane`), a fresh namespace per test (`ns`),
and a directory per test for operator logs (`log`).

Each module gets a control plane of its own (`private_cluster`): several tests stop or restart its API server, which
must never happen to the session cluster other modules share, nor to another fault module's plane.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.support.fixtures import fresh_namespace, private_cluster
from e2e.support.operator_install import WEBHOOK_KINDS
from e2e.support.operator_process import WEBHOOK_CONFIGURATION
from tests.integration.faults.support import NODES, Plane


@pytest.fixture(scope="module")
def plane() -> Iterator[Plane]:
    """This module's private control plane (NODES GPU nodes, the CRD installed), stopped after its last test."""
    if os.environ.get("DISAGGSPEC_TEST_KUBECONFIG"):
        pytest.skip("restarts API server components: needs the local control plane")
    with private_cluster("faults", nodes=NODES) as (local, cluster):
        yield Plane(local, cluster)


@pytest.fixture(scope="module")
def logs() -> Path:
    """Operator logs of this module, outside pytest's rotated temporary directories (other runs prune those)."""
    return Path(tempfile.mkdtemp(prefix="disaggspec-faults-"))


@pytest.fixture
def log(logs: Path, request: pytest.FixtureRequest) -> Path:
    """This test's directory for operator logs."""
    directory = logs / str(request.node.name)
    directory.mkdir()
    return directory


@pytest.fixture
def ns(plane: Plane, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:30].strip("-")
    with fresh_namespace(plane.cluster, slug) as name:
        yield name
    # A stopped operator leaves its webhook registration behind: calls to it would only add latency to later tests.
    for kind in WEBHOOK_KINDS:
        plane.cluster.kubectl("delete", kind, WEBHOOK_CONFIGURATION, "--ignore-not-found", check=False)
