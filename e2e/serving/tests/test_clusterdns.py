"""The cluster-DNS stand-in (`clusterdns.py`) and the emulator's resolver of its group leader, with fake pods and a
fake API; no cluster, no process."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from e2e.serving.clusterdns import PodName, lookup, parse_pod_name, record_addresses
from e2e.serving.emulator.group import Resolver, parse_dist_init_addr
from e2e.serving.kubeapi import ApiError

SELECTOR = {"leaderworkerset.sigs.k8s.io/name": "llama-decode"}
HEADLESS: dict[str, Any] = {
    "metadata": {"name": "llama-decode", "namespace": "ns"},
    "spec": {"clusterIP": "None", "selector": SELECTOR, "publishNotReadyAddresses": True},
}
NAME = PodName("llama-decode-1", "llama-decode", "ns")


def lws_pod(group: int, worker: int, ip: str, *, ready: bool = False, **extra: Any) -> dict[str, Any]:
    """A LeaderWorkerSet pod as its StatefulSet makes it: hostname = its name, subdomain = the LWS's."""
    name = f"llama-decode-{group}" + (f"-{worker}" if worker else "")
    labels = {**SELECTOR, "leaderworkerset.sigs.k8s.io/group-index": str(group)}
    labels["leaderworkerset.sigs.k8s.io/worker-index"] = str(worker)
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "spec": {"hostname": name, "subdomain": "llama-decode"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }
    if ip:
        pod["status"]["podIP"] = ip
    pod["metadata"].update(extra)
    return pod


PODS = [lws_pod(0, 0, "127.40.0.1"), lws_pod(0, 1, "127.40.0.2"), lws_pod(1, 0, "127.40.0.3")]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("llama-decode-1.llama-decode.ns", NAME),
        ("llama-decode-1.llama-decode.ns.svc", NAME),
        ("llama-decode-1.llama-decode.ns.svc.cluster.local", NAME),
        ("llama-decode-1.llama-decode.ns.svc.cluster.local.", NAME),
        ("LLAMA-decode-1.llama-decode.NS", NAME),
        ("llama-decode-1.llama-decode", NAME),  # the search path: <own namespace>.svc.cluster.local
        ("llama-decode", None),  # a Service's own name, not a pod's
        ("llama-decode-1.llama-decode.ns.svc.other.zone", None),
        ("a.b.c.d", None),
        ("a..ns", None),
    ],
)
def test_names_are_read_like_a_pods_resolver(name: str, expected: PodName | None) -> None:
    assert parse_pod_name(name, "ns") == expected


def test_the_record_is_the_pod_with_that_hostname_and_subdomain() -> None:
    assert record_addresses(HEADLESS, PODS, NAME) == ["127.40.0.3"]
    assert record_addresses(HEADLESS, PODS, PodName("llama-decode-0", "llama-decode", "ns")) == ["127.40.0.1"]
    assert str(NAME) == "llama-decode-1.llama-decode.ns.svc.cluster.local"


