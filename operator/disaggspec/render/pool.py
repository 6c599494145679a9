"""Renders one pool (prefill or decode): a Deployment of SGLang servers, a headless Service and a
PodDisruptionBudget; pure. Resource defaults come from `sizing`, probes and shutdown from `lifecycle`, the budget and
the spreading from `disruption`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, PoolName, pool
from disaggspec.api.v1alpha1 import GPU_RESOURCE
from disaggspec.render import caches, disruption, lifecycle, names, rdma, sizing
from disaggspec.sglang.args import SERVER_PORT, server_args
from disaggspec.sglang.profiles import TRANSFER_DRAFT_PROBS_ENV, profile_for

CONTAINER = "sglang"


def _limits(service: DisaggSpecService, role: PoolName) -> tuple[dict[str, Any], dict[str, Any]]:
    """The container's limits, and the extended resources among them the operator sets."""
    pool_spec = pool(service.spec, role)
    extended: dict[str, Any] = {GPU_RESOURCE: pool_spec.tensor_parallel_size}
    extended.update(rdma.resources(service.spec.transfer))
    return {**extended, **pool_spec.resources.limits}, extended


def pod_gpus(service: DisaggSpecService, role: PoolName) -> int:
    """GPUs one pod of the pool gets: its GPU limit (a whole number, which a rule enforces)."""
    limits, _ = _limits(service, role)
    return int(str(limits[GPU_RESOURCE]))


def _resources(service: DisaggSpecService, role: PoolName) -> dict[str, Any]:
    pool_spec = pool(service.spec, role)
    limits, extended = _limits(service, role)
    model = service.spec.model
    # With a volume or a cache the weights are not in the container's writable layer.
    downloads = model.volume is None and model.cache is None
    defaults = sizing.pool_requests(pod_gpus(service, role), downloads_weights=downloads)
    requests = sizing.with_defaults(defaults, pool_spec.resources.requests, pool_spec.resources.limits)
    # Extended resources must be requested exactly as limited; the scheduler reads requests.
    requests.update({k: limits[k] for k in extended})
    return {"limits": dict(sorted(limits.items())), "requests": dict(sorted(requests.items()))}


def _env(service: DisaggSpecService, role: PoolName) -> list[dict[str, Any]]:
    spec = service.spec
    out: list[dict[str, Any]] = []
    token = spec.model.hf_token_secret_ref
    if token is not None:
        out.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}})
    mask = spec.engine.disagg_sampling_mask
    if mask is not None and profile_for(spec.sglang.version).has_disagg_sampling_mask:
        out.append({"name": "SGLANG_ENABLE_DISAGG_SAMPLING_MASK", "value": "1" if mask else "0"})
    if spec.speculative.transfer_draft_probs:
        out.append({"name": TRANSFER_DRAFT_PROBS_ENV, "value": "1"})
    out += rdma.env(spec.transfer)
    out += caches.pool_env(service)
    out += [var.model_dump(mode="json", by_alias=True, exclude_none=True) for var in pool(spec, role).env]
    return out


def _volumes(service: DisaggSpecService) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": sizing.SHM_SIZE}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    volume = service.spec.model.volume
    if volume is not None:
        if volume.host_path is not None:
            volumes.append({"name": "model", "hostPath": {"path": volume.host_path.path, "type": "Directory"}})
            read_only = True
        elif volume.persistent_volume_claim is not None:
            claim = volume.persistent_volume_claim
            volumes.append(
                {"name": "model", "persistentVolumeClaim": {"claimName": claim.claim_name, "readOnly": True}}
            )
            read_only = claim.read_only
        else:
            return volumes, mounts
        mounts.append({"name": "model", "mountPath": volume.mount_path, "readOnly": read_only})
    cache_volumes, cache_mounts = caches.pool_volumes(service)
    return volumes + cache_volumes, mounts + cache_mounts


def _as_given(model: BaseModel) -> dict[str, Any]:
    """A typed pass-through block (toleration, affinity) as the user wrote it: only the fields given, camelCase."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)


def _ports(service: DisaggSpecService, role: PoolName) -> list[dict[str, Any]]:
    ports = [{"name": "http", "containerPort": SERVER_PORT, "protocol": "TCP"}]
    if role == c.ROLE_PREFILL:
        ports.append({"name": "bootstrap", "containerPort": service.spec.transfer.bootstrap_port, "protocol": "TCP"})
    return ports


def rolling_update(service: DisaggSpecService) -> dict[str, int]:
    """The pool Deployments' rollingUpdate, from spec.rollout (a rule keeps the two from both being 0)."""
    rollout = service.spec.rollout
    return {"maxSurge": rollout.max_surge, "maxUnavailable": rollout.max_unavailable}


