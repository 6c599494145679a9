"""Each pool's effective speculative settings: its own overrides merged over the shared `spec.speculative` block.

This is the one place that decides what a pool's SGLang server is told about speculative decoding, so the
validation table and the renderer cannot disagree. The fields a pool may override are described once, as
`SpeculativeField`s (Python attribute, camelCase wire name, whether the shared block always has a value):
`effective_speculative` merges with them in Python, and the validation table builds the CEL of the same merge from
them. `numDraftTokens` left unset with eagle topk 1 becomes numSteps + 1, which is what SGLang would force anyway
(0.5.2 sglang/srt/server_args.py:775-782, 0.5.23 sglang/srt/arg_groups/speculative_hook.py:1256-1265).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from disaggspec.api.v1alpha1 import (
    Algorithm,
    DisaggSpecService,
    DisaggSpecServiceSpec,
    DraftKvCacheDtype,
    DraftModel,
    PoolSpec,
    PoolSpeculativeSpec,
    SpeculativeSpec,
)
from disaggspec.constants import POOLS
from disaggspec.constants import PoolName as PoolName  # re-exported: the pool type of the API helpers

T = TypeVar("T")


def pool(spec: DisaggSpecServiceSpec, name: PoolName) -> PoolSpec:
    """The named pool of a spec."""
    return spec.prefill if name == "prefill" else spec.decode


@dataclass(frozen=True)
class SpeculativeField(Generic[T]):
    """One speculative setting a pool may override, as the manifest, the models and the CEL rules name it."""

    attr: str
    """Python attribute: the same on SpeculativeSpec, PoolSpeculativeSpec and EffectiveSpeculative."""
    wire: str
    """camelCase name in the manifest and in CEL (`spec.speculative.<wire>`, `spec.<pool>.speculative.<wire>`)."""
    shared: Callable[[SpeculativeSpec], T]
    """Reads the field from spec.speculative."""
    override: Callable[[PoolSpeculativeSpec], T | None]
    """Reads the field from a pool's speculative block (None: not overridden)."""
    always_set: bool
    """Whether spec.speculative always holds a value (required or defaulted); if not, unset is a state of its own and
    the effective value is unset when neither block sets it."""

    def own(self, spec: DisaggSpecServiceSpec, name: PoolName) -> T | None:
        """The named pool's own override of the field, None when the pool inherits it."""
        override = pool(spec, name).speculative
        if override is None or self.attr not in override.model_fields_set:
            return None
        return self.override(override)

    def resolve(self, spec: DisaggSpecServiceSpec, name: PoolName) -> T:
        """The named pool's effective value: its override when set, else the shared value."""
        mine = self.own(spec, name)
        return self.shared(spec.speculative) if mine is None else mine


ALGORITHM: Final = SpeculativeField[Algorithm](
    "algorithm", "algorithm", lambda s: s.algorithm, lambda o: o.algorithm, always_set=True
)
DRAFT_MODEL: Final = SpeculativeField[DraftModel | None](
    "draft_model", "draftModel", lambda s: s.draft_model, lambda o: o.draft_model, always_set=False
)
NUM_STEPS: Final = SpeculativeField[int](
    "num_steps", "numSteps", lambda s: s.num_steps, lambda o: o.num_steps, always_set=True
)
EAGLE_TOPK: Final = SpeculativeField[int](
    "eagle_topk", "eagleTopk", lambda s: s.eagle_topk, lambda o: o.eagle_topk, always_set=True
)
NUM_DRAFT_TOKENS: Final = SpeculativeField[int | None](
    "num_draft_tokens", "numDraftTokens", lambda s: s.num_draft_tokens, lambda o: o.num_draft_tokens, always_set=False
)
REJECTION_SAMPLING: Final = SpeculativeField[bool](
    "rejection_sampling",
    "rejectionSampling",
    lambda s: s.rejection_sampling,
    lambda o: o.rejection_sampling,
    always_set=True,
)
MULTI_LAYER: Final = SpeculativeField[bool](
    "multi_layer", "multiLayer", lambda s: s.multi_layer, lambda o: o.multi_layer, always_set=True
)
DRAFT_KV_CACHE_DTYPE: Final = SpeculativeField[DraftKvCacheDtype | None](
    "draft_kv_cache_dtype",
    "draftKvCacheDtype",
    lambda s: s.draft_kv_cache_dtype,
    lambda o: o.draft_kv_cache_dtype,
    always_set=False,
)
SPECULATIVE_FIELDS: Final = (
    ALGORITHM,
    DRAFT_MODEL,
    NUM_STEPS,
    EAGLE_TOPK,
    NUM_DRAFT_TOKENS,
    REJECTION_SAMPLING,
    MULTI_LAYER,
    DRAFT_KV_CACHE_DTYPE,
)
"""Every field a pool may override, in the models' order."""
SHARED_ONLY_SPECULATIVE_FIELDS: Final = ("token_map", "transfer_draft_probs", "expected_accept_length")
"""SpeculativeSpec fields no pool overrides, so both pools render the one value: `token_map` (the draft's reduced
vocabulary, which prefill's first draft token and decode's drafts must index alike); `expected_accept_length` is not
rendered at all (only the operator's SpecDecodeHealthy judges against it)."""


@dataclass(frozen=True)
class EffectiveSpeculative:
    """The speculative settings one pool's server runs with."""

    algorithm: Algorithm
    draft_model: DraftModel | None
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int | None
    """None only when eagle topk > 1 and nobody set it (a violation the rules report)."""
    rejection_sampling: bool
    multi_layer: bool
    draft_kv_cache_dtype: DraftKvCacheDtype | None

    @property
    def topk_entries(self) -> int:
        """Top-k entries prefill sends to decode per request: topk, times numSteps with multi-layer EAGLE
        (0.5.23 sglang/srt/speculative/eagle_disaggregation.py:58-60)."""
        return self.eagle_topk * self.num_steps if self.multi_layer else self.eagle_topk


def effective_speculative(spec: DisaggSpecServiceSpec, name: PoolName) -> EffectiveSpeculative:
    """The named pool's speculative settings: each field set in its `speculative` block wins over the shared one."""
    eagle_topk = EAGLE_TOPK.resolve(spec, name)
    num_steps = NUM_STEPS.resolve(spec, name)
    num_draft_tokens = NUM_DRAFT_TOKENS.resolve(spec, name)
    if num_draft_tokens is None and eagle_topk == 1:
        num_draft_tokens = num_steps + 1
    return EffectiveSpeculative(
        algorithm=ALGORITHM.resolve(spec, name),
        draft_model=DRAFT_MODEL.resolve(spec, name),
        num_steps=num_steps,
        eagle_topk=eagle_topk,
        num_draft_tokens=num_draft_tokens,
        rejection_sampling=REJECTION_SAMPLING.resolve(spec, name),
        multi_layer=MULTI_LAYER.resolve(spec, name),
        draft_kv_cache_dtype=DRAFT_KV_CACHE_DTYPE.resolve(spec, name),
    )


def effective_speculative_pair(service: DisaggSpecService) -> dict[PoolName, EffectiveSpeculative]:
    """Both pools' effective speculative settings, keyed by pool name."""
    return {name: effective_speculative(service.spec, name) for name in POOLS}
