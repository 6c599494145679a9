"""Names, labels and the spec fingerprint of every child object; pure.

The fingerprint hashes every setting that must be identical on prefill and decode (model, SGLang release and image,
engine, transfer, the effective speculative settings). It labels the pool pods and is part of the router's
selectors, so the router never pairs a prefill pod with a decode pod rendered from a different spec, even mid-rollout.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Final

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, effective_speculative


def child_name(service: DisaggSpecService, component: str) -> str:
    return f"{service.metadata.name}-{component}"


LATER_ENGINE_FIELDS: Final = frozenset(
    {"context_length", "quantization", "tokenizer_path", "chat_template", "extra_args"}
)
"""Engine fields added after the fingerprint's first release: hashed only when set, so an operator upgrade does not
change the fingerprint (and roll the pods) of a service that does not use them."""
UNHASHED_ENGINE_FIELDS: Final = frozenset({"compile_cache"})
"""Engine fields that need not match across the pools (where compiled kernels are kept): never hashed."""


def fingerprint(service: DisaggSpecService) -> str:
    """16 hex characters of SHA-256 over the must-match settings; changes exactly when one of them changes."""
    spec = service.spec
    unset_later = {name for name in LATER_ENGINE_FIELDS if name not in spec.engine.model_dump(exclude_defaults=True)}
    must_match: dict[str, Any] = {
        "sglang": {"version": spec.sglang.version, "image": spec.sglang.image, "topk": spec.sglang.topk_buffer_width},
        "model": spec.model.model_dump(mode="json", include={"path", "revision", "dtype", "trust_remote_code"}),
        "engine": spec.engine.model_dump(mode="json", exclude=unset_later | UNHASHED_ENGINE_FIELDS),
        "transfer": spec.transfer.model_dump(mode="json", include={"backend", "bootstrap_port"}),
        "speculative": {
            role: dataclasses.asdict(effective_speculative(spec, role)) for role in (c.ROLE_PREFILL, c.ROLE_DECODE)
        },
    }
    if spec.speculative.token_map is not None:  # added later too: hashed only when set
        must_match["tokenMap"] = spec.speculative.token_map
    if spec.speculative.transfer_draft_probs:  # likewise: the aux layout gains the q rows only when on
        must_match["transferDraftProbs"] = True
    canonical = json.dumps(must_match, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def labels(service: DisaggSpecService, component: str) -> dict[str, str]:
    """Labels every child of `component` carries (and the router's pods); no fingerprint: selectors are immutable."""
    return {
        c.LABEL_NAME: "sglang-router" if component == c.ROLE_ROUTER else "sglang",
        c.LABEL_INSTANCE: service.metadata.name,
        c.LABEL_COMPONENT: component,
        c.LABEL_MANAGED_BY: c.MANAGED_BY,
        c.LABEL_SERVICE: service.metadata.name,
        c.LABEL_ROLE: component,
    }


def selector(service: DisaggSpecService, component: str) -> dict[str, str]:
    """The immutable Deployment selector of `component`."""
    return {c.LABEL_SERVICE: service.metadata.name, c.LABEL_ROLE: component}


def metadata(service: DisaggSpecService, component: str, name: str | None = None) -> dict[str, Any]:
    return {
        "name": name or child_name(service, component),
        "namespace": service.metadata.namespace,
        "labels": labels(service, component),
    }


def deployment(
    service: DisaggSpecService, component: str, fingerprint: str, replicas: int, template: dict[str, Any]
) -> dict[str, Any]:
    """A Deployment of `component` labelled with the fingerprint, selecting its pods by service and role."""
    meta = metadata(service, component)
    meta["labels"][c.LABEL_FINGERPRINT] = fingerprint
    spec: dict[str, Any] = {"replicas": replicas, "selector": {"matchLabels": selector(service, component)}}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {**spec, **template}}


def pull_secrets(service: DisaggSpecService) -> dict[str, Any]:
    """`imagePullSecrets` for a pod spec (empty when none are set)."""
    secrets = service.spec.sglang.image_pull_secrets
    return {"imagePullSecrets": [{"name": s.name} for s in secrets]} if secrets else {}
