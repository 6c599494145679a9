"""Coordinated prefill/decode rollouts under traffic (issue 18), on the serving simulation.

A private control plane in serving mode, the operator, the pod runner (real routers, SGLang emulators with a model
load time) and continuous bounded traffic through the router Service, balanced as kube-proxy would
(`e2e.serving.servicetraffic`). Every emulated pool pod carries its revision (the pod's spec-fingerprint label), and
an emulated decode refuses a prefill of another revision (docs/serving-emulator.md), so a pairing across revisions
is a failed request, and is also looked for in the pod logs (smg retries a failed request on another pair). A
sampler lists the service's pods every 200 ms and records the ready prefill and decode pods.

Node groups keep the tests' GPUs apart: each test's pools select their own labelled kwok nodes (8 GPUs each).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.serving.continuous import continuous
from e2e.serving.traffic import Load, Report
from e2e.support.fixtures import Cluster, fresh_namespace, short_stem
from e2e.support.planes import ServingPlane, serving_plane
from e2e.support.rollout import (
    CapacitySampler,
    capacity_sampler,
    cross_revision,
    kube_api,
    oracle_refusals,
    router_service_target,
)
from e2e.support.serving import apply_service, served_model
from e2e.support.workloads import example, get, load, wait_ready

pytestmark = [pytest.mark.integration, pytest.mark.local_only, pytest.mark.wall_seconds(480)]

NODES = 10
GROUPS = {"pairs": (0, 1, 2, 3), "one-slot": (4, 5, 6, 7), "no-slot": (8, 9)}
"""Node group -> kwok node indexes (gpu-node-N); `pairs` runs the one-GPU pools, the others whole-node pools."""
GROUP_LABEL = "disaggspec.test/group"
LOAD_SECONDS = "3"
"""Emulated model load: every new pool pod takes this long (plus its process start) before it can become ready."""
SIGNATURE = "disaggspec.io/spec-fingerprint"


def _label_node_groups(cluster: Cluster) -> None:
    for group, indexes in GROUPS.items():
        for index in indexes:
            cluster.kubectl("label", "node", f"gpu-node-{index}", f"{GROUP_LABEL}={group}", "--overwrite")


@pytest.fixture(scope="module")
def plane() -> Iterator[ServingPlane]:
    with serving_plane("rollout", nodes=NODES, prepare=_label_node_groups) as plane:
        yield plane


@pytest.fixture
def namespace(plane: ServingPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    with fresh_namespace(plane.cluster, short_stem(request)) as name:
        yield name


def _service(group: str, replicas: int = 1, gpus: int = 1, **rollout: Any) -> dict[str, Any]:
    """The EAGLE3 example with `replicas` per pool of `gpus` GPUs each on node group `group`, a 3 s model load and
    the shortest drain; `rollout` goes to spec.rollout."""
    obj = load(example("llama"))
    for role in ("prefill", "decode"):
        obj["spec"][role] = {
            "replicas": replicas,
            "tensorParallelSize": gpus,
            "resources": {"limits": {"nvidia.com/gpu": gpus}},
            "nodeSelector": {GROUP_LABEL: group},
            "podAnnotations": {"emulator.disaggspec.io/load-seconds": LOAD_SECONDS},
            "lifecycle": {"drainSeconds": 30},
        }
    if rollout:
        obj["spec"]["rollout"] = rollout
    return obj


def _bump_image(obj: dict[str, Any], tag: str) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["sglang"]["image"] = f"disaggspec/sglang:v0.5.2-disaggspec-{tag}"
    return changed


def _status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    obj = json.loads(cluster.kubectl("get", "dss", name, "-n", namespace, "-o", "json").stdout)
    return {"generation": obj["metadata"]["generation"], **(obj.get("status") or {})}


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == type_), {})


def _rolled_out(cluster: Cluster, namespace: str, name: str, previous_fingerprint: str | None = None) -> bool:
    """The latest spec is the only revision, Active, and Ready."""
    status = _status(cluster, namespace, name)
    revisions = status.get("revisions") or []
    return (
        status.get("observedGeneration") == status["generation"]
        and status.get("specFingerprint") not in (None, previous_fingerprint)
        and len(revisions) == 1
        and revisions[0]["traffic"] == "Active"
        and revisions[0]["fingerprint"] == status.get("specFingerprint")
        and _condition(status, "Ready").get("status") == "True"
    )


def _wait_rolled_out(
    plane: ServingPlane, namespace: str, name: str, previous_fingerprint: str | None, timeout: float = 180
) -> str:
    try:
        plane.cluster.wait_for(
            f"{namespace}/{name} rolled out from {previous_fingerprint}",
            lambda: _rolled_out(plane.cluster, namespace, name, previous_fingerprint),
            timeout=timeout,
            interval=0.5,
        )
    except AssertionError as timed_out:
        # Where the rollout stands says why it did not finish (held, waiting for pods, or slow).
        raise AssertionError(f"{timed_out}; status now: {_rollout_state(plane.cluster, namespace, name)}") from None
    return str(_status(plane.cluster, namespace, name)["specFingerprint"])


def _rollout_state(cluster: Cluster, namespace: str, name: str) -> str:
    """The revisions (replicas and ready per role, traffic) and the Progressing and Ready conditions, as JSON."""
    status = _status(cluster, namespace, name)
    return json.dumps(
        {
            "revisions": status.get("revisions"),
            "conditions": {
                t: {k: _condition(status, t).get(k) for k in ("status", "reason", "message")}
                for t in ("Progressing", "Ready")
            },
        }
    )


def _events(cluster: Cluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = get(
        cluster, namespace, "events", "--field-selector", f"involvedObject.name={name},reason={reason}"
    )["items"]
    return found


def _traffic(obj: dict[str, Any], duration: float = 300) -> Load:
    """Four streams of short requests: bounded by count and time, stopped by the test much earlier."""
    return Load(url="", model=served_model(obj), streams=4, requests=50_000, duration=duration, max_tokens=8)


def _describe(report: Report, sampler: CapacitySampler | None = None) -> str:
    summary = report.summary()
    if sampler is not None:
        summary["min_ready"] = {role: sampler.minimum(role) for role in ("prefill", "decode")}
        summary["dips"] = [
            {
                "at": round(sample.at, 2),
                "ready": dict(sample.ready),
                "revisions": {k: sorted(v) for k, v in sample.fingerprints.items()},
            }
            for sample in sampler.samples
            if any(sample.ready[role] < sampler.maximum(role) // 2 for role in ("prefill", "decode"))
        ][:5]
    return json.dumps(summary, indent=1)


def _assert_clean(plane: ServingPlane, report: Report) -> None:
    """Requests flowed, none failed, none was paired across revisions (neither seen by the client nor refused and
    retried inside the router)."""
    assert len(report.outcomes) > 50, _describe(report)
    assert not report.failures, _describe(report)
    assert not cross_revision(report), _describe(report)
    assert oracle_refusals(plane.logs) == []


def _pool_pods(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    """uid -> revision of the service's pool pods that are not being deleted."""
    items = get(cluster, namespace, "pods", "-l", f"disaggspec.io/service={name}")["items"]
    return {
        p["metadata"]["uid"]: p["metadata"]["labels"][SIGNATURE]
        for p in items
        if p["metadata"]["labels"].get("disaggspec.io/role") in ("prefill", "decode")
        and not p["metadata"].get("deletionTimestamp")
    }


