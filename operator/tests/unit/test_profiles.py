"""The SGLang profiles agree with their own flag inventories and carry the facts the rules rely on."""

from __future__ import annotations

from typing import get_args

import pytest

from disaggspec.api.v1alpha1 import Algorithm, KvCacheDtype, TransferBackend
from disaggspec.sglang.profiles import PROFILE_0_5_2, PROFILE_0_5_23, PROFILES, SGLangProfile


def test_supported_versions() -> None:
    assert tuple(PROFILES) == ("0.5.2", "0.5.23")


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.version)
def test_feature_flags_match_the_parser(profile: SGLangProfile) -> None:
    flags = profile.flags
    assert profile.has_decode_tp_dp == ({"--disaggregation-decode-tp", "--disaggregation-decode-dp"} <= flags)
    assert profile.has_decode_tp_dp == ("--disaggregation-prefill-pp" in flags)
    assert profile.has_rejection_sampling == ("--speculative-use-rejection-sampling" in flags)
    assert profile.has_multi_layer_eagle == ("--enable-multi-layer-eagle" in flags)
    assert profile.has_decode_allocation_policy == ("--disaggregation-decode-allocation-policy" in flags)
    assert profile.has_kv_checksum == ("--disaggregation-enable-kv-checksum" in flags)
    assert bool(profile.draft_kv_cache_dtypes) == ("--speculative-draft-kv-cache-dtype" in flags)


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.version)
def test_every_profile_has_the_pd_and_speculative_flags(profile: SGLangProfile) -> None:
    for flag in (
        "--disaggregation-mode",
        "--disaggregation-bootstrap-port",
        "--disaggregation-ib-device",
        "--disaggregation-transfer-backend",
        "--speculative-algorithm",
        "--speculative-draft-model-path",
        "--speculative-draft-model-revision",
        "--speculative-num-steps",
        "--speculative-eagle-topk",
        "--speculative-num-draft-tokens",
        "--model-path",
        "--tp-size",
        "--enable-metrics",
    ):
        assert profile.knows_flag(flag), flag
    assert {"EAGLE", "EAGLE3", "NEXTN"} <= profile.speculative_algorithms
    assert "--help" not in profile.flags


def test_version_differences() -> None:
    assert PROFILE_0_5_2.transfer_backends == {"mooncake", "nixl", "ascend", "fake"}
    assert PROFILE_0_5_23.transfer_backends - PROFILE_0_5_2.transfer_backends == {"mori", "mooncake_tcp"}
    assert PROFILE_0_5_2.paged_topk_attention_backends == {"flashinfer"}
    assert PROFILE_0_5_23.paged_topk_attention_backends == {"flashinfer", "fa3", "triton"}
    assert not PROFILE_0_5_2.per_gpu_ib_device_map and PROFILE_0_5_23.per_gpu_ib_device_map


def test_every_api_algorithm_and_backend_is_known_to_some_release() -> None:
    # The algorithm enum needs no per-version rule: every supported release accepts all of it.
    algorithms = set(get_args(Algorithm))
    assert all(algorithms <= p.speculative_algorithms for p in PROFILES.values())
    backends = set(get_args(TransferBackend))
    assert backends == set().union(*(p.transfer_backends for p in PROFILES.values()))
    assert set(get_args(KvCacheDtype)) == set().union(*(p.kv_cache_dtypes for p in PROFILES.values()))


def test_topk_buffer_width() -> None:
    assert PROFILE_0_5_23.topk_buffer_width == 16
    assert PROFILE_0_5_2.topk_buffer_width is None  # sized from topk by the project's patch


def test_knows_flag_with_value() -> None:
    assert PROFILE_0_5_23.knows_flag("--chunked-prefill-size=8192")
    assert not PROFILE_0_5_23.knows_flag("--chunked-prefill")