def test_what_publishes_a_pod_record() -> None:
    not_ready = [lws_pod(1, 0, "127.40.0.3")]
    assert record_addresses(HEADLESS, not_ready, NAME) == ["127.40.0.3"]  # LWS's Service publishes unready pods
    strict = copy.deepcopy(HEADLESS)
    del strict["spec"]["publishNotReadyAddresses"]
    assert record_addresses(strict, not_ready, NAME) == []
    assert record_addresses(strict, [lws_pod(1, 0, "127.40.0.3", ready=True)], NAME) == ["127.40.0.3"]
    terminating = lws_pod(1, 0, "127.40.0.3", ready=True, deletionTimestamp="2025-01-01T00:00:00Z")
    assert record_addresses(strict, [terminating], NAME) == []
    assert record_addresses(HEADLESS, [terminating], NAME) == ["127.40.0.3"]
    assert record_addresses(HEADLESS, [lws_pod(1, 0, "")], NAME) == []  # no IP yet: NXDOMAIN, retry
    failed = lws_pod(1, 0, "127.40.0.3")
    failed["status"]["phase"] = "Failed"
    assert record_addresses(HEADLESS, [failed], NAME) == []
    assert record_addresses(None, PODS, NAME) == []  # no Service named like the subdomain
    cluster_ip = copy.deepcopy(HEADLESS)
    cluster_ip["spec"]["clusterIP"] = "10.0.0.5"
    assert record_addresses(cluster_ip, PODS, NAME) == []  # only a headless Service publishes pod records
    other = copy.deepcopy(HEADLESS)
    other["spec"]["selector"] = {"app": "other"}
    assert record_addresses(other, PODS, NAME) == []  # the Service does not select the pod
    elsewhere = lws_pod(1, 0, "127.40.0.3")
    elsewhere["spec"]["subdomain"] = "other"
    assert record_addresses(HEADLESS, [elsewhere], NAME) == []


class FakeDnsApi:
    """The two reads of `lookup`: the Service named like the subdomain, the pods its selector matches."""

    def __init__(self, service: dict[str, Any] | None, pods: list[dict[str, Any]]) -> None:
        self.service, self.pods = service, pods
        self.fail = False
        self.calls: list[tuple[str, dict[str, Any] | None]] = []

    def get(self, path: str) -> dict[str, Any] | None:
        if self.fail:
            raise ApiError(0, "unreachable")
        self.calls.append((path, None))
        return self.service

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None) -> Any:
        assert method == "GET"
        self.calls.append((path, query))
        return {"items": self.pods}


def test_lookup_reads_the_service_then_the_pods_it_selects() -> None:
    api = FakeDnsApi(HEADLESS, PODS)
    assert lookup(api, NAME) == ["127.40.0.3"]
    assert api.calls == [
        ("/api/v1/namespaces/ns/services/llama-decode", None),
        ("/api/v1/namespaces/ns/pods", {"labelSelector": "leaderworkerset.sigs.k8s.io/name=llama-decode"}),
    ]
    assert lookup(FakeDnsApi(None, PODS), NAME) == []


def test_the_emulators_resolver() -> None:
    api = FakeDnsApi(HEADLESS, [lws_pod(1, 0, "")])
    resolver = Resolver("127.40.0.9", "ns", "unused: the fake API is set below")
    resolver._api = api  # type: ignore[assignment]

    async def resolve(host: str) -> str | None:
        return await resolver.resolve(host)

    assert asyncio.run(resolve("127.40.0.1")) == "127.40.0.1"  # a pod IP is itself
    for this_pod in ("localhost", "127.0.0.1", "::1"):  # inside a pod: that pod
        assert asyncio.run(resolve(this_pod)) == "127.40.0.9"
    assert asyncio.run(resolve("llama-decode-1.llama-decode")) is None  # the leader has no IP yet
    api.pods = [lws_pod(1, 0, "127.40.0.3")]
    assert asyncio.run(resolve("llama-decode-1.llama-decode")) == "127.40.0.3"
    assert asyncio.run(resolve("llama-decode-1.llama-decode.ns.svc.cluster.local")) == "127.40.0.3"
    api.fail = True
    assert asyncio.run(resolve("llama-decode-1.llama-decode.ns")) is None  # API unreachable: retried later


def test_dist_init_addr() -> None:
    address = parse_dist_init_addr("llama-decode-1.llama-decode.ns:20000")
    assert (address.host, address.port) == ("llama-decode-1.llama-decode.ns", 20000)
    v6 = parse_dist_init_addr("[fd00::1]:20000")
    assert (v6.host, v6.port) == ("fd00::1", 20000)
    for bad in ("host", "host:", ":20000", "host:port"):
        with pytest.raises(ValueError, match="expected host:port"):
            parse_dist_init_addr(bad)