# ---- a change of the pair, three times, under traffic -----------------------------------------------------------


@dataclass(frozen=True)
class Rolled:
    """One service rolled from `before` to `after` under traffic."""

    before: str
    after: str
    report: Report
    sampler: CapacitySampler


def _roll_under_traffic(plane: ServingPlane, namespace: str, obj: dict[str, Any], changed: dict[str, Any]) -> Rolled:
    """Apply `obj`, wait for Ready, then apply `changed` under continuous traffic through the router Service and
    wait until it has rolled out."""
    cluster = plane.cluster
    obj = apply_service(cluster, namespace, obj)
    name = obj["metadata"]["name"]
    wait_ready(cluster, namespace, name, timeout=150)
    before = str(_status(cluster, namespace, name)["specFingerprint"])
    api = kube_api(cluster)
    with (
        capacity_sampler(api, namespace, name) as sampler,
        continuous(_traffic(obj), router_service_target(api, namespace, obj)) as traffic,
    ):
        time.sleep(2)
        apply_service(cluster, namespace, changed)
        # Four rollouts at once, each step also waiting for the router pods of the new split (traffic moves before
        # capacity): 60-80 s each beside two other suites here; CI once took over 180 s with the SGLang tests too.
        after = _wait_rolled_out(plane, namespace, name, before, timeout=300)
        time.sleep(2)
        report = traffic.stop()
    return Rolled(before, after, report, sampler)


