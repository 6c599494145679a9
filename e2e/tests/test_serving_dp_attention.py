"""SGLang's large-scale PD layout in the serving simulation (issue 30): DP attention on both pools, through the real
router.

One private serving plane (the operator, the pod runner, the real routers, the SGLang emulator per pool pod; see
docs/serving-emulator.md) runs four services at once: the DP-attention example (tp16 groups of two H100 pods,
attention DP 16, DeepEP, NEXTN), whose requests spread over the DP ranks of both pools; at each release a prefill and
a decode of different DP sizes (attention DP 8 on one node against DP 16 over two nodes), which pair every request
with the prefill rank holding its KV; and a pair whose prefill's DP dispatch is made wrong by hand while the operator
is paused, which fails requests visibly until the operator puts its own arguments back. Each server's DP controller
reports what it gave each rank at `GET /emulator/dp` (the emulator's stand-in for SGLang's `dp_rank` metric label).
"""

from __future__ import annotations

import copy
import json
import os
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from disaggspec.servinghealth import samples
from e2e.serving.traffic import Load, Report, send
from e2e.support.fixtures import Cluster, fresh_namespace
from e2e.support.planes import ServingPlane, serving_plane
from e2e.support.serving import apply_service, ready_pods, router_url, served_model
from e2e.support.workloads import LWS_WORKER_INDEX, example, get, load, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.local_only, pytest.mark.wall_seconds(210)]

