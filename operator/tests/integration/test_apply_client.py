"""apply.Client's reads against a real API server: paged, metadata-only UID listings (used by the start-up sync)."""

from __future__ import annotations

import pytest
from kubernetes import config as k8s_config

from disaggspec import apply
from e2e.support.fixtures import Cluster

pytestmark = pytest.mark.integration


def _client(cluster: Cluster) -> apply.Client:
    return apply.Client(k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig)))  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("count", [0, 1, 4, 5])
def test_list_uids_pages_through_every_match_and_only_matches(cluster: Cluster, namespace: str, count: int) -> None:
    uids = set()
    for index in range(count):
        name = f"listed-{index}"
        cluster.kubectl("create", "serviceaccount", name, "-n", namespace)
        cluster.kubectl("label", "serviceaccount", name, "-n", namespace, "disaggspec.io/test=listed")
        uid = cluster.kubectl("get", "serviceaccount", name, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout
        uids.add(uid)
    client = _client(cluster)
    selector = "disaggspec.io/test=listed"
    # Page sizes that divide the count exactly end on an empty page, which the API server sends as `items: null`.
    for page in (1, 2, 500):
        assert apply.list_uids(client, apply.SERVICE_ACCOUNT, namespace, selector, page=page) == uids
    everywhere = apply.list_uids(client, apply.SERVICE_ACCOUNT, None, selector, page=2)
    assert uids <= everywhere
    assert apply.list_uids(client, apply.SERVICE_ACCOUNT, namespace, "disaggspec.io/test=other") == set()