def _image_bump(obj: dict[str, Any]) -> dict[str, Any]:
    return _bump_image(obj, "a")


def _draft_change(obj: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["speculative"]["draftModel"]["revision"] = "refs/pr/2"
    return changed


def _draft_tokens_change(obj: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["spec"]["speculative"].update(numSteps=2, numDraftTokens=3)
    return changed


def _multi_node_prefill(obj: dict[str, Any]) -> dict[str, Any]:
    """The prefill pool becomes multi-node: each server spans two one-GPU pods (a LeaderWorkerSet group, tp 2)."""
    changed = copy.deepcopy(obj)
    changed["spec"]["prefill"].update(nodesPerInstance=2, gpusPerNode=1, tensorParallelSize=2)
    return changed


def test_pair_changes_roll_out_with_no_failed_request_and_no_capacity_dip(plane: ServingPlane) -> None:
    """2 prefill + 2 decode, maxSurge 1, maxUnavailable 0: an image bump, a draft-model change, a numDraftTokens
    change and a switch of the prefill pool from a Deployment to two-node LeaderWorkerSet groups (four services at
    once, so their rollouts overlap), each under continuous traffic through its router Service. Capacity counts
    servers: a group counts once, by its leader."""
    changes = {
        "image": _image_bump,
        "draft": _draft_change,
        "tokens": _draft_tokens_change,
        "multinode": _multi_node_prefill,
    }
    with ExitStack() as stack:
        spaces = {key: stack.enter_context(fresh_namespace(plane.cluster, f"pair-{key}")) for key in changes}
        base = _service("pairs", replicas=2)
        with ThreadPoolExecutor(len(changes)) as pool:
            futures = {
                key: pool.submit(_roll_under_traffic, plane, spaces[key], base, change(base))
                for key, change in changes.items()
            }
            rolled = {key: future.result() for key, future in futures.items()}
        for key, result in rolled.items():
            report, sampler = result.report, result.sampler
            _assert_clean(plane, report)
            assert result.after != result.before, key
            assert sampler.minimum("prefill") >= 2 and sampler.minimum("decode") >= 2, _describe(report, sampler)
            # Traffic really moved: both revisions served requests, each from one revision end to end.
            served = {(o.prefill_revision, o.decode_revision) for o in report.succeeded}
            assert served == {(result.before, result.before), (result.after, result.after)}, (key, served)
            name = base["metadata"]["name"]
            assert len(_events(plane.cluster, spaces[key], name, "RevisionRetired")) == 1, key


# ---- one replica per pool: a free slot per pool, or none ----------------------------------------------------------


def test_single_replica_pools_keep_serving_with_a_free_slot_and_hold_without_one(plane: ServingPlane) -> None:
    """Whole-node pools (8 GPUs a pod, 1 replica each). With a free node per pool the service serves throughout an
    image bump; with no free node the rollout holds (RolloutHeld) and the old pair keeps serving, until
    maxUnavailable 1 (maxSurge 0) lets it replace the pair in place."""
    cluster = plane.cluster
    with ExitStack() as stack:
        free_ns = stack.enter_context(fresh_namespace(cluster, "one-slot"))
        tight_ns = stack.enter_context(fresh_namespace(cluster, "no-slot"))
        free = apply_service(cluster, free_ns, _service("one-slot", gpus=8))
        tight = apply_service(cluster, tight_ns, _service("no-slot", gpus=8, progressDeadlineSeconds=30))
        name = free["metadata"]["name"]
        for ns in (free_ns, tight_ns):
            wait_ready(cluster, ns, name, timeout=120)
        before = {ns: str(_status(cluster, ns, name)["specFingerprint"]) for ns in (free_ns, tight_ns)}
        api = kube_api(cluster)
        free_sampler = stack.enter_context(capacity_sampler(api, free_ns, name))
        tight_sampler = stack.enter_context(capacity_sampler(api, tight_ns, name))
        free_traffic = stack.enter_context(continuous(_traffic(free), router_service_target(api, free_ns, free)))
        tight_traffic = stack.enter_context(continuous(_traffic(tight), router_service_target(api, tight_ns, tight)))
        time.sleep(2)
        apply_service(cluster, free_ns, _bump_image(free, "b"))
        held_spec = _bump_image(tight, "b")
        apply_service(cluster, tight_ns, held_spec)

        after = _wait_rolled_out(plane, free_ns, name, before[free_ns])
        free_report = free_traffic.stop()

        def held() -> bool:
            return _condition(_status(cluster, tight_ns, name), "Progressing").get("reason") == "RolloutHeld"

        cluster.wait_for("the rollout without a free slot holds", held, timeout=90, interval=0.5)
        status = _status(cluster, tight_ns, name)
        message = _condition(status, "Progressing")["message"]
        assert "progressDeadlineSeconds 30" in message and "maxUnavailable" in message, message
        assert [r["traffic"] for r in status["revisions"]] == ["Failed", "Draining"], status["revisions"]
        assert _events(cluster, tight_ns, name, "RolloutHeld")
        # Held, the old pair keeps its pods and every request.
        time.sleep(3)
        held_report = tight_traffic.stop()
        assert {o.prefill_revision for o in held_report.succeeded} == {before[tight_ns]}
        _assert_clean(plane, held_report)
        assert tight_sampler.minimum("prefill") >= 1 and tight_sampler.minimum("decode") >= 1

        # The user allows one unavailable pod: the pair is replaced in place.
        held_spec["spec"]["rollout"] = {"maxSurge": 0, "maxUnavailable": 1, "progressDeadlineSeconds": 30}
        apply_service(cluster, tight_ns, held_spec)
        _wait_rolled_out(plane, tight_ns, name, before[tight_ns])

    _assert_clean(plane, free_report)
    assert free_sampler.minimum("prefill") >= 1 and free_sampler.minimum("decode") >= 1, _describe(free_report)
    assert {o.prefill_revision for o in free_report.succeeded} == {before[free_ns], after}


# ---- a revision that never becomes ready: hold, then fix or roll back -------------------------------------------


def _failing(obj: dict[str, Any], tag: str) -> dict[str, Any]:
    """An image bump whose servers fail to load the model."""
    changed = _bump_image(obj, tag)
    for role in ("prefill", "decode"):
        changed["spec"][role]["podAnnotations"]["emulator.disaggspec.io/fail"] = "load-failure"
    return changed


def test_a_revision_that_never_loads_holds_and_a_fix_resumes(plane: ServingPlane, namespace: str) -> None:
    cluster = plane.cluster
    obj = apply_service(cluster, namespace, _service("pairs", progressDeadlineSeconds=30))
    name = obj["metadata"]["name"]
    wait_ready(cluster, namespace, name, timeout=120)
    old = str(_status(cluster, namespace, name)["specFingerprint"])
    api = kube_api(cluster)
    broken = _failing(obj, "c")
    with (
        capacity_sampler(api, namespace, name) as sampler,
        continuous(_traffic(obj), router_service_target(api, namespace, obj)) as traffic,
    ):
        apply_service(cluster, namespace, broken)
        cluster.wait_for(
            "RolloutHeld",
            lambda: _condition(_status(cluster, namespace, name), "Progressing").get("reason") == "RolloutHeld",
            timeout=90,
            interval=0.5,
        )
        assert _events(cluster, namespace, name, "RolloutHeld")
        held_at = len(traffic.outcomes())
        time.sleep(3)
        # The fix: the same image, servers that load (the fingerprint is unchanged, so the held revision is fixed
        # in place and the rollout resumes).
        fixed = _bump_image(obj, "c")
        apply_service(cluster, namespace, fixed)
        new = _wait_rolled_out(plane, namespace, name, old)
        time.sleep(2)
        report = traffic.stop()
    _assert_clean(plane, report)
    assert new == str(_status(cluster, namespace, name)["revisions"][0]["fingerprint"])
    # While held, only the old revision served.
    assert {o.prefill_revision for o in report.outcomes[:held_at] if o.ok} == {old}
    assert sampler.minimum("prefill") >= 1 and sampler.minimum("decode") >= 1


def test_rolling_back_returns_to_the_old_revision_without_new_pods(plane: ServingPlane, namespace: str) -> None:
    cluster = plane.cluster
    obj = apply_service(cluster, namespace, _service("pairs", progressDeadlineSeconds=30))
    name = obj["metadata"]["name"]
    wait_ready(cluster, namespace, name, timeout=120)
    old = str(_status(cluster, namespace, name)["specFingerprint"])
    old_pods = _pool_pods(cluster, namespace, name)
    api = kube_api(cluster)
    with continuous(_traffic(obj), router_service_target(api, namespace, obj)) as traffic:
        apply_service(cluster, namespace, _failing(obj, "d"))
        cluster.wait_for(
            "a second revision",
            lambda: len(_status(cluster, namespace, name).get("revisions") or []) == 2,
            timeout=60,
            interval=0.5,
        )
        apply_service(cluster, namespace, obj)  # the previous spec

        def back() -> bool:
            status = _status(cluster, namespace, name)
            revisions = status.get("revisions") or []
            return (
                status.get("observedGeneration") == status["generation"]
                and [r["fingerprint"] for r in revisions] == [old]
                and revisions[0]["traffic"] == "Active"
            )

        cluster.wait_for("rolled back to the old revision", back, timeout=60, interval=0.5)
        time.sleep(2)
        report = traffic.stop()
    _assert_clean(plane, report)
    assert {o.prefill_revision for o in report.succeeded} == {old}
    assert _pool_pods(cluster, namespace, name) == old_pods, "the rollback must not start new pods"


# ---- the operator restarts mid-rollout ---------------------------------------------------------------------------


def test_an_operator_restart_mid_rollout_resumes_without_an_extra_revision(plane: ServingPlane, namespace: str) -> None:
    cluster = plane.cluster
    obj = apply_service(cluster, namespace, _service("pairs", replicas=2))
    name = obj["metadata"]["name"]
    wait_ready(cluster, namespace, name, timeout=120)
    old = str(_status(cluster, namespace, name)["specFingerprint"])
    api = kube_api(cluster)
    with (
        capacity_sampler(api, namespace, name) as sampler,
        continuous(_traffic(obj), router_service_target(api, namespace, obj)) as traffic,
    ):
        apply_service(cluster, namespace, _bump_image(obj, "e"))

        def midway() -> bool:
            revisions = _status(cluster, namespace, name).get("revisions") or []
            return len(revisions) == 2 and revisions[0]["prefill"].get("readyReplicas", 0) >= 1

        cluster.wait_for("the new revision half-way", midway, timeout=90, interval=0.3)
        plane.operator.stop()
        plane.operator.start()
        new = _wait_rolled_out(plane, namespace, name, old)
        time.sleep(2)
        report = traffic.stop()
    _assert_clean(plane, report)
    assert sampler.minimum("prefill") >= 2 and sampler.minimum("decode") >= 2
    seen = {fp for sample in sampler.samples for fps in sample.fingerprints.values() for fp in fps}
    assert seen == {old, new}, seen
    assert len(_events(cluster, namespace, name, "RevisionCreated")) == 1
