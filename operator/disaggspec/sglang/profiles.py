"""Per-version SGLang profiles: what each supported release's server accepts, derived from its released wheel.

A profile is a set of facts read from `sglang==<version>` (`pip download --no-deps sglang==<version>`): the
speculative algorithms and transfer backends its parser accepts, which PD/speculative flags exist, the width of the
top-k metadata buffer that carries the first draft proposal from prefill to decode, and the full set of option strings
the server-args parser registers (`_flags_*.py`, used to reject unknown `extraArgs` and, later, for conformance tests).
Citations are `file:line` inside each wheel. The validation table and the renderer read profiles; nothing here imports
SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from disaggspec.sglang import _flags_0_5_2, _flags_0_5_23

SGLangVersion = Literal["0.5.2", "0.5.23"]

# 0.5.23 allocates the top-k metadata rows with a fixed width of 16 (sglang/srt/disaggregation/utils.py:468-473,
# `torch.zeros((size, 16), ...)`, and the comment at :650 "speculative_eagle_topk should not be greater than 16
# currently"), and copies topk entries into them, so a wider top-k fails at prefill.
TOPK_BUFFER_WIDTH: Final = 16


@dataclass(frozen=True)
class SGLangProfile:
    """What one SGLang release accepts; every field is a fact about that release's wheel."""

    version: SGLangVersion
    speculative_algorithms: frozenset[str]
    """Values `--speculative-algorithm` accepts (built-ins only)."""
    transfer_backends: frozenset[str]
    """Values `--disaggregation-transfer-backend` accepts."""
    kv_cache_dtypes: frozenset[str]
    """Values `--kv-cache-dtype` accepts."""
    draft_kv_cache_dtypes: frozenset[str]
    """Values `--speculative-draft-kv-cache-dtype` accepts; empty when the flag does not exist."""
    paged_topk_attention_backends: frozenset[str]
    """Attention backends that support eagle topk > 1 together with page size > 1."""
    has_decode_tp_dp: bool
    """Whether `--disaggregation-decode-tp`, `--disaggregation-decode-dp` and `--disaggregation-prefill-pp` exist."""
    has_rejection_sampling: bool
    """Whether `--speculative-use-rejection-sampling` exists."""
    has_multi_layer_eagle: bool
    """Whether `--enable-multi-layer-eagle` exists."""
    has_decode_allocation_policy: bool
    """Whether `--disaggregation-decode-allocation-policy` exists."""
    has_kv_checksum: bool
    """Whether `--disaggregation-enable-kv-checksum` exists."""
    has_disagg_sampling_mask: bool
    """Whether the `SGLANG_ENABLE_DISAGG_SAMPLING_MASK` environment switch exists."""
    per_gpu_ib_device_map: bool
    """Whether `--disaggregation-ib-device` accepts a per-GPU JSON map (otherwise one device or a comma list)."""
    topk_buffer_width: int | None
    """Width of the top-k metadata rows sent from prefill to decode, which eagle topk (x num steps) must fit; None
    when the rows are sized from topk, so there is no fixed limit."""
    flags: frozenset[str]
    """Every option string the server-args parser registers."""

    def knows_flag(self, flag: str) -> bool:
        """Whether `flag` (`--name` or `--name=value`) is an option of this release's server."""
        return flag.split("=", 1)[0] in self.flags


