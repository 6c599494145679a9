"""`spec.<pool>.parallelism` (issue 30): the flags each release gets, where they sit in the command, the layout hints
derived from the peer pool, and that a service without the block renders exactly as before. What each release's real
ServerArgs makes of these commands is images/sglang/tests/test_conformance_parallelism.py."""

from __future__ import annotations

from typing import Any

import pytest

from disaggspec.api import parse_service
from disaggspec.sglang.args import server_args
from disaggspec.sglang.flag_policy import FlagClass, classify
from disaggspec.sglang.parallelism import parallelism_args
from disaggspec.sglang.profiles import PROFILES
from disaggspec.validation import validate
from disaggspec.validation.parallelism import CHECKS_DECODE_CHUNK, DENSE_TP_MAY_EQUAL_TP, PD_DISPATCH_METHOD
from tests.unit.dss_cases import edited

FULL: dict[str, Any] = {
    "dataParallelAttention": {"size": 8},
    "expertParallel": {"size": 8, "backend": "deepep", "deepepMode": "normal"},
    "denseMlpTpSize": 1,
    "dpLmHead": True,
    "twoBatchOverlap": True,
    "eplb": {"redundantExperts": 32},
}


def _service(version: str, prefill: dict[str, Any] | None, decode: dict[str, Any] | None) -> Any:
    edits: dict[str, Any] = {"spec.sglang.version": version}
    for role, par in (("prefill", prefill), ("decode", decode)):
        edits[f"spec.{role}"] = {"tensorParallelSize": 8} | ({"parallelism": par} if par is not None else {})
    service = parse_service(edited(edits))
    assert validate(service) == []
    return service


def _after_tp(argv: list[str]) -> list[str]:
    """The flags between --tp-size N and --host: the parallelism of a one-node pool."""
    return argv[argv.index("--tp-size") + 2 : argv.index("--host")]


@pytest.mark.parametrize(
    ("version", "dp_flags"),
    [("0.5.2", ["--enable-dp-attention", "--dp-size", "8"]), ("0.5.23", ["--attn-dp-size", "8"])],
)
def test_each_release_gets_its_own_spelling_right_after_tp(version: str, dp_flags: list[str]) -> None:
    service = _service(version, FULL, None)
    own = [
        *dp_flags,
        *["--ep-size", "8", "--moe-a2a-backend", "deepep", "--deepep-mode", "normal", "--moe-dense-tp-size", "1"],
        *["--enable-dp-lm-head", "--enable-two-batch-overlap", "--enable-eplb", "--ep-num-redundant-experts", "32"],
    ]
    hints = ["--disaggregation-decode-tp", "8", "--disaggregation-decode-dp", "1"] if version == "0.5.2" else []
    assert _after_tp(server_args(service, "prefill")) == own + hints
    assert _after_tp(server_args(service, "decode")) == []
    for flag in own + hints:
        if flag.startswith("--"):
            option = PROFILES[version].option(flag)  # type: ignore[index]
            assert option is not None, flag
            policy = classify(option.dest)
            assert policy is not None and policy.cls is FlagClass.OWNED, flag


def test_0_5_2_hints_follow_the_decode_pool_and_only_with_dp_attention() -> None:
    decode = {"dataParallelAttention": {"size": 4}, "expertParallel": {"size": 8}}
    service = _service("0.5.2", {"expertParallel": {"size": 8}}, decode)
    prefill = _after_tp(server_args(service, "prefill"))
    assert prefill[-4:] == ["--disaggregation-decode-tp", "8", "--disaggregation-decode-dp", "4"]
    assert _after_tp(server_args(service, "decode"))[-1] == "--prefill-round-robin-balance"
    # No DP attention anywhere: SGLang's defaults are right, nothing is derived.
    plain = _service("0.5.2", {"expertParallel": {"size": 8}}, {"expertParallel": {"size": 4}})
    assert "--disaggregation-decode-tp" not in server_args(plain, "prefill")
    assert "--prefill-round-robin-balance" not in server_args(plain, "decode")


def test_without_the_block_nothing_is_rendered() -> None:
    for version in PROFILES:
        bare = _service(version, None, None)
        empty = _service(version, {}, {})
        for role in ("prefill", "decode"):
            assert server_args(bare, role) == server_args(empty, role)  # type: ignore[arg-type]
        assert parallelism_args(None, PROFILES[version]) == []  # type: ignore[index]


def test_per_release_tables_cover_the_supported_releases() -> None:
    for table in (DENSE_TP_MAY_EQUAL_TP, CHECKS_DECODE_CHUNK, PD_DISPATCH_METHOD):
        assert set(table) == set(PROFILES)


def test_owned_extra_args_name_the_typed_field() -> None:
    service = parse_service(edited({"spec.decode.extraArgs": ["--moe-a2a-backend", "deepep"]}))
    [violation] = validate(service)
    assert violation.rule == "pool-extra-args-owned"
    assert violation.detail == "--moe-a2a-backend is rendered from spec.<pool>.parallelism.expertParallel.backend"
    hint = parse_service(
        edited({"spec.sglang.version": "0.5.2", "spec.prefill.extraArgs": ["--disaggregation-decode-dp=2"]})
    )
    [violation] = validate(hint)
    assert violation.detail is not None and "the operator, from the peer pool" in violation.detail
