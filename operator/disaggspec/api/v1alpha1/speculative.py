"""Speculative decoding (`spec.speculative` and each pool's `speculative` overrides): the algorithm, the draft model,
steps, top-k and draft tokens, rejection sampling, multi-layer EAGLE, the draft KV dtype, the token map and the
transfer of draft probabilities. How a pool's overrides merge over the shared block is `disaggspec.api.effective`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from disaggspec.api.v1alpha1.base import _MAX_NAME, _MAX_STR, _SERVER_PATH_PATTERN, SpecModel

Algorithm = Literal["EAGLE", "EAGLE3", "NEXTN"]
DraftKvCacheDtype = Literal["auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"]


class DraftModel(SpecModel):
    """The draft checkpoint of EAGLE/EAGLE3 (NEXTN uses the target model's MTP layers and needs none)."""

    path: str = Field(
        min_length=1,
        max_length=_MAX_STR,
        description="Hugging Face repo id or absolute path of the draft model (--speculative-draft-model-path), "
        "in the form spec.model.path takes.",
    )
    revision: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME,
        description="Branch, tag or commit of the draft repo (--speculative-draft-model-revision), in the form "
        "spec.model.revision takes.",
    )


class SpeculativeSpec(SpecModel):
    """Speculative decoding settings shared by both pools. A pool's own `speculative` block overrides single fields;
    the operator rejects any pair whose effective settings differ where SGLang assumes them equal."""

    algorithm: Algorithm = Field(
        description="Speculative algorithm (--speculative-algorithm). EAGLE and EAGLE3 need draftModel; NEXTN runs "
        "the target's multi-token-prediction layers (DeepSeek MTP). Immutable: the hidden-state rows sent from "
        "prefill to decode change width with it.",
    )
    draft_model: DraftModel | None = Field(default=None, description="Draft model; required for EAGLE and EAGLE3.")
    num_steps: int = Field(
        default=3, ge=1, le=64, description="Draft steps per verification (--speculative-num-steps)."
    )
    eagle_topk: int = Field(
        default=1, ge=1, le=64, description="Tokens drafted per step; 1 drafts a chain (--speculative-eagle-topk)."
    )
    num_draft_tokens: int | None = Field(
        default=None,
        ge=2,
        le=1024,
        description="Tokens verified per step (--speculative-num-draft-tokens). With eagleTopk 1 it must be "
        "numSteps + 1 and may be left unset; with eagleTopk > 1 it is required.",
    )
    rejection_sampling: bool = Field(
        default=False,
        description="Verify drafts by rejection sampling (--speculative-use-rejection-sampling); needs eagleTopk 1 "
        "and SGLang 0.5.23.",
    )
    multi_layer: bool = Field(
        default=False,
        description="Multi-layer EAGLE (--enable-multi-layer-eagle): prefill sends eagleTopk x numSteps top-k "
        "entries. SGLang 0.5.23 only.",
    )
    draft_kv_cache_dtype: DraftKvCacheDtype | None = Field(
        default=None,
        description="KV cache dtype of the draft model (--speculative-draft-kv-cache-dtype); unset follows "
        "engine.kvCacheDtype. SGLang 0.5.23 only.",
    )
    token_map: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_STR,
        pattern=_SERVER_PATH_PATTERN,
        description="The draft model's reduced vocabulary (--speculative-token-map): a file path, or a Hugging Face "
        "repo id followed by the file, as FR-Spec publishes them. Rendered identically on both pools (no pool "
        "override: prefill's first draft token and decode's drafts must index the same vocabulary).",
    )
    transfer_draft_probs: bool = Field(
        default=False,
        description="With rejectionSampling, carry the draft proposal q of prefill's first draft step to decode's "
        "first verify (SGLANG_DISAGG_TRANSFER_DRAFT_PROBS=1 on both pools; patch 0003 of the project's SGLang "
        "0.5.23 image). Off, the first verify uses the one-hot proposal, which is exact; on, it can accept more of "
        "the first draft. Costs states x vocab x 4 B + 64 B of transfer-registered host memory per metadata slot on "
        "each side, per scheduler rank (states is 1, or numSteps with multiLayer): about 511 MiB per 1024 slots for "
        "a Llama-3 vocabulary, 1.5 GiB for DeepSeek-V3 with multiLayer. Needs rejectionSampling on both pools.",
    )
    expected_accept_length: float | None = Field(
        default=None,
        ge=1,
        le=65,
        description="The mean accept length (tokens per verify step, bonus token included, as "
        "sglang:spec_accept_length reports it) this draft reaches on the service's traffic when healthy, e.g. from "
        "a benchmark of the pair. SpecDecodeHealthy turns False when the measured accept length, normalised as "
        "(L - 1) / (numDraftTokens - 1), falls more than the operator's drop threshold (25% by default) below it. "
        "Unset: the operator learns the expectation from the service's own healthy traffic and keeps it in "
        "status.specDecode. Above 1 and at most numSteps + 1, the longest chain a verify step can accept. Judged "
        "only, never passed to SGLang: changing it starts no new revision.",
    )


class PoolSpeculativeSpec(SpecModel):
    """Per-pool overrides of the shared speculative settings; every unset field inherits spec.speculative."""

    algorithm: Algorithm | None = Field(default=None, description="Overrides spec.speculative.algorithm.")
    draft_model: DraftModel | None = Field(default=None, description="Overrides spec.speculative.draftModel.")
    num_steps: int | None = Field(default=None, ge=1, le=64, description="Overrides spec.speculative.numSteps.")
    eagle_topk: int | None = Field(default=None, ge=1, le=64, description="Overrides spec.speculative.eagleTopk.")
    num_draft_tokens: int | None = Field(
        default=None, ge=2, le=1024, description="Overrides spec.speculative.numDraftTokens."
    )
    rejection_sampling: bool | None = Field(default=None, description="Overrides spec.speculative.rejectionSampling.")
    multi_layer: bool | None = Field(default=None, description="Overrides spec.speculative.multiLayer.")
    draft_kv_cache_dtype: DraftKvCacheDtype | None = Field(
        default=None, description="Overrides spec.speculative.draftKvCacheDtype."
    )
