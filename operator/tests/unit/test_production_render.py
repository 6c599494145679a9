"""Production defaults of the render: resource requests sized from GPUs, lifecycle (probes, preStop, grace, progress
deadline), PodDisruptionBudgets, topology spread and priority classes."""

from __future__ import annotations

from typing import Any

import pytest

from disaggspec import constants as c
from disaggspec.api import parse_service
from disaggspec.config import OperatorConfig
from disaggspec.render import lifecycle, render, sizing
from disaggspec.sglang.profiles import DRAIN_WAIT_HELPER, PROFILES
from tests.unit import deployments
from tests.unit.dss_cases import edited


def _render(edits: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    obj = edited(edits or {})
    obj["metadata"]["namespace"] = "ns"
    return render(parse_service(obj), OperatorConfig())


def _by(manifests: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    """A Service or PodDisruptionBudget: named `<service>-<component>`, shared by the revisions."""
    return next(m for m in manifests if m["kind"] == kind and m["metadata"]["name"] == f"base-{component}")


def _deployment(manifests: list[dict[str, Any]], component: str) -> dict[str, Any]:
    return deployments.deployment(manifests, "base", component)


def _container(manifests: list[dict[str, Any]], component: str) -> dict[str, Any]:
    container: dict[str, Any] = _deployment(manifests, component)["spec"]["template"]["spec"]["containers"][0]
    return container


# ---- sizing ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpus", "cpu", "memory", "storage"),
    [(1, "8", "72Gi", "112Gi"), (2, "12", "96Gi", "208Gi"), (4, "20", "144Gi", "400Gi"), (8, "36", "240Gi", "784Gi")],
)
def test_pool_requests_formula(gpus: int, cpu: str, memory: str, storage: str) -> None:
    assert sizing.pool_requests(gpus) == {"cpu": cpu, "memory": memory, "ephemeral-storage": storage}


def test_pool_requests_fit_an_eight_gpu_node() -> None:
    # An 8-GPU pod must fit the smallest common 8-GPU server (96 vCPU, 1 TiB: p4d, and the test cluster's nodes).
    requests = sizing.pool_requests(8)
    assert int(requests["cpu"]) <= 96 and int(requests["memory"].removesuffix("Gi")) <= 1024
    # Eight 1-GPU pods on one such node fit too.
    one = sizing.pool_requests(1)
    assert 8 * int(one["cpu"]) <= 96 and 8 * int(one["ephemeral-storage"].removesuffix("Gi")) <= 1024


def test_memory_request_covers_shm() -> None:
    assert sizing.pool_requests(1, shm_gib=64)["memory"] == "104Gi"


def test_no_storage_request_with_a_model_volume() -> None:
    assert "ephemeral-storage" not in sizing.pool_requests(1, downloads_weights=False)
    volume = {"spec.model.volume": {"hostPath": {"path": "/models"}}, "spec.model.path": "/models/llama"}
    requests = _container(_render(volume), c.ROLE_PREFILL)["resources"]["requests"]
    assert "ephemeral-storage" not in requests and requests["cpu"] == "8"


def test_pool_pods_are_burstable_by_default() -> None:
    resources = _container(_render(), c.ROLE_DECODE)["resources"]
    assert resources["requests"] == {
        "cpu": "8",
        "ephemeral-storage": "112Gi",
        "memory": "72Gi",
        "nvidia.com/gpu": 1,
    }
    assert resources["limits"] == {"nvidia.com/gpu": 1}


def test_user_resources_win_per_key() -> None:
    resources = _container(
        _render({"spec.decode.resources": {"requests": {"cpu": "2"}, "limits": {"memory": "32Gi"}}}), c.ROLE_DECODE
    )["resources"]
    # cpu as given; memory left to Kubernetes (request = the user's limit); ephemeral-storage defaulted.
    assert resources["requests"]["cpu"] == "2" and "memory" not in resources["requests"]
    assert resources["requests"]["ephemeral-storage"] == "112Gi"
    assert resources["limits"] == {"memory": "32Gi", "nvidia.com/gpu": 1}


def test_limits_equal_to_requests_make_guaranteed_pods() -> None:
    given = {"cpu": "16", "memory": "128Gi", "ephemeral-storage": "200Gi"}
    resources = _container(_render({"spec.prefill.resources": {"requests": given, "limits": given}}), "prefill")[
        "resources"
    ]
    assert {k: resources["requests"][k] for k in given} == {k: resources["limits"][k] for k in given}


def test_gpu_limit_sizes_the_requests() -> None:
    edits = {"spec.prefill": {"tensorParallelSize": 2, "resources": {"limits": {"nvidia.com/gpu": 4}}}}
    assert _container(_render(edits), c.ROLE_PREFILL)["resources"]["requests"]["cpu"] == "20"


def test_router_requests_default_and_override() -> None:
    assert _container(_render(), c.ROLE_ROUTER)["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}}
    given = {"spec.router": {"resources": {"requests": {"cpu": "4"}, "limits": {"memory": "4Gi"}}}}
    assert _container(_render(given), c.ROLE_ROUTER)["resources"] == {
        "requests": {"cpu": "4"},
        "limits": {"memory": "4Gi"},
    }


# ---- lifecycle ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tp", "startup"), [(1, 1800), (4, 1800), (8, 3600)])
def test_startup_budget_scales_with_the_pod_and_the_probe_covers_it(tp: int, startup: int) -> None:
    manifests = _render({"spec.prefill.tensorParallelSize": tp, "spec.decode.tensorParallelSize": tp})
    probe = _container(manifests, c.ROLE_PREFILL)["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= startup
    deployment = _deployment(manifests, c.ROLE_PREFILL)
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert deployment["spec"]["progressDeadlineSeconds"] >= startup + grace


def test_explicit_lifecycle() -> None:
    manifests = _render({"spec.decode.lifecycle": {"startupSeconds": 5000, "drainSeconds": 1200}})
    container = _container(manifests, c.ROLE_DECODE)
    probe = container["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 5000
    deployment = _deployment(manifests, c.ROLE_DECODE)
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 1200
    assert deployment["spec"]["progressDeadlineSeconds"] == 5000 + 1200 + lifecycle.ROLLOUT_MARGIN_SECONDS
    # The router outlives the longest pool drain.
    router = _deployment(manifests, c.ROLE_ROUTER)["spec"]["template"]["spec"]
    assert router["terminationGracePeriodSeconds"] >= 1200


SMG_RECONCILE_DELAY = 1
"""smg 1.13.0 reconciles its workers one second after a pod event (service_discovery/kubernetes.rs); sglang-router
0.1.9 acts on the event itself."""


def _prestop_flags(container: dict[str, Any]) -> dict[str, str]:
    """The pool server's preStop hook, which must be the image's drain wait: its flags and values."""
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["python3", DRAIN_WAIT_HELPER]
    return dict(zip(command[2::2], command[3::2], strict=True))


def test_prestop_pause_covers_the_routers_not_readiness() -> None:
    # Both routers drop a pool pod at its deletionTimestamp, so the pause no longer waits out the readiness probe
    # (3 x 10 s): it is a few seconds past the routers' reaction; then the wait for the server's KV transfers, and
    # pause and wait take at most half of the grace period: the rest is SGLang's drain.
    for role in c.POOLS:
        spec = _deployment(_render(), role)["spec"]["template"]["spec"]
        container = spec["containers"][0]
        flags = _prestop_flags(container)
        pause = int(flags["--pause"])
        readiness = container["readinessProbe"]
        assert SMG_RECONCILE_DELAY < pause < readiness["periodSeconds"] * readiness["failureThreshold"]
        assert pause == lifecycle.PRESTOP_SECONDS == 5
        assert flags["--port"] == str(container["ports"][0]["containerPort"])
        assert spec["terminationGracePeriodSeconds"] == 600
        assert pause + int(flags["--bound"]) == 300
    short = _deployment(_render({"spec.prefill.lifecycle": {"drainSeconds": 30}}), c.ROLE_PREFILL)
    short_spec = short["spec"]["template"]["spec"]
    assert _prestop_flags(short_spec["containers"][0]) == {"--port": "30000", "--pause": "5", "--bound": "10"}
    assert short_spec["terminationGracePeriodSeconds"] == 30


@pytest.mark.parametrize("version", sorted(PROFILES))
def test_probes_per_release(version: str) -> None:
    container = _container(_render({"spec.sglang.version": version}), c.ROLE_DECODE)
    profile = PROFILES[version]  # type: ignore[index]
    ready = profile.ready_path or "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == ready
    assert container["startupProbe"]["httpGet"]["path"] == ready
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    # /health generates a token and answers within SGLang's own window: the kubelet waits longer than that.
    assert container["livenessProbe"]["timeoutSeconds"] > profile.health_check_timeout_seconds
    if profile.ready_path is None:
        assert container["readinessProbe"]["timeoutSeconds"] > profile.health_check_timeout_seconds


def test_ready_route_exists_only_in_0_5_23() -> None:
    assert PROFILES["0.5.23"].ready_path == "/ready" and PROFILES["0.5.2"].ready_path is None


# ---- disruption and placement ------------------------------------------------------------------------------------


def test_a_budget_per_pool_and_router_selecting_its_pods() -> None:
    manifests = _render()
    for component in (c.ROLE_PREFILL, c.ROLE_DECODE, c.ROLE_ROUTER):
        pdb = _by(manifests, "PodDisruptionBudget", component)
        deployment = _deployment(manifests, component)
        assert pdb["apiVersion"] == "policy/v1"
        assert pdb["spec"]["maxUnavailable"] == 1
        # The pool's pods of every revision (a rollout runs two side by side): the Deployment's selector without
        # the fingerprint.
        pool_wide = {c.LABEL_SERVICE: "base", c.LABEL_ROLE: component}
        assert pdb["spec"]["selector"] == {"matchLabels": pool_wide}
        fingerprint = deployment["metadata"]["labels"][c.LABEL_FINGERPRINT]
        assert deployment["spec"]["selector"] == {"matchLabels": {**pool_wide, c.LABEL_FINGERPRINT: fingerprint}}
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


# ---- rolling updates ---------------------------------------------------------------------------------------------


def test_pools_surge_one_pod_and_keep_every_ready_one_by_default() -> None:
    manifests = _render()
    for component in (c.ROLE_PREFILL, c.ROLE_DECODE):
        assert _deployment(manifests, component)["spec"]["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
        }


@pytest.mark.parametrize(("surge", "unavailable"), [(0, 1), (2, 1), (0, 3)])
def test_spec_rollout_sets_the_pools_rolling_update(surge: int, unavailable: int) -> None:
    manifests = _render({"spec.rollout": {"maxSurge": surge, "maxUnavailable": unavailable}})
    for component in (c.ROLE_PREFILL, c.ROLE_DECODE):
        assert _deployment(manifests, component)["spec"]["strategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
        }
    # The rollout budget is not a must-match setting: changing it rolls within the revision, not to a new one.
    plain = _deployment(_render(), c.ROLE_PREFILL)["metadata"]["labels"][c.LABEL_FINGERPRINT]
    assert _deployment(manifests, c.ROLE_PREFILL)["metadata"]["labels"][c.LABEL_FINGERPRINT] == plain


def test_budgets_come_before_the_deployments() -> None:
    kinds = [m["kind"] for m in _render()]
    assert max(i for i, k in enumerate(kinds) if k == "PodDisruptionBudget") < kinds.index("Deployment")


def test_budget_is_configurable() -> None:
    manifests = _render(
        {"spec.decode.disruption": {"maxUnavailable": "25%"}, "spec.router.disruption": {"maxUnavailable": 0}}
    )
    assert _by(manifests, "PodDisruptionBudget", c.ROLE_DECODE)["spec"]["maxUnavailable"] == "25%"
    assert _by(manifests, "PodDisruptionBudget", c.ROLE_ROUTER)["spec"]["maxUnavailable"] == 0


@pytest.mark.parametrize(
    ("mode", "when"), [("Preferred", "ScheduleAnyway"), ("Required", "DoNotSchedule"), ("Off", None)]
)
def test_spread(mode: str, when: str | None) -> None:
    manifests = _render({"spec.decode.spread": mode, "spec.router.spread": mode})
    for component in (c.ROLE_DECODE, c.ROLE_ROUTER):
        pod = _deployment(manifests, component)["spec"]["template"]["spec"]
        if when is None:
            assert "topologySpreadConstraints" not in pod
            continue
        (constraint,) = pod["topologySpreadConstraints"]
        assert constraint["whenUnsatisfiable"] == when
        assert constraint["topologyKey"] == "kubernetes.io/hostname" and constraint["maxSkew"] == 1
        # Spread over the pool's pods of every revision: the Deployment's selector without the fingerprint.
        pool_wide = {c.LABEL_SERVICE: "base", c.LABEL_ROLE: component}
        assert constraint["labelSelector"] == {"matchLabels": pool_wide}
        assert pool_wide.items() <= _deployment(manifests, component)["spec"]["selector"]["matchLabels"].items()


def test_priority_class() -> None:
    manifests = _render({"spec.prefill.priorityClassName": "llm-high", "spec.router.priorityClassName": "llm-router"})
    assert _deployment(manifests, c.ROLE_PREFILL)["spec"]["template"]["spec"]["priorityClassName"] == "llm-high"
    assert "priorityClassName" not in _deployment(manifests, c.ROLE_DECODE)["spec"]["template"]["spec"]
    router = _deployment(manifests, c.ROLE_ROUTER)["spec"]["template"]["spec"]
    assert router["priorityClassName"] == "llm-router"


def test_new_fields_do_not_change_the_fingerprint() -> None:
    # Lifecycle, budgets and placement are per pool: they must not roll the pair or re-pair the router.
    plain = _deployment(_render(), c.ROLE_PREFILL)["metadata"]["labels"][c.LABEL_FINGERPRINT]
    edits = {
        "spec.prefill.lifecycle": {"drainSeconds": 900},
        "spec.prefill.disruption": {"maxUnavailable": 2},
        "spec.prefill.spread": "Off",
    }
    changed = _deployment(_render(edits), c.ROLE_PREFILL)["metadata"]["labels"][c.LABEL_FINGERPRINT]
    assert plain == changed
