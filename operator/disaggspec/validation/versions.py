"""Rules that depend on the SGLang release (spec.sglang.version): choices a release supports, options only newer
releases have, and the width of the top-k rows prefill sends."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import takewhile
from typing import Any, Final

from disaggspec.api.effective import (
    DRAFT_KV_CACHE_DTYPE,
    EAGLE_TOPK,
    MULTI_LAYER,
    NUM_STEPS,
    REJECTION_SAMPLING,
    EffectiveSpeculative,
    PoolName,
    SpeculativeField,
)
from disaggspec.api.v1alpha1 import DisaggSpecService, DisaggSpecServiceSpec
from disaggspec.sglang.profiles import SGLangProfile
from disaggspec.validation._cel import (
    by_version,
    effective,
    is_set,
    spec_field,
    spec_ref,
    string_list,
    versions_where,
)
from disaggspec.validation._core import Cel, Rule, effective_rule, profile_of

_NO_WIDTH_LIMIT: Final = 2**31
"""Stands for "no fixed top-k width" in CEL, which has no null: larger than any topk x numSteps the schema admits."""


# ---- choices a release supports ----------------------------------------------------------------------------------


def supported_choice(
    rule_id: str,
    path: str,
    message: str,
    *,
    value: Callable[[DisaggSpecServiceSpec], str],
    choices: Callable[[SGLangProfile], frozenset[str]],
) -> Rule:
    """The field at `path` (read by `value`) must be one of the chosen release's `choices`."""

    def check(service: DisaggSpecService) -> Iterator[str]:
        if value(service.spec) not in choices(profile_of(service)):
            yield path

    cel = by_version(lambda prof: f"{spec_ref(path)} in {string_list(choices(prof))}")
    return Rule(
        rule_id, (path, "spec.sglang.version"), message, check, Cel(DisaggSpecServiceSpec, cel, spec_field(path))
    )


# 0.5.2 sglang/srt/server_args.py:107 and :2118-2123; 0.5.23 sglang/srt/arg_groups/choices.py:122-129.
BACKEND_SUPPORTED: Final = supported_choice(
    "transfer-backend-supported",
    "spec.transfer.backend",
    "spec.transfer.backend is not supported by spec.sglang.version (0.5.2: mooncake, nixl, ascend, fake; 0.5.23 adds "
    "mori and mooncake_tcp): pick a supported backend or another sglang version",
    value=lambda spec: spec.transfer.backend,
    choices=lambda prof: prof.transfer_backends,
)

# 0.5.2 sglang/srt/server_args.py:1027-1032; 0.5.23 sglang/srt/arg_groups/fields/model.py:197-221.
KV_DTYPE_SUPPORTED: Final = supported_choice(
    "engine-kv-cache-dtype-supported",
    "spec.engine.kvCacheDtype",
    "spec.engine.kvCacheDtype is not supported by spec.sglang.version (0.5.2: auto, fp8_e4m3, fp8_e5m2): pick a "
    "supported dtype or another sglang version",
    value=lambda spec: spec.engine.kv_cache_dtype,
    choices=lambda prof: prof.kv_cache_dtypes,
)


def _unroutable_policy(service: DisaggSpecService) -> Iterator[str]:
    policy = service.spec.router.policy
    if policy is not None and policy not in profile_of(service).router.discovery_policies:
        yield "spec.router.policy"


# Measured, not documented upstream: see RouterProfile.discovery_policies in disaggspec/sglang/profiles.py.
ROUTER_POLICY_SUPPORTED: Final = Rule(
    "router-policy-supported",
    ("spec.router.policy", "spec.sglang.version"),
    "spec.router.policy cannot route discovered workers with the router of spec.sglang.version (sglang-router 0.1.9 "
    "for 0.5.2 accepts cache_aware but then fails every request: its cache-aware trees never learn the workers it "
    "discovers): use round_robin, random or power_of_two, or leave it unset",
    _unroutable_policy,
    Cel(
        DisaggSpecServiceSpec,
        "!has(self.router) || !has(self.router.policy) || "
        + by_version(lambda prof: f"self.router.policy in {string_list(prof.router.discovery_policies)}"),
        ".router.policy",
    ),
)


# ---- options only newer releases have ----------------------------------------------------------------------------


