"""Engine rules: the attention backend of spec.engine must support each pool's eagle topk."""

from __future__ import annotations

from typing import Final

from disaggspec.api.effective import EAGLE_TOPK, EffectiveSpeculative
from disaggspec.api.v1alpha1 import DisaggSpecService
from disaggspec.validation._cel import by_version, effective, string_list
from disaggspec.validation._core import effective_rule, profile_of


def _topk_trtllm(service: DisaggSpecService, eff: EffectiveSpeculative) -> bool:
    """0.5.2 sglang/srt/server_args.py:768-773; 0.5.23 sglang/srt/arg_groups/speculative_hook.py:1176-1180."""
    return eff.eagle_topk == 1 or service.spec.engine.attention_backend != "trtllm_mha"


TOPK_TRTLLM_MHA: Final = effective_rule(
    "engine-topk-trtllm-mha",
    ("spec.speculative.eagleTopk", "spec.engine.attentionBackend"),
    "the trtllm_mha attention backend only supports eagleTopk 1: set spec.speculative.eagleTopk to 1 or choose "
    "another spec.engine.attentionBackend",
    wire="eagleTopk",
    holds=_topk_trtllm,
    cel=lambda p: (
        f"{effective(p, EAGLE_TOPK)} == 1 || !has(self.engine.attentionBackend) || "
        "self.engine.attentionBackend != 'trtllm_mha'"
    ),
)


def _topk_paged(service: DisaggSpecService, eff: EffectiveSpeculative) -> bool:
    """topk > 1 with page_size > 1 only on flashinfer (0.5.2 sglang/srt/server_args.py:784-792) or flashinfer, fa3,
    triton (0.5.23 sglang/srt/arg_groups/speculative_hook.py:1268-1282). An unset backend is chosen by SGLang per GPU,
    so the operator cannot prove it allowed and asks for it."""
    engine = service.spec.engine
    if eff.eagle_topk == 1 or engine.page_size == 1:
        return True
    return engine.attention_backend in profile_of(service).paged_topk_attention_backends


TOPK_PAGED_ATTENTION: Final = effective_rule(
    "engine-topk-paged-attention",
    ("spec.speculative.eagleTopk", "spec.engine.pageSize", "spec.engine.attentionBackend"),
    "eagleTopk > 1 with engine.pageSize > 1 needs spec.engine.attentionBackend set to a backend that supports it "
    "(0.5.2: flashinfer; 0.5.23: flashinfer, fa3, triton), or pageSize 1",
    wire="eagleTopk",
    holds=_topk_paged,
    cel=lambda p: (
        f"{effective(p, EAGLE_TOPK)} == 1 || self.engine.pageSize == 1 || (has(self.engine.attentionBackend) && "
        + by_version(lambda prof: f"self.engine.attentionBackend in {string_list(prof.paged_topk_attention_backends)}")
        + ")"
    ),
)
