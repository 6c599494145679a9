"""Names, labels and the spec fingerprint of every child object; pure.

The fingerprint hashes every setting that must be identical on prefill and decode (model, SGLang release and image,
engine, transfer, the effective speculative settings), and the pools' node layout once a pool spans several nodes.
It labels the pool pods and is part of the router's selectors, so the router never pairs a prefill pod with a decode
pod rendered from a different spec, even mid-rollout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Final

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, effective_speculative, pool
from disaggspec.revision import REVISION_SPEC_ANNOTATION, revision_name


def child_name(service: DisaggSpecService, role: str) -> str:
    """`<service>-<role>`: a role is a pool, the router, or the model cache's fill Job (`caches.CACHE_ROLE`); it is
    both the app.kubernetes.io/component label and the disaggspec.io/role label of the role's children."""
    return f"{service.metadata.name}-{role}"


LATER_ENGINE_FIELDS: Final = frozenset(
    {"context_length", "quantization", "tokenizer_path", "chat_template", "extra_args"}
)
"""Engine fields added after the fingerprint's first release: hashed only when set, so an operator upgrade does not
change the fingerprint (and roll the pods) of a service that does not use them."""
UNHASHED_ENGINE_FIELDS: Final = frozenset({"compile_cache"})
"""Engine fields that need not match across the pools (where compiled kernels are kept): never hashed."""


def fingerprint(service: DisaggSpecService) -> str:
    """16 hex characters of SHA-256 over the must-match settings; changes exactly when one of them changes.

    It also keys the revisions (`disaggspec.rollout`): each fingerprint's workloads are named after it and live side
    by side during a rollout. A pool's workload kind follows its nodesPerInstance (a Deployment for 1, a
    LeaderWorkerSet above), and a workload cannot change kind in place, nor a LeaderWorkerSet its group size without
    recreating every group; so once either pool spans several nodes the node layout is hashed too (`layout`: both
    pools' nodesPerInstance), and switching a pool between Deployment and LeaderWorkerSet, or changing its
    nodesPerInstance, rolls out as a new revision next to the old one. The fingerprint stays service-wide, so prefill
    and decode of one revision still pair. With both pools on one node nothing is added: a single-node service keeps
    its fingerprint byte for byte, and nothing else about the nodes (gpusPerNode, replicas) is hashed."""
    spec = service.spec
    unset_later = {name for name in LATER_ENGINE_FIELDS if name not in spec.engine.model_dump(exclude_defaults=True)}
    must_match: dict[str, Any] = {
        "sglang": {"version": spec.sglang.version, "image": spec.sglang.image, "topk": spec.sglang.topk_buffer_width},
        "model": spec.model.model_dump(mode="json", include={"path", "revision", "dtype", "trust_remote_code"}),
        "engine": spec.engine.model_dump(mode="json", exclude=unset_later | UNHASHED_ENGINE_FIELDS),
        "transfer": spec.transfer.model_dump(mode="json", include={"backend", "bootstrap_port"}),
        "speculative": {role: dataclasses.asdict(effective_speculative(spec, role)) for role in c.POOLS},
    }
    if spec.speculative.token_map is not None:  # added later too: hashed only when set
        must_match["tokenMap"] = spec.speculative.token_map
    if spec.speculative.transfer_draft_probs:  # likewise: the aux layout gains the q rows only when on
        must_match["transferDraftProbs"] = True
    layout = {role: pool(spec, role).nodes_per_instance for role in c.POOLS}
    if any(nodes > 1 for nodes in layout.values()):  # added with multi-node pools: hashed only when one is
        must_match["layout"] = layout
    canonical = json.dumps(must_match, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def deployment_name(service: DisaggSpecService, role: str, fingerprint: str) -> str:
    """`<service>-<role>-<revision>`: each revision's workloads (Deployments, or a multi-node pool's
    LeaderWorkerSet) live side by side during a rollout."""
    return f"{child_name(service, role)}-{revision_name(fingerprint)}"


def labels(service: DisaggSpecService, role: str) -> dict[str, str]:
    """Labels every child of `role` carries (and the router's pods); no fingerprint: selectors are immutable."""
    return {
        c.LABEL_NAME: "sglang-router" if role == c.ROLE_ROUTER else "sglang",
        c.LABEL_INSTANCE: service.metadata.name,
        c.LABEL_COMPONENT: role,
        c.LABEL_MANAGED_BY: c.MANAGED_BY,
        c.LABEL_SERVICE: service.metadata.name,
        c.LABEL_ROLE: role,
    }


def selector(service: DisaggSpecService, role: str) -> dict[str, str]:
    """The immutable Deployment selector of `role`."""
    return {c.LABEL_SERVICE: service.metadata.name, c.LABEL_ROLE: role}


def metadata(service: DisaggSpecService, role: str, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or child_name(service, role),
        "namespace": service.metadata.namespace,
        "labels": labels(service, role),
    }


def revision_selector(service: DisaggSpecService, role: str, fingerprint: str) -> dict[str, str]:
    """The immutable selector of one revision's Deployment of `role`: its pods only, never another revision's."""
    return {**selector(service, role), c.LABEL_FINGERPRINT: fingerprint}


def revision_metadata(service: DisaggSpecService, role: str, fingerprint: str) -> dict[str, Any]:
    """The metadata of `role`'s workload in the revision of `fingerprint` (a Deployment, or a multi-node pool's
    LeaderWorkerSet): named after the revision, labelled with its fingerprint, carrying the spec it was rendered from
    (`REVISION_SPEC_ANNOTATION`)."""
    meta = metadata(service, role, deployment_name(service, role, fingerprint))
    meta["labels"][c.LABEL_FINGERPRINT] = fingerprint
    meta["annotations"] = {REVISION_SPEC_ANNOTATION: revision_spec(service)}
    return meta


def deployment(
    service: DisaggSpecService, role: str, fingerprint: str, replicas: int, template: dict[str, Any]
) -> dict[str, Any]:
    """The Deployment of `role` in the revision of `fingerprint`, selecting that revision's pods."""
    meta = revision_metadata(service, role, fingerprint)
    selected = revision_selector(service, role, fingerprint)
    spec: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": selected}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {**spec, **template}}


def revision_spec(service: DisaggSpecService) -> str:
    """The spec as stored on a revision's Deployments: canonical JSON (stable across passes, so no needless write)."""
    # exclude_unset: what was left unset stays unset when the spec is parsed back, so it renders exactly the same.
    spec = service.spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def pull_secrets(service: DisaggSpecService) -> dict[str, Any]:
    """`imagePullSecrets` for a pod spec (empty when none are set)."""
    secrets = service.spec.sglang.image_pull_secrets
    return {"imagePullSecrets": [{"name": s.name} for s in secrets]} if secrets else {}
