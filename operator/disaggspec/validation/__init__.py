"""The rule table: every cross-field rule of a DisaggSpecService, with its Python check and, where CEL can say it,
the CEL expression the CRD carries.

One table serves three callers: the CRD generator (`tools.crd`) places each rule's CEL on the schema node it
names, so `kubectl apply` rejects a bad spec with no operator running; the admission webhook and reconcile call
`validate(service)` (and `validate_update(old, new)`), which run the Python twin of every rule, including the ones CEL
cannot express. A rule's message is static, names the field(s) and the fix, and is the same string in both places.

The pools share one `model`, `sglang`, `engine` and `transfer` block, so "engine settings identical on both sides"
(model path/revision/dtype, sglang version, page size, KV cache dtype, transfer backend, bootstrap port) holds by
construction and needs no rule; only what a pool may override (its `speculative` block) is cross-checked. Likewise
the algorithm enum of the API (EAGLE, EAGLE3, NEXTN) is accepted by every supported release, which a unit test
asserts against the profiles instead of a rule that could never fire. Citations are `file:line` inside the released
wheels (`pip download --no-deps sglang==<version>`).

The rules live by family, each with its Python check, CEL and message side by side: `pools` (the resource name, GPUs,
multi-node pools and env), `extra_args` (both extraArgs lists against the release's parser and the option classes),
`content` (image references, model strings, object names and paths), `resources` (container resource names and
quantities), `pod_shape` (labels, annotations, node selector, tolerations), `speculative` (prefill and decode agree;
each pool's settings), `versions` (what depends on spec.sglang.version), `engine`, `transfer`, `model` and
`transitions` (update-only rules), `rollout` and `autoscaling`.
`_core` holds the row types and the shared rule shapes, `_cel` the CEL building blocks. This module assembles the table
in its order.
"""

from __future__ import annotations

from typing import Final

from disaggspec.api.v1alpha1 import DisaggSpecService
from disaggspec.validation import (
    autoscaling,
    content,
    engine,
    extra_args,
    model,
    parallelism,
    pod_shape,
    pools,
    resources,
    rollout,
    speculative,
    transfer,
    transitions,
    versions,
)
from disaggspec.validation._core import Cel, Check, Finding, Rule, TransitionCheck, TransitionRule, Violation
from disaggspec.validation.extra_args import OWNED_FLAGS, is_owned_flag
from disaggspec.validation.model import HF_TOKEN_ENV
from disaggspec.validation.pools import MAX_NAME_LENGTH, OWNED_ENV, pool_gpus

