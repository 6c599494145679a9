"""Speculative rules: prefill and decode agree where SGLang assumes them equal, and each pool's effective settings
are a combination SGLang runs as written."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from disaggspec.api.effective import (
    ALGORITHM,
    DRAFT_KV_CACHE_DTYPE,
    DRAFT_MODEL,
    EAGLE_TOPK,
    MULTI_LAYER,
    NUM_DRAFT_TOKENS,
    NUM_STEPS,
    REJECTION_SAMPLING,
    EffectiveSpeculative,
    PoolName,
    SpeculativeField,
    effective_speculative_pair,
)
from disaggspec.api.v1alpha1 import DisaggSpecService, DisaggSpecServiceSpec
from disaggspec.constants import POOLS
from disaggspec.validation._cel import effective, effective_part, is_set, string_list
from disaggspec.validation._core import Cel, Rule, effective_rule, speculative_field_path, speculative_path

_EAGLE_WITH_DRAFT: Final = ("EAGLE", "EAGLE3")
_REJECTION_SAMPLING_ALGORITHMS: Final = ("EAGLE", "EAGLE3", "NEXTN")


# ---- prefill and decode agree ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SpecTerm:
    """A value or condition over the spec, said in Python and, for the CRD, in CEL on the spec node."""

    python: Callable[[DisaggSpecServiceSpec], object]
    cel: str


def _overriding_pool(spec: DisaggSpecServiceSpec, field: SpeculativeField[Any]) -> PoolName:
    """The pool whose own speculative block sets `field` (decode when both or neither do): where a mismatch points."""
    prefill, decode = (field.own(spec, p) is not None for p in POOLS)
    return "prefill" if prefill and not decode else "decode"


def match_rule(
    rule_id: str,
    field: SpeculativeField[Any],
    message: str,
    *,
    unset: SpecTerm | None = None,
    parts: tuple[str, ...] = (),
    when: SpecTerm | None = None,
) -> Rule:
    """Prefill's and decode's effective `field` must be equal; the violation points at the overriding pool.

    `unset`: what an optional field compares as when neither block sets it. `parts`: for an object-valued field, the
    parts CEL compares one by one (Python compares the objects). `when`: the rule only applies while it holds."""

    def value(spec: DisaggSpecServiceSpec, p: PoolName) -> object:
        resolved = field.resolve(spec, p)
        return unset.python(spec) if resolved is None and unset is not None else resolved

    def check(service: DisaggSpecService) -> Iterator[str]:
        spec = service.spec
        if (when is None or when.python(spec)) and value(spec, "prefill") != value(spec, "decode"):
            yield speculative_path(_overriding_pool(spec, field), field.wire)

    if parts:
        equal = " && ".join(
            f"{effective_part('prefill', field, s)} == {effective_part('decode', field, s)}" for s in parts
        )
    else:
        fallback = None if unset is None else unset.cel
        equal = f"{effective('prefill', field, fallback)} == {effective('decode', field, fallback)}"
    fields = tuple(f"spec.{where}speculative.{field.wire}" for where in ("", "prefill.", "decode."))
    holds = equal if when is None else f"!{when.cel} || {equal}"
    # Two CEL rules with one condition, split on which pool a mismatch points at (as `_overriding_pool`): prefill
    # when only prefill overrides the field, decode otherwise, so the API server names the same field as Python.
    only_prefill = f"({_overrides('prefill', field)} && !{_overrides('decode', field)})"
    cels = (
        Cel(DisaggSpecServiceSpec, f"!{only_prefill} || {holds}", speculative_field_path("prefill", field.wire)),
        Cel(DisaggSpecServiceSpec, f"{only_prefill} || {holds}", speculative_field_path("decode", field.wire)),
    )
    return Rule(rule_id, fields, message, check, cels)


def _overrides(p: PoolName, field: SpeculativeField[Any]) -> str:
    """CEL: the pool's own speculative block sets `field`."""
    return f"(has(self.{p}.speculative) && has(self.{p}.speculative.{field.wire}))"


ALGORITHM_MATCH: Final = match_rule(
    "spec-algorithm-match",
    ALGORITHM,
    "prefill and decode must run the same speculative algorithm: remove the algorithm override from "
    "spec.prefill.speculative or spec.decode.speculative, or make both equal",
)

DRAFT_MODEL_MATCH: Final = match_rule(
    "spec-draft-model-match",
    DRAFT_MODEL,
    "prefill and decode must load the same draft model (path and revision): remove the draftModel override from "
    "spec.prefill.speculative or spec.decode.speculative, or make both equal",
    parts=("path", "revision"),
)

TOPK_MATCH: Final = match_rule(
    "spec-topk-match",
    EAGLE_TOPK,
    "prefill and decode must use the same eagleTopk (decode reads the top-k rows prefill sends): remove the "
    "eagleTopk override from spec.prefill.speculative or spec.decode.speculative, or make both equal",
)