def speculative_needs_release(
    rule_id: str,
    field: SpeculativeField[Any],
    message: str,
    *,
    in_use: Callable[[EffectiveSpeculative], bool],
    release_has: Callable[[SGLangProfile], bool],
) -> Rule:
    """A pool may only use `field` (a switch that is on, or an optional setting that is set) on a release that
    `release_has`."""

    def used(p: PoolName) -> str:
        return effective(p, field) if field.always_set else is_set(p, field)

    return effective_rule(
        rule_id,
        (f"spec.speculative.{field.wire}", "spec.sglang.version"),
        message,
        wire=field.wire,
        holds=lambda service, eff: not in_use(eff) or release_has(profile_of(service)),
        cel=lambda p: f"!{used(p)} || self.sglang.version in {versions_where(release_has)}",
    )


@dataclass(frozen=True)
class Option:
    """A spec field only some releases have."""

    path: str
    in_use: Callable[[DisaggSpecServiceSpec], bool]
    release_has: Callable[[SGLangProfile], bool]


def _common_parent(options: tuple[Option, ...]) -> str:
    """The fieldPath, relative to the spec node, of the longest path all `options` lie under."""
    parts = [option.path.split(".") for option in options]
    common = [names[0] for names in takewhile(lambda names: len(set(names)) == 1, zip(*parts, strict=False))]
    return spec_field(".".join(common))


def options_need_release(rule_id: str, message: str, options: tuple[Option, ...], *, cel_unused: str) -> Rule:
    """Each of `options` may only be used on a release that has it; `cel_unused` is CEL for "none is used". A
    violation points at each option in use."""

    def check(service: DisaggSpecService) -> Iterator[str]:
        profile = profile_of(service)
        for option in options:
            if option.in_use(service.spec) and not option.release_has(profile):
                yield option.path

    versions = versions_where(lambda prof: all(option.release_has(prof) for option in options))
    fields = (*(option.path for option in options), "spec.sglang.version")
    return Rule(
        rule_id,
        fields,
        message,
        check,
        # Reported at the options' common parent (the one option when there is one).
        Cel(DisaggSpecServiceSpec, f"{cel_unused} || self.sglang.version in {versions}", _common_parent(options)),
    )


# `--speculative-use-rejection-sampling` exists in 0.5.23 (sglang/srt/arg_groups/fields/spec.py:117-119), not in
# 0.5.2 (absent from its parser, sglang/srt/server_args.py:1535-1597).
REJECTION_SAMPLING_VERSION: Final = speculative_needs_release(
    "spec-rejection-sampling-version",
    REJECTION_SAMPLING,
    "rejectionSampling needs spec.sglang.version 0.5.23 (0.5.2 has no --speculative-use-rejection-sampling): turn "
    "it off or use 0.5.23",
    in_use=lambda eff: eff.rejection_sampling,
    release_has=lambda prof: prof.has_rejection_sampling,
)

# `--enable-multi-layer-eagle` exists in 0.5.23 (sglang/srt/arg_groups/fields/spec.py:230-236), not in 0.5.2.
MULTI_LAYER_VERSION: Final = speculative_needs_release(
    "spec-multi-layer-version",
    MULTI_LAYER,
    "multiLayer needs spec.sglang.version 0.5.23 (0.5.2 has no --enable-multi-layer-eagle): turn it off or use 0.5.23",
    in_use=lambda eff: eff.multi_layer,
    release_has=lambda prof: prof.has_multi_layer_eagle,
)

# `--speculative-draft-kv-cache-dtype` exists in 0.5.23 (sglang/srt/arg_groups/fields/spec.py:151-164) only, with
# every dtype of the API (a unit test asserts a release has all of them or none).
DRAFT_KV_DTYPE_VERSION: Final = speculative_needs_release(
    "spec-draft-kv-dtype-version",
    DRAFT_KV_CACHE_DTYPE,
    "draftKvCacheDtype needs spec.sglang.version 0.5.23 (0.5.2 has no --speculative-draft-kv-cache-dtype): remove it "
    "or use 0.5.23",
    in_use=lambda eff: eff.draft_kv_cache_dtype is not None,
    release_has=lambda prof: bool(prof.draft_kv_cache_dtypes),
)