PROFILE_0_5_2: Final = SGLangProfile(
    version="0.5.2",
    # sglang/srt/server_args.py:1536-1540 (`choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"]`); NEXTN is rewritten
    # to EAGLE at :719-721.
    speculative_algorithms=frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"}),
    # sglang/srt/server_args.py:107 (DISAGG_TRANSFER_BACKEND_CHOICES), used at :2118-2123.
    transfer_backends=frozenset({"mooncake", "nixl", "ascend", "fake"}),
    # sglang/srt/server_args.py:1027-1032.
    kv_cache_dtypes=frozenset({"auto", "fp8_e5m2", "fp8_e4m3"}),
    draft_kv_cache_dtypes=frozenset(),
    # sglang/srt/server_args.py:784-792: topk > 1 with page_size > 1 only on flashinfer.
    paged_topk_attention_backends=frozenset({"flashinfer"}),
    # sglang/srt/server_args.py:2131-2148 (and the prefill-side defaults at :827-834).
    has_decode_tp_dp=True,
    # Neither flag is registered by the 0.5.2 parser (absent from _flags_0_5_2.FLAGS).
    has_rejection_sampling=False,
    has_multi_layer_eagle=False,
    has_decode_allocation_policy=False,
    has_kv_checksum=False,
    has_disagg_sampling_mask=False,
    # sglang/srt/server_args.py:2149-2155 documents a single device or a comma list; the string reaches the mooncake
    # transfer engine unparsed (disaggregation/mooncake/conn.py:279-283, mooncake/transfer_engine.py:24-28).
    per_gpu_ib_device_map=False,
    # Stock 0.5.2 sends no top-k rows at all (sglang/srt/disaggregation/utils.py:100-125 allocates none; decode mocks
    # them), and the project's patch sizes them max(16, speculative_eagle_topk) on both sides
    # (images/sglang/patches/0.5.2/0002-scheduler-size-hidden-row-from-draft.patch), so no fixed width applies.
    topk_buffer_width=None,
    flags=_flags_0_5_2.FLAGS,
)

PROFILE_0_5_23: Final = SGLangProfile(
    version="0.5.23",
    # sglang/srt/arg_groups/fields/spec.py:31-34 (free string, builtins listed in the help) and
    # sglang/srt/speculative/spec_info.py:32-47 (the enum; NEXTN is a reserved alias of EAGLE, :60-61).
    speculative_algorithms=frozenset(
        {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO", "FROZEN_KV_MTP"}
    ),
    # sglang/srt/arg_groups/choices.py:122-129, used at arg_groups/fields/disagg.py:65-71.
    transfer_backends=frozenset({"mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"}),
    # sglang/srt/arg_groups/fields/model.py:197-221.
    kv_cache_dtypes=frozenset({"auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "fp4_mx_block16", "mxfp8", "nvfp4"}),
    # sglang/srt/arg_groups/fields/spec.py:151-164.
    draft_kv_cache_dtypes=frozenset({"auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"}),
    # sglang/srt/arg_groups/speculative_hook.py:1268-1282 (_PAGE_TREE_SPEC_BACKENDS).
    paged_topk_attention_backends=frozenset({"flashinfer", "fa3", "triton"}),
    # Removed after 0.5.9: absent from _flags_0_5_23.FLAGS and from arg_groups/fields/disagg.py.
    has_decode_tp_dp=False,
    # sglang/srt/arg_groups/fields/spec.py:117-119.
    has_rejection_sampling=True,
    # sglang/srt/arg_groups/fields/spec.py:230-236.
    has_multi_layer_eagle=True,
    # sglang/srt/arg_groups/fields/disagg.py:59-64.
    has_decode_allocation_policy=True,
    # sglang/srt/arg_groups/fields/disagg.py:72-80.
    has_kv_checksum=True,
    # sglang/srt/environ.py:756, read at disaggregation/utils.py:414.
    has_disagg_sampling_mask=True,
    # sglang/srt/arg_groups/fields/disagg.py:84-87 and arg_groups/validation_hook.py:489-499 (per-GPU JSON mapping).
    per_gpu_ib_device_map=True,
    topk_buffer_width=TOPK_BUFFER_WIDTH,
    flags=_flags_0_5_23.FLAGS,
)

PROFILES: Final[dict[SGLangVersion, SGLangProfile]] = {p.version: p for p in (PROFILE_0_5_2, PROFILE_0_5_23)}


def profile_for(version: SGLangVersion) -> SGLangProfile:
    """The profile of a supported SGLang version (the API's `spec.sglang.version` enum guarantees it exists)."""
    return PROFILES[version]