MULTI_LAYER_MATCH: Final = match_rule(
    "spec-multi-layer-match",
    MULTI_LAYER,
    "prefill and decode must agree on multiLayer (it changes how many top-k entries prefill sends): remove the "
    "multiLayer override from spec.prefill.speculative or spec.decode.speculative",
)

# Multi-layer EAGLE sends topk x num_steps top-k entries and decode reads that many (0.5.23
# sglang/srt/speculative/eagle_disaggregation.py:58-60), so num steps must then match; without it prefill sends topk
# entries only and decode's num steps is its own business.
NUM_STEPS_MATCH: Final = match_rule(
    "spec-num-steps-match",
    NUM_STEPS,
    "with multiLayer, prefill and decode must use the same numSteps (prefill sends eagleTopk x numSteps top-k "
    "entries): remove the numSteps override from spec.prefill.speculative or spec.decode.speculative",
    when=SpecTerm(
        lambda spec: any(MULTI_LAYER.resolve(spec, p) for p in POOLS),
        f"({effective('prefill', MULTI_LAYER)} || {effective('decode', MULTI_LAYER)})",
    ),
)

REJECTION_SAMPLING_MATCH: Final = match_rule(
    "spec-rejection-sampling-match",
    REJECTION_SAMPLING,
    "prefill and decode must agree on rejectionSampling: remove the rejectionSampling override from "
    "spec.prefill.speculative or spec.decode.speculative",
)

# The draft KV dtype defaults to --kv-cache-dtype (0.5.23 sglang/srt/arg_groups/fields/spec.py:151-164), so unset
# compares as engine.kvCacheDtype; both sides size draft KV pages from it.
DRAFT_KV_DTYPE_MATCH: Final = match_rule(
    "spec-draft-kv-dtype-match",
    DRAFT_KV_CACHE_DTYPE,
    "prefill and decode must use the same draftKvCacheDtype: remove the draftKvCacheDtype override from "
    "spec.prefill.speculative or spec.decode.speculative, or make both equal",
    unset=SpecTerm(lambda spec: spec.engine.kv_cache_dtype, "self.engine.kvCacheDtype"),
)


# ---- each pool's settings ----------------------------------------------------------------------------------------


def _draft_model_given(service: DisaggSpecService, eff: EffectiveSpeculative) -> bool:
    """EAGLE and EAGLE3 load a separate draft checkpoint; only DeepSeek-V3/R1 and GLM-4-MoE (NEXTN, MTP) default it to
    the target model (0.5.2 sglang/srt/server_args.py:743-751; 0.5.23 routes NEXTN the same way,
    sglang/srt/speculative/spec_info.py:60-61)."""
    return eff.algorithm not in _EAGLE_WITH_DRAFT or eff.draft_model is not None


DRAFT_MODEL_REQUIRED: Final = effective_rule(
    "spec-draft-model-required",
    ("spec.speculative.algorithm", "spec.speculative.draftModel"),
    "algorithm EAGLE and EAGLE3 need a draft model: set spec.speculative.draftModel.path (or use NEXTN for models "
    "with built-in MTP layers)",
    wire="draftModel",
    holds=_draft_model_given,
    cel=lambda p: f"!({effective(p, ALGORITHM)} in {string_list(_EAGLE_WITH_DRAFT)}) || {is_set(p, DRAFT_MODEL)}",
)


def _chain_draft_tokens(service: DisaggSpecService, eff: EffectiveSpeculative) -> bool:
    """With topk 1 SGLang silently rewrites num_draft_tokens to num_steps + 1 (0.5.2 sglang/srt/server_args.py:775-782;
    0.5.23 sglang/srt/arg_groups/speculative_hook.py:1256-1265); rejecting keeps the spec equal to what runs."""
    return eff.eagle_topk != 1 or eff.num_draft_tokens == eff.num_steps + 1


NUM_DRAFT_TOKENS_CHAIN: Final = effective_rule(
    "spec-num-draft-tokens-chain",
    ("spec.speculative.eagleTopk", "spec.speculative.numDraftTokens", "spec.speculative.numSteps"),
    "with eagleTopk 1, numDraftTokens must equal numSteps + 1 (SGLang would silently change it): set "
    "spec.speculative.numDraftTokens to numSteps + 1 or leave it unset",
    wire="numDraftTokens",
    holds=_chain_draft_tokens,
    cel=lambda p: (
        f"{effective(p, EAGLE_TOPK)} != 1 || !{is_set(p, NUM_DRAFT_TOKENS)} || "
        f"{effective(p, NUM_DRAFT_TOKENS, '0')} == {effective(p, NUM_STEPS)} + 1"
    ),
)


def _tree_draft_tokens(service: DisaggSpecService, eff: EffectiveSpeculative) -> bool:
    """With topk > 1 SGLang has no rule to derive num_draft_tokens (it auto-chooses all three only when all are unset,
    0.5.2 sglang/srt/server_args.py:754-763), so the operator requires it to know the verify width."""
    return eff.eagle_topk == 1 or eff.num_draft_tokens is not None