def deployment(
    service: DisaggSpecService, role: PoolName, fingerprint: str, replicas: int | None = None
) -> dict[str, Any]:
    """The pool's Deployment in the revision of `fingerprint`, with `replicas` (default: the pool's replicas)."""
    spec = service.spec
    pool_spec = pool(spec, role)
    pod_labels = {
        **pool_spec.pod_labels,
        **names.labels(service, role),
        c.LABEL_FINGERPRINT: fingerprint,
        c.LABEL_VERSION: spec.sglang.version,
    }
    pod_annotations = {**pool_spec.pod_annotations, **rdma.pod_annotations(spec.transfer)}
    if role == c.ROLE_PREFILL:
        # sglang-router reads the bootstrap port of each discovered prefill pod from this annotation.
        pod_annotations[c.ANNOTATION_BOOTSTRAP_PORT] = str(spec.transfer.bootstrap_port)
    volumes, mounts = _volumes(service)
    gpus = pod_gpus(service, role)
    life = pool_spec.lifecycle
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.sglang.image,
        "imagePullPolicy": spec.sglang.image_pull_policy,
        "command": rdma.launcher(spec.transfer, profile_for(spec.sglang.version).per_gpu_ib_device_map)
        + server_args(service, role),
        "ports": _ports(service, role),
        "resources": _resources(service, role),
        "securityContext": rdma.security_context(spec.transfer),
        "volumeMounts": mounts,
        **lifecycle.pool_probes(profile_for(spec.sglang.version), life, gpus),
        "lifecycle": lifecycle.prestop(lifecycle.prestop_seconds(life)),
    }
    env = _env(service, role)
    if env:
        container["env"] = env
    pod_spec: dict[str, Any] = {
        # The servers never talk to the Kubernetes API.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": life.drain_seconds,
        **rdma.host_network(spec.transfer),
        "containers": [container],
        "volumes": volumes,
    }
    init = caches.pool_init_containers(service)
    if init:
        pod_spec["initContainers"] = init
    if pool_spec.node_selector:
        pod_spec["nodeSelector"] = dict(sorted(pool_spec.node_selector.items()))
    if pool_spec.tolerations:
        pod_spec["tolerations"] = [_as_given(t) for t in pool_spec.tolerations]
    affinity = _as_given(pool_spec.affinity) if pool_spec.affinity else {}
    if affinity:
        pod_spec["affinity"] = affinity
    pod_spec.update(disruption.topology_spread(service, role, pool_spec.spread))
    if pool_spec.priority_class_name is not None:
        pod_spec["priorityClassName"] = pool_spec.priority_class_name
    pod_spec.update(names.pull_secrets(service))
    template_metadata: dict[str, Any] = {"labels": pod_labels}
    if pod_annotations:
        template_metadata["annotations"] = dict(sorted(pod_annotations.items()))
    template = {
        "progressDeadlineSeconds": lifecycle.progress_deadline_seconds(life, gpus),
        # Within one revision (a change that keeps the fingerprint) the same budget as across revisions.
        "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling_update(service)},
        "template": {"metadata": template_metadata, "spec": pod_spec},
    }
    wanted = pool_spec.replicas if replicas is None else replicas
    return names.deployment(service, role, fingerprint, wanted, template)


def headless_service(service: DisaggSpecService, role: PoolName) -> dict[str, Any]:
    """Stable DNS for each server pod (and the port the router discovers)."""
    ports = [
        {"name": p["name"], "port": p["containerPort"], "targetPort": p["name"], "protocol": "TCP"}
        for p in _ports(service, role)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": names.metadata(service, role),
        "spec": {"clusterIP": "None", "selector": names.selector(service, role), "ports": ports},
    }


def disruption_budget(service: DisaggSpecService, role: PoolName) -> dict[str, Any]:
    """The pool's PodDisruptionBudget."""
    return disruption.pod_disruption_budget(service, role, pool(service.spec, role).disruption)
