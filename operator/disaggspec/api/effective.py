"""Each pool's effective speculative settings: its own overrides merged over the shared `spec.speculative` block.

This is the one place that decides what a pool's SGLang server is told about speculative decoding, so the
validation table and the renderer cannot disagree. `numDraftTokens` left unset with eagle topk 1 becomes
numSteps + 1, which is what SGLang would force anyway (0.5.2 sglang/srt/server_args.py:775-782, 0.5.23
sglang/srt/arg_groups/speculative_hook.py:1256-1265).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from disaggspec.api.v1alpha1 import (
    Algorithm,
    DisaggSpecService,
    DisaggSpecServiceSpec,
    DraftKvCacheDtype,
    DraftModel,
    PoolSpec,
)

PoolName = Literal["prefill", "decode"]
POOL_NAMES: tuple[PoolName, PoolName] = ("prefill", "decode")


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


def pool(spec: DisaggSpecServiceSpec, name: PoolName) -> PoolSpec:
    """The named pool of a spec."""
    return spec.prefill if name == "prefill" else spec.decode


def effective_speculative(spec: DisaggSpecServiceSpec, name: PoolName) -> EffectiveSpeculative:
    """The named pool's speculative settings: each field set in its `speculative` block wins over the shared one."""
    shared = spec.speculative
    override = pool(spec, name).speculative
    set_fields = override.model_fields_set if override is not None else set()

    def pick(field: str) -> object:
        if override is not None and field in set_fields and getattr(override, field) is not None:
            return getattr(override, field)
        return getattr(shared, field)

    eagle_topk = int(pick("eagle_topk"))  # type: ignore[call-overload]
    num_steps = int(pick("num_steps"))  # type: ignore[call-overload]
    num_draft_tokens = pick("num_draft_tokens")
    if num_draft_tokens is None and eagle_topk == 1:
        num_draft_tokens = num_steps + 1
    return EffectiveSpeculative(
        algorithm=pick("algorithm"),  # type: ignore[arg-type]
        draft_model=pick("draft_model"),  # type: ignore[arg-type]
        num_steps=num_steps,
        eagle_topk=eagle_topk,
        num_draft_tokens=num_draft_tokens,  # type: ignore[arg-type]
        rejection_sampling=bool(pick("rejection_sampling")),
        multi_layer=bool(pick("multi_layer")),
        draft_kv_cache_dtype=pick("draft_kv_cache_dtype"),  # type: ignore[arg-type]
    )


def effective_speculative_pair(service: DisaggSpecService) -> dict[PoolName, EffectiveSpeculative]:
    """Both pools' effective speculative settings, keyed by pool name."""
    return {name: effective_speculative(service.spec, name) for name in POOL_NAMES}