# 0.5.23 sglang/srt/arg_groups/fields/disagg.py:59-64 (allocation policy), :72-80 (KV checksum),
# sglang/srt/environ.py:756 (sampling mask); none exists in 0.5.2.
_ENGINE_OPTIONS: Final = (
    Option(
        "spec.engine.decodeAllocationPolicy",
        lambda spec: spec.engine.decode_allocation_policy is not None,
        lambda prof: prof.has_decode_allocation_policy,
    ),
    Option(
        "spec.engine.kvChecksum", lambda spec: spec.engine.kv_checksum is not None, lambda prof: prof.has_kv_checksum
    ),
    Option(
        "spec.engine.disaggSamplingMask",
        lambda spec: spec.engine.disagg_sampling_mask is not None,
        lambda prof: prof.has_disagg_sampling_mask,
    ),
)
ENGINE_OPTION_VERSION: Final = options_need_release(
    "engine-option-version",
    "spec.engine.decodeAllocationPolicy, kvChecksum and disaggSamplingMask need spec.sglang.version 0.5.23: remove "
    "them or use 0.5.23",
    _ENGINE_OPTIONS,
    cel_unused="!(" + " || ".join(f"has({spec_ref(option.path)})" for option in _ENGINE_OPTIONS) + ")",
)

# 0.5.2 passes --disaggregation-ib-device unparsed to the mooncake engine (sglang/srt/disaggregation/mooncake/
# conn.py:279-283); 0.5.23 parses a per-GPU JSON map (sglang/srt/arg_groups/validation_hook.py:489-499).
IB_MAP_VERSION: Final = options_need_release(
    "transfer-rdma-ib-map-version",
    "spec.transfer.rdma.ibDevicesPerGpu needs spec.sglang.version 0.5.23 (0.5.2 takes one device or a comma list): "
    "use spec.transfer.rdma.ibDevices or 0.5.23",
    (
        Option(
            "spec.transfer.rdma.ibDevicesPerGpu",
            lambda spec: spec.transfer.rdma is not None and bool(spec.transfer.rdma.ib_devices_per_gpu),
            lambda prof: prof.per_gpu_ib_device_map,
        ),
    ),
    cel_unused="!has(self.transfer.rdma) || !has(self.transfer.rdma.ibDevicesPerGpu) || "
    "size(self.transfer.rdma.ibDevicesPerGpu) == 0",
)


# ---- the top-k rows prefill sends --------------------------------------------------------------------------------


def _topk_fits(service: DisaggSpecService, eff: EffectiveSpeculative) -> bool:
    """Prefill copies topk (x num_steps with multi-layer) entries into 16-wide rows (0.5.23
    sglang/srt/disaggregation/utils.py:468-473 and :650-657; eagle_disaggregation.py:58-60); more overflows at prefill.
    `spec.sglang.topkBufferWidth` models an image whose patch widens the rows. 0.5.2 has no fixed width: stock it
    sends no top-k rows, and the project's patch sizes them from topk (see profiles.PROFILE_0_5_2)."""
    width = service.spec.sglang.topk_buffer_width or profile_of(service).topk_buffer_width
    return width is None or eff.topk_entries <= width


def _topk_fits_cel(p: PoolName, prof: SGLangProfile) -> str:
    topk, steps = effective(p, EAGLE_TOPK), effective(p, NUM_STEPS)
    default = prof.topk_buffer_width if prof.topk_buffer_width is not None else _NO_WIDTH_LIMIT
    return (
        f"({effective(p, MULTI_LAYER)} ? {topk} * {steps} : {topk}) <= "
        f"(has(self.sglang.topkBufferWidth) ? self.sglang.topkBufferWidth : {default})"
    )


TOPK_BUFFER_WIDTH: Final = effective_rule(
    "spec-topk-buffer-width",
    (
        "spec.speculative.eagleTopk",
        "spec.speculative.numSteps",
        "spec.speculative.multiLayer",
        "spec.sglang.topkBufferWidth",
    ),
    "eagleTopk (times numSteps with multiLayer) must fit the top-k buffer prefill sends to decode (16 wide in SGLang "
    "0.5.23): lower spec.speculative.eagleTopk or numSteps, or set spec.sglang.topkBufferWidth if your image's patch "
    "widens the buffer",
    wire="eagleTopk",
    holds=_topk_fits,
    cel=lambda p: by_version(lambda prof: _topk_fits_cel(p, prof)),
)
