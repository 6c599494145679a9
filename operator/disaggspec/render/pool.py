"""Renders one pool (prefill or decode): a Deployment of SGLang servers (with nodesPerInstance > 1 a LeaderWorkerSet of
leader/worker groups, one server each), a headless Service and a PodDisruptionBudget; pure. Resource defaults come
from `sizing`, probes and shutdown from `lifecycle`, the budget and the spreading from `disruption`. The Service and
the budget select every pod of the role, leaders and workers alike."""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import BaseModel

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, PoolName, pool
from disaggspec.api.v1alpha1 import GPU_RESOURCE, PoolLifecycle
from disaggspec.render import caches, disruption, lifecycle, names, ports, rdma, sizing
from disaggspec.sglang.args import NODE_RANK_LEADER, NODE_RANK_WORKER, SERVER_PORT, server_args
from disaggspec.sglang.profiles import TRANSFER_DRAFT_PROBS_ENV, SGLangProfile, profile_for

CONTAINER = "sglang"


def _limits(service: DisaggSpecService, role: PoolName) -> tuple[dict[str, Any], dict[str, Any]]:
    """The container's limits, and the extended resources among them the operator sets."""
    pool_spec = pool(service.spec, role)
    # One pod of a multi-node server is one whole node; a single-node server needs a GPU per rank.
    gpus = pool_spec.gpus_per_node if pool_spec.nodes_per_instance > 1 else pool_spec.tensor_parallel_size
    extended: dict[str, Any] = {GPU_RESOURCE: gpus}
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
    """The pool workloads' rolling update (a Deployment's rollingUpdate, a LeaderWorkerSet's
    rollingUpdateConfiguration, in groups), from spec.rollout (a rule keeps the two from both being 0)."""
    rollout = service.spec.rollout
    return {"maxSurge": rollout.max_surge, "maxUnavailable": rollout.max_unavailable}


PodKind = Literal["server", "leader", "worker"]
"""Which pod a template is for: the one pod of a single-node server (a Deployment's), or the leader or a worker of a
multi-node server's group (a LeaderWorkerSet's)."""


def _pod_metadata(service: DisaggSpecService, role: PoolName, fingerprint: str, kind: PodKind) -> dict[str, Any]:
    """The template's labels (the pool's, the role's, the fingerprint and release) and annotations."""
    spec = service.spec
    pool_spec = pool(spec, role)
    labels = {
        **pool_spec.pod_labels,
        **names.labels(service, role),
        c.LABEL_FINGERPRINT: fingerprint,
        c.LABEL_VERSION: spec.sglang.version,
        # Host-network pods on part of a node get their own ports at creation (render/ports.py).
        **ports.template_labels(spec, pool_spec, pod_gpus(service, role)),
    }
    annotations = {**pool_spec.pod_annotations, **rdma.pod_annotations(spec.transfer)}
    if role == c.ROLE_PREFILL and kind != "worker":
        # sglang-router reads the bootstrap port of each discovered prefill pod from this annotation.
        annotations[c.ANNOTATION_BOOTSTRAP_PORT] = str(spec.transfer.bootstrap_port)
    metadata: dict[str, Any] = {"labels": labels}
    if annotations:
        metadata["annotations"] = dict(sorted(annotations.items()))
    return metadata


