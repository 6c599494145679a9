"""Renders the PD router: its ServiceAccount, Role and RoleBinding (list/watch pods), Deployment, Service and
PodDisruptionBudget; pure.

The router is the pinned package of the service's SGLang release (`SGLangProfile.router`: sglang-router for 0.5.2,
smg for 0.5.23), started with that package's own command. It discovers servers itself (`--service-discovery`) by
label selectors in the service's namespace; the selectors include the spec fingerprint, so the router only pairs pods
rendered from the same must-match settings. Readiness means "can serve PD": at least one healthy prefill and one
healthy decode worker. sglang-router's PD `/readiness` already says exactly that; smg switches to its multi-model mode
under service discovery, where `/readiness` counts any one worker, so its pods are gated by the readiness helper of the
project's router image, which reads the router's worker list.

A router pod proxies the streams of requests the pools are still draining, so its grace period is at least the
longer `drainSeconds` of the two pools: a router stopped first would cut the streams the pools are finishing.
"""

from __future__ import annotations

from typing import Any

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, PoolName, pool
from disaggspec.api.v1alpha1 import ROUTER_METRICS_PORT
from disaggspec.config import OperatorConfig
from disaggspec.render import disruption, lifecycle, names, sizing
from disaggspec.sglang.args import SERVER_PORT
from disaggspec.sglang.profiles import ROUTER_READY_HELPER, RouterProfile, profile_for

CONTAINER = "router"
METRICS_PORT = ROUTER_METRICS_PORT
"""sglang-router's Prometheus port (its own default; spec.router.port may not take it)."""


def _selector_args(service: DisaggSpecService, role: PoolName, fingerprint: str) -> list[str]:
    """The pods of `role` in the revision of `fingerprint`; of a multi-node pool only the groups' leaders (worker
    index 0, which the LeaderWorkerSet controller labels), the one pod of each server that serves HTTP."""
    wanted = {**names.selector(service, role), c.LABEL_FINGERPRINT: fingerprint}
    if pool(service.spec, role).nodes_per_instance > 1:
        wanted[c.LWS_LABEL_WORKER_INDEX] = "0"
    return [f"{key}={value}" for key, value in sorted(wanted.items())]


def router_profile(service: DisaggSpecService) -> RouterProfile:
    """The pinned router of the service's SGLang release."""
    return profile_for(service.spec.sglang.version).router


def command(service: DisaggSpecService, fingerprint: str) -> list[str]:
    router = service.spec.router
    return [
        *router_profile(service).launch,
        "--pd-disaggregation",
        "--service-discovery",
        "--service-discovery-namespace",
        str(service.metadata.namespace),
        # Every pool pod's port with sglang-router; with smg only the fallback for a pod without the annotation
        # smg.ai/worker-ports, which host-network pods sharing a node carry (their ports: render/ports.py).
        "--service-discovery-port",
        str(SERVER_PORT),
        "--prefill-selector",
        *_selector_args(service, c.ROLE_PREFILL, fingerprint),
        "--decode-selector",
        *_selector_args(service, c.ROLE_DECODE, fingerprint),
        "--policy",
        router.policy or router_profile(service).default_policy,
        "--host",
        "0.0.0.0",
        "--port",
        str(router.port),
        "--prometheus-host",
        "0.0.0.0",
        "--prometheus-port",
        str(METRICS_PORT),
        *_shutdown_grace_args(service),
    ]


def drain_seconds(service: DisaggSpecService) -> int:
    """How long the router must keep proxying after it is asked to stop: the longer drainSeconds of the two pools."""
    spec = service.spec
    return max(spec.prefill.lifecycle.drain_seconds, spec.decode.lifecycle.drain_seconds)


def _shutdown_grace_args(service: DisaggSpecService) -> list[str]:
    flag = router_profile(service).shutdown_grace_flag
    return [] if flag is None else [flag, str(drain_seconds(service))]


def rbac(service: DisaggSpecService) -> list[dict[str, Any]]:
    name = names.child_name(service, c.ROLE_ROUTER)
    meta = names.metadata(service, c.ROLE_ROUTER)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": service.metadata.namespace}],
        },
    ]


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": failures}


def readiness_probe(service: DisaggSpecService) -> dict[str, Any]:
    """Ready only with a healthy prefill and a healthy decode worker to route to (see the module docstring)."""
    if not router_profile(service).discovery_forces_multi_model:
        return _probe("/readiness", 5, 3)
    helper = ["python3", ROUTER_READY_HELPER, "--url", f"http://localhost:{service.spec.router.port}"]
    return {"exec": {"command": helper}, "periodSeconds": 5, "timeoutSeconds": 3, "failureThreshold": 3}


def deployment(
    service: DisaggSpecService, config: OperatorConfig, fingerprint: str, replicas: int | None = None
) -> dict[str, Any]:
    """The router Deployment of the revision of `fingerprint`: it pairs only that revision's pods."""
    spec = service.spec
    router = spec.router
    image = router.image or config.router_image or router_profile(service).image
    given = router.resources
    resources: dict[str, Any] = {
        "requests": dict(sorted(sizing.with_defaults(sizing.ROUTER_REQUESTS, given.requests, given.limits).items()))
    }
    if given.limits:
        resources["limits"] = dict(sorted(given.limits.items()))
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": spec.sglang.image_pull_policy,
        "command": command(service, fingerprint),
        "ports": [
            {"name": "http", "containerPort": router.port, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "livenessProbe": _probe("/liveness", 10, 6),
        "readinessProbe": readiness_probe(service),
        "resources": resources,
        "lifecycle": lifecycle.prestop(lifecycle.ROUTER_PRESTOP_SECONDS),
    }
    drain = drain_seconds(service)
    pod_spec: dict[str, Any] = {
        "serviceAccountName": names.child_name(service, c.ROLE_ROUTER),
        "terminationGracePeriodSeconds": drain + lifecycle.ROUTER_PRESTOP_SECONDS,
        "containers": [container],
        **disruption.topology_spread(service, c.ROLE_ROUTER, router.spread),
    }
    if router.priority_class_name is not None:
        pod_spec["priorityClassName"] = router.priority_class_name
    pod_spec.update(names.pull_secrets(service))
    labels = {**names.labels(service, c.ROLE_ROUTER), c.LABEL_FINGERPRINT: fingerprint}
    template = {"template": {"metadata": {"labels": labels}, "spec": pod_spec}}
    wanted = router.replicas if replicas is None else replicas
    return names.deployment(service, c.ROLE_ROUTER, fingerprint, wanted, template)


def service_(service: DisaggSpecService) -> dict[str, Any]:
    router = service.spec.router
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": names.metadata(service, c.ROLE_ROUTER),
        "spec": {
            "type": router.service_type,
            "selector": names.selector(service, c.ROLE_ROUTER),
            "ports": [
                {"name": "http", "port": router.port, "targetPort": "http", "protocol": "TCP"},
                {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
            ],
        },
    }


def endpoint(service: DisaggSpecService) -> str:
    name = names.child_name(service, c.ROLE_ROUTER)
    return f"http://{name}.{service.metadata.namespace}.svc:{service.spec.router.port}"


def disruption_budget(service: DisaggSpecService) -> dict[str, Any]:
    """The router's PodDisruptionBudget."""
    return disruption.pod_disruption_budget(service, c.ROLE_ROUTER, service.spec.router.disruption)