RULES: Final[tuple[Rule, ...]] = (
    pools.NAME_LENGTH,
    pools.NAME_DNS_LABEL,
    pools.NAME_LENGTH_MULTI_NODE,
    speculative.ALGORITHM_MATCH,
    speculative.DRAFT_MODEL_MATCH,
    speculative.TOPK_MATCH,
    speculative.MULTI_LAYER_MATCH,
    speculative.NUM_STEPS_MATCH,
    speculative.REJECTION_SAMPLING_MATCH,
    speculative.DRAFT_KV_DTYPE_MATCH,
    speculative.DRAFT_MODEL_REQUIRED,
    versions.BACKEND_SUPPORTED,
    versions.KV_DTYPE_SUPPORTED,
    versions.ROUTER_POLICY_SUPPORTED,
    speculative.NUM_DRAFT_TOKENS_CHAIN,
    speculative.NUM_DRAFT_TOKENS_REQUIRED,
    speculative.EXPECTED_ACCEPT_LENGTH_REACHABLE,
    speculative.REJECTION_SAMPLING_TOPK,
    speculative.TRANSFER_DRAFT_PROBS_REJECTION,
    versions.REJECTION_SAMPLING_VERSION,
    versions.MULTI_LAYER_VERSION,
    versions.DRAFT_KV_DTYPE_VERSION,
    versions.TOPK_BUFFER_WIDTH,
    engine.TOPK_TRTLLM_MHA,
    engine.TOPK_PAGED_ATTENTION,
    versions.ENGINE_OPTION_VERSION,
    versions.IB_MAP_VERSION,
    transfer.IB_MAP_COVERS_GPUS,
    transfer.IB_MAP_WHOLE_NODE,
    transfer.IB_MAP_STATIC,
    transfer.IB_DEVICES_EXCLUSIVE,
    transfer.RDMA_BACKEND,
    transfer.BOOTSTRAP_PORT_FREE,
    transfer.BOOTSTRAP_PORT_DIST_INIT,
    transfer.HOST_NETWORK_SHARED_NODE,
    pools.GPU_COUNT_WHOLE,
    pools.GPUS_COVER_TP,
    pools.GPUS_FIT_NODE,
    pools.MULTI_NODE_TP,
    pools.MULTI_NODE_GPU_LIMIT,
    *parallelism.RULES,
    pools.MAX_UNAVAILABLE,
    *extra_args.RULES,
    pools.ENV_OWNED,
    pools.ENV_RDMA_OWNED,
    model.HF_TOKEN_IN_ENV,
    pools.ENV_VALUE_EXCLUSIVE,
    pools.ENV_ONE_SOURCE,
    model.VOLUME_ONE_SOURCE,
    model.LOCAL_PATH_VOLUME,
    model.CACHE_ONE_SOURCE,
    model.CACHE_VOLUME_EXCLUSIVE,
    model.MODEL_CACHE_ENV_RULE,
    model.COMPILE_CACHE_ENV_RULE,
    # content and shape (issue 15 B)
    *content.RULES,
    transfer.RDMA_RESOURCES,
    transfer.IB_MAP_KEYS,
    transfer.TP_DIVISIBLE,
    transfer.ROUTER_PORT_FREE,
    *resources.RULES,
    *pod_shape.RULES,
    *rollout.RULES,
    *autoscaling.RULES,
)
"""Every rule over one object, in the order violations are reported (and docs/reference/rules.md lists them)."""

TRANSITION_RULES: Final[tuple[TransitionRule, ...]] = (
    transitions.IMMUTABLE_ALGORITHM,
    transitions.IMMUTABLE_TRANSFER_BACKEND,
)
"""The update-only rules, checked before the rules over the new object."""

ALL_RULES: Final[tuple[Rule | TransitionRule, ...]] = (*RULES, *TRANSITION_RULES)
"""Both tables in order: what the CRD generator places and the CEL-twin test compares."""
RULES_BY_ID: Final[dict[str, Rule | TransitionRule]] = {rule.id: rule for rule in ALL_RULES}


def _violation(rule: Rule, found: str | Finding) -> Violation:
    if isinstance(found, Finding):
        return Violation(rule.id, found.field, rule.message, found.detail)
    return Violation(rule.id, found, rule.message)


def validate(service: DisaggSpecService) -> list[Violation]:
    """Every violation of the rule table, in table order (empty when the service is consistent)."""
    return [_violation(rule, found) for rule in RULES for found in rule.check(service)]


def validate_update(old: DisaggSpecService, new: DisaggSpecService) -> list[Violation]:
    """`validate(new)` plus the update-only rules (immutable fields) comparing `old` to `new`."""
    changes = [Violation(rule.id, path, rule.message) for rule in TRANSITION_RULES for path in rule.check(old, new)]
    return changes + validate(new)


__all__ = [
    "ALL_RULES",
    "HF_TOKEN_ENV",
    "MAX_NAME_LENGTH",
    "OWNED_ENV",
    "OWNED_FLAGS",
    "RULES",
    "RULES_BY_ID",
    "TRANSITION_RULES",
    "Cel",
    "Check",
    "Rule",
    "TransitionCheck",
    "TransitionRule",
    "Violation",
    "is_owned_flag",
    "pool_gpus",
    "validate",
    "validate_update",
]