H100_NODES = 4
"""The example's two tp16 groups take four whole H100 nodes (tainted: only the example tolerates them)."""
NODES = 12
"""The four H100 nodes and eight H200 nodes: each mixed-size pair takes three whole H200 nodes (a tp8 prefill pod and
a tp16 decode group of two), the wrong-dispatch pair (2 + 4 GPUs) and the routers parts of the last two."""
H200 = {"nvidia.com/gpu.product": "NVIDIA-H200"}
SHORT_BOOTSTRAP = [
    {"name": "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "value": "3"},
    {"name": "SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "value": "3"},
]
"""PD timeouts (seconds) of the pair whose handshakes are meant to fail: the prefill waits this long for a decode's
KV indices, the decode for the transfer (SGLang's default is 300 s for each)."""

Placed = dict[str, tuple[str, dict[str, Any]]]
"""key -> (namespace, service as applied)."""


@pytest.fixture(scope="module")
def plane() -> Iterator[ServingPlane]:
    if os.environ.get("DISAGGSPEC_TEST_KUBECONFIG"):
        pytest.skip("serving mode needs the local control plane and its pod runner")
    with serving_plane("dp-attention", nodes=NODES, h100_nodes=H100_NODES) as plane:
        yield plane


def _example() -> dict[str, Any]:
    return load(example("pd-dp-ep"))


def _layout(tp: int, dp: int, deepep_mode: str) -> dict[str, Any]:
    """One pool's tp and DP-attention layout in the example's style (DeepEP over every GPU, EPLB, TBO, DP LM head),
    on one node up to 8 GPUs, else in groups of 8-GPU nodes; on the H200 nodes (the H100s are the example's)."""
    return {
        "tensorParallelSize": tp,
        "nodesPerInstance": max(1, tp // 8),
        "gpusPerNode": 8,
        "parallelism": {
            "dataParallelAttention": {"size": dp},
            "expertParallel": {"size": tp, "backend": "deepep", "deepepMode": deepep_mode},
            "denseMlpTpSize": 1,
            "dpLmHead": True,
            "twoBatchOverlap": True,
            "eplb": {"redundantExperts": 32},
        },
        "nodeSelector": H200,
        "tolerations": [],
        "extraArgs": [],
    }


def _pair(
    version: str, prefill: dict[str, Any], decode: dict[str, Any], env: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    """The example at `version` with these pool layouts (and `env` on both pools), one router, without its model cache
    and on the pod network: these services test the pairing; the example itself tests the cache and the host
    network."""
    obj = copy.deepcopy(_example())
    spec = obj["spec"]
    spec["sglang"] = {"version": version, "image": f"disaggspec/sglang:v{version}-disaggspec"}
    del spec["model"]["cache"]
    spec["transfer"]["rdma"]["hostNetwork"] = False
    spec["prefill"].update(prefill, env=env or [])
    spec["decode"].update(decode, env=env or [])
    spec["router"] = {"replicas": 1}
    return obj


def _place(plane: ServingPlane, objects: dict[str, dict[str, Any]]) -> Iterator[Placed]:
    """Apply every service in a namespace of its own at once (their start-ups overlap), wait for all to be Ready,
    yield them; the namespaces go when the block ends."""
    with ExitStack() as stack:
        placed: Placed = {}
        for key, obj in objects.items():
            namespace = stack.enter_context(fresh_namespace(plane.cluster, key))
            placed[key] = (namespace, apply_service(plane.cluster, namespace, obj))
        for namespace, obj in placed.values():
            wait_ready(plane.cluster, namespace, obj["metadata"]["name"], timeout=150)
        yield placed


@pytest.fixture(scope="module")
def services(plane: ServingPlane) -> Iterator[Placed]:
    objects = {
        "example": _example(),
        "mixed-0523": _pair("0.5.23", _layout(8, 8, "normal"), _layout(16, 16, "low_latency")),
        "mixed-052": _pair("0.5.2", _layout(8, 8, "normal"), _layout(16, 16, "low_latency")),
        "wrong-dispatch": _pair("0.5.2", _layout(2, 2, "normal"), _layout(4, 4, "low_latency"), SHORT_BOOTSTRAP),
    }
    yield from _place(plane, objects)


def _describe(report: Report) -> str:
    return json.dumps(report.summary(), indent=1)


def _leader(cluster: Cluster, namespace: str, name: str, role: str) -> dict[str, Any]:
    """The one Ready pod of `role` that serves SGLang's API: the pod, or a group's leader."""
    pods = [
        p
        for p in ready_pods(cluster, namespace, name, role)
        if p["metadata"]["labels"].get(LWS_WORKER_INDEX, "0") == "0"
    ]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def _dp_report(pod: dict[str, Any]) -> dict[str, Any]:
    """What the server's DP controller gave each of its ranks (`GET /emulator/dp`, docs/serving-emulator.md)."""
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:30000/emulator/dp", timeout=5) as response:
        report: dict[str, Any] = json.loads(response.read())
    return report


def _spread(before: dict[str, Any], after: dict[str, Any]) -> list[int]:
    """Requests each DP rank was given between two reports."""
    return [b - a for a, b in zip(before["dispatched"], after["dispatched"], strict=True)]


# ---- the example: requests spread over the DP ranks of both pools ----------------------------------------------------


def test_the_dp_attention_example_serves_over_every_dp_rank(plane: ServingPlane, services: Placed) -> None:
    """The example as shipped (0.5.23, host network, model cache): its router registers the two group leaders, and
    200 requests through it all succeed, each given to one of the 16 DP ranks of the prefill and of the decode, every
    rank getting some (the prefill follows each request's bootstrap room, the decode deals them round robin)."""
    cluster = plane.cluster
    namespace, obj = services["example"]
    name = obj["metadata"]["name"]
    cached = _condition(cluster, namespace, name, "ModelCached")
    assert (cached.get("status"), cached.get("reason")) == ("True", "Filled"), cached
    prefill, decode = (_leader(cluster, namespace, name, role) for role in ("prefill", "decode"))
    # Host network, as shipped: each leader serves on its own node's address (the pod runner gives each kwok node one).
    assert prefill["spec"].get("hostNetwork") is decode["spec"].get("hostNetwork") is True
    assert prefill["status"]["podIP"] == prefill["status"]["hostIP"] != decode["status"]["podIP"]
    before = {role: _dp_report(pod) for role, pod in (("prefill", prefill), ("decode", decode))}
    for layout in before.values():
        assert (layout["num_dp_ranks"], layout["attn_dp_size"], layout["attn_tp_size"]) == (16, 16, 1), layout

    report = send(Load(url=router_url(cluster, namespace, obj), model=served_model(obj), streams=8, requests=200))
    assert len(report.outcomes) == 200 and not report.failures, _describe(report)
    assert set(report.served_by("prefill")) == {prefill["metadata"]["name"]}, _describe(report)
    assert set(report.served_by("decode")) == {decode["metadata"]["name"]}, _describe(report)
    for role, pod in (("prefill", prefill), ("decode", decode)):
        spread = _spread(before[role], _dp_report(pod))
        assert sum(spread) == 200 and min(spread) > 0, (role, spread)
    print(f"DP ranks of the example: prefill {_spread(before['prefill'], _dp_report(prefill))}")


# ---- a prefill and a decode of different DP sizes --------------------------------------------------------------------


@pytest.mark.parametrize("key", ["mixed-0523", "mixed-052"])
def test_a_prefill_and_a_decode_of_different_dp_sizes_pair_every_request(
    plane: ServingPlane, services: Placed, key: str
) -> None:
    """Attention DP 8 on one node against DP 16 over a two-node group: the decode finds the prefill DP rank that
    holds each request's KV from the prefill's parallel info (0.5.23: the room, as the prefill follows it; 0.5.2:
    bootstrap_room % the prefill's DP size, which its round-robin dispatcher follows in PD mode), so no request
    fails, and each pool spreads them over its own ranks."""
    cluster = plane.cluster
    namespace, obj = services[key]
    name = obj["metadata"]["name"]
    prefill, decode = (_leader(cluster, namespace, name, role) for role in ("prefill", "decode"))
    before = {"prefill": _dp_report(prefill), "decode": _dp_report(decode)}
    assert before["prefill"]["num_dp_ranks"] == 8 and before["decode"]["num_dp_ranks"] == 16, before
    report = send(Load(url=router_url(cluster, namespace, obj), model=served_model(obj), streams=8, requests=64))
    assert len(report.outcomes) == 64 and not report.failures, _describe(report)
    prefill_spread = _spread(before["prefill"], _dp_report(prefill))
    decode_spread = _spread(before["decode"], _dp_report(decode))
    assert sum(prefill_spread) == sum(decode_spread) == 64, (prefill_spread, decode_spread)
    assert sum(1 for n in prefill_spread if n) > 1 and sum(1 for n in decode_spread if n) > 1


# ---- a wrong layout fails visibly ------------------------------------------------------------------------------------


def test_a_prefill_dispatching_off_the_room_fails_requests_until_the_operator_repairs_it(
    plane: ServingPlane, services: Placed
) -> None:
    """0.5.2, attention DP 2 against 4. What pairs a request with its KV is the prefill placing it on DP rank
    bootstrap_room % 2, where the decode looks for it: the operator never renders --load-balance-method, and the rule
    parallelism-prefill-dp-dispatch refuses it in extraArgs. (The peer hints the operator renders on a 0.5.2 prefill,
    --disaggregation-decode-tp/-dp, are read only by a start-up check: a wrong one that still divides changes
    nothing, as in SGLang; e2e/serving/emulator/tests/test_emulator_dp.py shows both.) Added to the prefill
    Deployment by hand while the operator is paused, `minimum_tokens` (the least-loaded rank, whatever the room)
    fails the requests whose room points at the other rank, naming the handshake, and the decode's failure counter
    rises; once the operator runs again it puts its own command back and every request succeeds."""
    cluster, operator = plane.cluster, plane.operator
    namespace, obj = services["wrong-dispatch"]
    name = obj["metadata"]["name"]
    url = router_url(cluster, namespace, obj)
    load_ = Load(url=url, model=served_model(obj), streams=4, requests=12, duration=60, timeout=30)
    assert not send(load_).failures

    (deployment,) = get(
        cluster, namespace, "deployments", "-l", f"disaggspec.io/service={name},disaggspec.io/role=prefill"
    )["items"]
    rendered = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "--load-balance-method" not in rendered
    old = {p["metadata"]["name"] for p in ready_pods(cluster, namespace, name, "prefill")}
    decode = _leader(cluster, namespace, name, "decode")
    failed_before = _failed_transfers(decode)
    operator.pause()
    try:
        patch = [
            {"op": "add", "path": "/spec/template/spec/containers/0/command/-", "value": v}
            for v in ("--load-balance-method", "minimum_tokens")
        ]
        cluster.kubectl(
            "patch",
            "deployment",
            deployment["metadata"]["name"],
            "-n",
            namespace,
            "--type=json",
            "-p",
            json.dumps(patch),
        )
        _wait_prefill_replaced(cluster, namespace, name, old)
        edited = _leader(cluster, namespace, name, "prefill")
        assert edited["spec"]["containers"][0]["command"][-2:] == ["--load-balance-method", "minimum_tokens"]
        broken = send(load_)
    finally:
        operator.resume()
    assert len(broken.outcomes) == 12 and broken.failures, _describe(broken)
    named = [o for o in broken.failures if not o.stream]
    assert all(any(w in o.error.lower() for w in ("handshake", "bootstrap", "transfer", "abort")) for o in named), (
        _describe(broken)
    )
    assert _failed_transfers(decode) > failed_before
    print(f"prefill off the room: {len(broken.failures)} of 12 requests failed, e.g. {broken.failures[0].error!r}")

    # The operator puts its own command back (a rolling update of the prefill), and the pair serves again.
    repaired = {edited["metadata"]["name"]}
    _wait_prefill_replaced(cluster, namespace, name, repaired, timeout=90)
    assert (
        "--load-balance-method" not in _leader(cluster, namespace, name, "prefill")["spec"]["containers"][0]["command"]
    )
    assert not send(load_).failures


def _condition(cluster: Cluster, namespace: str, name: str, type_: str) -> dict[str, Any]:
    conditions = get(cluster, namespace, "dss", name).get("status", {}).get("conditions", [])
    return next((cond for cond in conditions if cond["type"] == type_), {})


def _failed_transfers(pod: dict[str, Any]) -> float:
    """The decode's failed requests: bootstrap and transfer failures, read as the operator reads them (per DP group
    the largest series, summed over the groups: `servinghealth.samples`). Each DP group counts its own requests'
    failures and labels its series tp_rank = dp_rank x attention TP, so tp_rank 0's series alone saw only the failures
    whose room fell in group 0 (this test failed whenever none did)."""
    with urllib.request.urlopen(f"http://{pod['status']['podIP']}:30000/metrics", timeout=5) as response:
        return samples.parse(response.read().decode()).failures


def _wait_prefill_replaced(cluster: Cluster, namespace: str, name: str, old: set[str], timeout: float = 60) -> None:
    """Until the one prefill pod is a new, Ready one and the `old` ones are gone."""

    def replaced() -> bool:
        pods = get(cluster, namespace, "pods", "-l", f"disaggspec.io/service={name},disaggspec.io/role=prefill")[
            "items"
        ]
        names = {p["metadata"]["name"] for p in pods}
        return not names & old and len(ready_pods(cluster, namespace, name, "prefill")) == 1 and len(names) == 1

    cluster.wait_for(f"a new prefill pod of {namespace}/{name}", replaced, timeout=timeout, interval=0.5)