def _ports_and_probes(
    service: DisaggSpecService, role: PoolName, kind: PodKind, profile: SGLangProfile
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The container's ports and probes: a worker only has the http port of its dummy health server, and no
    readiness probe (see `pod_template`)."""
    life = pool(service.spec, role).lifecycle
    gpus = pod_gpus(service, role)
    if kind == "worker":
        ports = [port for port in _ports(service, role) if port["name"] == "http"]
        return ports, lifecycle.worker_probes(profile, life, gpus)
    return _ports(service, role), lifecycle.pool_probes(profile, life, gpus)


def _shutdown(life: PoolLifecycle, kind: PodKind, container_ports: list[dict[str, Any]]) -> dict[str, Any]:
    """The container's preStop: a server waits for its KV transfers (`lifecycle.server_prestop`); a multi-node
    server's worker, which serves no API and holds no request, only pauses."""
    if kind == "worker":
        return lifecycle.prestop(lifecycle.prestop_seconds(life))
    http = next(port["containerPort"] for port in container_ports if port["name"] == "http")
    return lifecycle.server_prestop(life, int(http))


def _server_container(
    service: DisaggSpecService, role: PoolName, kind: PodKind, mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    """The SGLang container: the server command for the pod's node rank, ports, resources, probes and env."""
    spec = service.spec
    profile = profile_for(spec.sglang.version)
    node_rank = NODE_RANK_WORKER if kind == "worker" else NODE_RANK_LEADER
    ports, probes = _ports_and_probes(service, role, kind, profile)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.sglang.image,
        "imagePullPolicy": spec.sglang.image_pull_policy,
        "command": rdma.launcher(spec.transfer, profile.per_gpu_ib_device_map) + server_args(service, role, node_rank),
        "ports": ports,
        "resources": _resources(service, role),
        "securityContext": rdma.security_context(spec.transfer),
        "volumeMounts": mounts,
        **probes,
        "lifecycle": _shutdown(pool(spec, role).lifecycle, kind, ports),
    }
    env = _env(service, role)
    if env:
        container["env"] = env
    return container


def _init_containers(service: DisaggSpecService) -> dict[str, Any]:
    """`initContainers` for a pool pod spec (empty when no cache needs filling first)."""
    init = caches.pool_init_containers(service)
    return {"initContainers": init} if init else {}


def _scheduling(service: DisaggSpecService, role: PoolName) -> dict[str, Any]:
    """Where the pool's pods may run: node selector, tolerations, affinity, topology spread and priority class."""
    pool_spec = pool(service.spec, role)
    out: dict[str, Any] = {}
    if pool_spec.node_selector:
        out["nodeSelector"] = dict(sorted(pool_spec.node_selector.items()))
    if pool_spec.tolerations:
        out["tolerations"] = [_as_given(t) for t in pool_spec.tolerations]
    affinity = _as_given(pool_spec.affinity) if pool_spec.affinity else {}
    if affinity:
        out["affinity"] = affinity
    out.update(disruption.topology_spread(service, role, pool_spec.spread))
    if pool_spec.priority_class_name is not None:
        out["priorityClassName"] = pool_spec.priority_class_name
    return out


def pod_template(service: DisaggSpecService, role: PoolName, fingerprint: str, kind: PodKind) -> dict[str, Any]:
    """The pod template of the pool's pods in the revision of `fingerprint`: everything a pool pod has (labels with
    the fingerprint and release, annotations, RDMA wiring, caches and init containers, volumes, env, security
    context, scheduling, priority, pull secrets, grace period, preStop pause, probes).

    A leader is a server pod like a Deployment's, plus `--nnodes`, `--node-rank 0` and `--dist-init-addr`: it serves
    HTTP and (prefill) the bootstrap port, carries the bootstrap annotation the router reads, and has the readiness
    and startup probes. A worker runs the same command with its own rank and no HTTP API: from node rank 1 on SGLang
    starts only schedulers and, once they are ready, a dummy health server on --port whose /health answers 200 (0.5.2
    sglang/srt/entrypoints/engine.py:805-819 and utils.py:2069-2080; 0.5.23 entrypoints/engine.py:1234-1284 and
    utils/common.py:3624-3643). So a worker has the http port only, for its liveness probe; a startup probe on that
    /health with the leader's start-up budget (without it, liveness would fail the loading worker after two minutes,
    and the group restart that follows would repeat forever); and no readiness probe: its Ready then means its ranks
    are up, and the leader's readiness covers the server. Both carry the pool's topology spread constraint: it
    selects every pod of the pool, one per node, as for a Deployment's pods."""
    volumes, mounts = _volumes(service)
    pod_spec: dict[str, Any] = {
        # The servers never talk to the Kubernetes API.
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": pool(service.spec, role).lifecycle.drain_seconds,
        **rdma.host_network(service.spec.transfer),
        "containers": [_server_container(service, role, kind, mounts)],
        "volumes": volumes,
        **_init_containers(service),
        **_scheduling(service, role),
        **names.pull_secrets(service),
    }
    return {"metadata": _pod_metadata(service, role, fingerprint, kind), "spec": pod_spec}


def deployment(
    service: DisaggSpecService, role: PoolName, fingerprint: str, replicas: int | None = None
) -> dict[str, Any]:
    """The pool's Deployment in the revision of `fingerprint`, with `replicas` (default: the pool's replicas)."""
    pool_spec = pool(service.spec, role)
    template = {
        "progressDeadlineSeconds": lifecycle.progress_deadline_seconds(pool_spec.lifecycle, pod_gpus(service, role)),
        # Within one revision (a change that keeps the fingerprint) the same budget as across revisions.
        "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling_update(service)},
        "template": pod_template(service, role, fingerprint, "server"),
    }
    wanted = pool_spec.replicas if replicas is None else replicas
    return names.deployment(service, role, fingerprint, wanted, template)


LWS_STARTUP_POLICY: Final = "LeaderCreated"
"""The workers of a group are created with its leader, not once it is ready: the leader cannot become ready before
its workers' ranks have joined the server."""
LWS_RESTART_POLICY: Final = "RecreateGroupOnPodRestart"
"""Any pod or container restart of a group recreates the whole group: the ranks of one SGLang server rendezvous
once, at start, and a restarted rank cannot rejoin the others."""


def leader_worker_set(
    service: DisaggSpecService, role: PoolName, fingerprint: str, replicas: int | None = None
) -> dict[str, Any]:
    """The LeaderWorkerSet (sigs.k8s.io/lws v0.9.0) of a multi-node pool in the revision of `fingerprint`: `replicas`
    groups (default: the pool's replicas) of nodesPerInstance pods each, one SGLang server per group, named and
    labelled like the Deployment it replaces. The LeaderWorkerSet has no selector of its own (its controller labels
    the pods it makes), no progress deadline (the rollout's own deadline applies) and no Deployment strategy: its
    rolloutStrategy counts groups with spec.rollout's maxSurge and maxUnavailable."""
    pool_spec = pool(service.spec, role)
    wanted = pool_spec.replicas if replicas is None else replicas
    return {
        "apiVersion": c.LWS_API_VERSION,
        "kind": c.LWS_KIND,
        "metadata": names.revision_metadata(service, role, fingerprint),
        "spec": {
            "replicas": wanted,
            "startupPolicy": LWS_STARTUP_POLICY,
            "rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": rolling_update(service)},
            "leaderWorkerTemplate": {
                "size": pool_spec.nodes_per_instance,
                "restartPolicy": LWS_RESTART_POLICY,
                "leaderTemplate": pod_template(service, role, fingerprint, "leader"),
                "workerTemplate": pod_template(service, role, fingerprint, "worker"),
            },
        },
    }


def workload(
    service: DisaggSpecService, role: PoolName, fingerprint: str, replicas: int | None = None
) -> dict[str, Any]:
    """The pool's workload in the revision of `fingerprint`: a Deployment, or with nodesPerInstance > 1 a
    LeaderWorkerSet."""
    if pool(service.spec, role).nodes_per_instance > 1:
        return leader_worker_set(service, role, fingerprint, replicas)
    return deployment(service, role, fingerprint, replicas)


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