NUM_DRAFT_TOKENS_REQUIRED: Final = effective_rule(
    "spec-num-draft-tokens-required",
    ("spec.speculative.eagleTopk", "spec.speculative.numDraftTokens"),
    "with eagleTopk > 1, spec.speculative.numDraftTokens is required: set the number of tree tokens to verify per step",
    wire="numDraftTokens",
    holds=_tree_draft_tokens,
    cel=lambda p: f"{effective(p, EAGLE_TOPK)} == 1 || {is_set(p, NUM_DRAFT_TOKENS)}",
)


def _expected_accept_length_reachable(service: DisaggSpecService) -> Iterator[str]:
    """Above 1 (1.0 would expect no draft token to be accepted: nothing to judge). A verify step accepts at most a
    root-to-leaf chain of the draft tree, numSteps + 1 tokens with the bonus (0.5.23
    sglang/srt/speculative/eagle_info.py `EagleVerifyInput.max_tree_depth`: spec_steps + 1 bounds `accept_index`),
    and never more than numDraftTokens; an expectation above that can never be met, so the service would always
    read as unhealthy."""
    expected = service.spec.speculative.expected_accept_length
    if expected is None:
        return
    eff = effective_speculative_pair(service)["decode"]
    reachable = eff.num_steps + 1 if eff.num_draft_tokens is None else min(eff.num_steps + 1, eff.num_draft_tokens)
    if not 1 < expected <= reachable:
        yield "spec.speculative.expectedAcceptLength"


def _expected_accept_length_cel() -> str:
    steps = effective("decode", NUM_STEPS)
    tokens = effective("decode", NUM_DRAFT_TOKENS, "0")
    value = "self.speculative.expectedAcceptLength"
    return (
        f"!has({value}) || ({value} > 1.0 && {value} <= double({steps}) + 1.0 && "
        f"(!{is_set('decode', NUM_DRAFT_TOKENS)} || {value} <= double({tokens})))"
    )


EXPECTED_ACCEPT_LENGTH_REACHABLE: Final = Rule(
    "spec-expected-accept-length-reachable",
    ("spec.speculative.expectedAcceptLength", "spec.speculative.numSteps", "spec.speculative.numDraftTokens"),
    "spec.speculative.expectedAcceptLength must be above 1 and at most decode's numSteps + 1 (and its numDraftTokens): "
    "a verify step accepts at most that many tokens, bonus included, and 1 means no draft token is ever accepted; "
    "set it to what a benchmark of the pair measured",
    _expected_accept_length_reachable,
    Cel(DisaggSpecServiceSpec, _expected_accept_length_cel(), ".speculative.expectedAcceptLength"),
)


def _rejection_topk(service: DisaggSpecService, eff: EffectiveSpeculative) -> bool:
    """0.5.23 sglang/srt/arg_groups/speculative_hook.py:1210-1224: rejection sampling needs topk 1 and EAGLE/EAGLE3
    (NEXTN resolves to EAGLE); every algorithm of this API qualifies, so topk is what can fail."""
    return not eff.rejection_sampling or (eff.eagle_topk == 1 and eff.algorithm in _REJECTION_SAMPLING_ALGORITHMS)


REJECTION_SAMPLING_TOPK: Final = effective_rule(
    "spec-rejection-sampling-topk",
    ("spec.speculative.rejectionSampling", "spec.speculative.eagleTopk"),
    "rejectionSampling requires eagleTopk 1 and algorithm EAGLE, EAGLE3 or NEXTN: set spec.speculative.eagleTopk "
    "to 1 or turn rejectionSampling off",
    wire="rejectionSampling",
    holds=_rejection_topk,
    cel=lambda p: (
        f"!{effective(p, REJECTION_SAMPLING)} || ({effective(p, EAGLE_TOPK)} == 1 && "
        f"{effective(p, ALGORITHM)} in {string_list(_REJECTION_SAMPLING_ALGORITHMS)})"
    ),
)


def _draft_probs_need_rejection_sampling(service: DisaggSpecService, eff: EffectiveSpeculative) -> bool:
    """Patch 0003 (0.5.23): q rows exist only with rejection sampling (spec_draft_probs_metadata_shape returns None
    without it), and only rejection sampling verifies against q; asking for them otherwise would do nothing."""
    return not service.spec.speculative.transfer_draft_probs or eff.rejection_sampling


TRANSFER_DRAFT_PROBS_REJECTION: Final = effective_rule(
    "spec-transfer-draft-probs-rejection-sampling",
    ("spec.speculative.transferDraftProbs", "spec.speculative.rejectionSampling"),
    "spec.speculative.transferDraftProbs needs rejectionSampling on both pools (only rejection sampling verifies "
    "against the carried proposal; it needs SGLang 0.5.23): turn spec.speculative.rejectionSampling on, or "
    "transferDraftProbs off",
    wire="rejectionSampling",
    holds=_draft_probs_need_rejection_sampling,
    cel=lambda p: (
        f"!has(self.speculative.transferDraftProbs) || !self.speculative.transferDraftProbs || "
        f"{effective(p, REJECTION_SAMPLING)}"
    ),
)
