"""extraArgs against the release's parser (issue 15 A): the option classification is total over every supported
release, the argv reader agrees with argparse on what it accepts, the rules refuse each hole of the adversarial corpus
with a detail that names the option and the fix, and the two legitimate specs pass and render."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from disaggspec.api import parse_service, pool
from disaggspec.rejection import check
from disaggspec.render.names import fingerprint
from disaggspec.sglang import flag_policy
from disaggspec.sglang.args import server_args
from disaggspec.sglang.argv import parse
from disaggspec.sglang.flag_policy import FlagClass, classify
from disaggspec.sglang.options import Option
from disaggspec.sglang.profiles import PROFILE_0_5_2, PROFILE_0_5_23, PROFILES, SGLangProfile
from disaggspec.validation import OWNED_FLAGS, is_owned_flag, validate
from disaggspec.validation.extra_args import _OWNED_FLAG_RE, TYPED_FIELDS
from e2e.adversarial.corpus import ADVERSARIAL, ARITHMETIC, LEGITIMATE, PER_POOL, SIDE_DOOR
from tests.unit.dss_cases import EXAMPLES, VALID_CASES, edited

# ---- the classification is total ---------------------------------------------------------------------------------


def _dests(profile: SGLangProfile) -> set[str]:
    return {option.dest for option in profile.options.values()}


ALL_DESTS = set().union(*(_dests(p) for p in PROFILES.values()))


@pytest.mark.parametrize("profile", PROFILES.values(), ids=lambda p: p.version)
def test_every_dest_of_every_release_is_classified(profile: SGLangProfile) -> None:
    unclassified = sorted(dest for dest in _dests(profile) if classify(dest) is None)
    assert unclassified == [], f"classify these sglang {profile.version} dests in sglang/flag_policy.py: {unclassified}"


def test_no_stale_entry_or_family() -> None:
    explicit = [
        *flag_policy.OWNED,
        *flag_policy.FORBIDDEN,
        *flag_policy.TYPED_MUST_MATCH,
        *flag_policy.PER_POOL_SAFE,
        *flag_policy.MUST_MATCH,
    ]
    stale = sorted(set(explicit) - ALL_DESTS)
    assert stale == [], f"entries no supported release has (remove them): {stale}"
    assert len(explicit) == len(set(explicit)), "a dest is listed in two tables"
    unused = [
        prefix
        for prefix, policy in flag_policy.FAMILIES
        if not any(d.startswith(prefix) and d not in explicit and classify(d) is policy for d in ALL_DESTS)
    ]
    assert unused == [], f"families that decide no dest (remove them): {unused}"


def test_each_class_carries_what_it_needs() -> None:
    for dest in ALL_DESTS:
        policy = classify(dest)
        assert policy is not None
        if policy.cls is FlagClass.OWNED:
            assert policy.field, dest
        if policy.cls is FlagClass.FORBIDDEN:
            assert policy.reason, dest
        if policy.check is not None:
            assert policy.cls is FlagClass.PER_POOL_SAFE, dest
    for profile in PROFILES.values():
        for option in profile.options.values():
            policy = classify(option.dest)
            if policy is not None and policy.check is not None:  # values the rules convert with int()
                assert option.value == "int" and option.nargs is None, option


def test_the_two_legitimate_options_are_classified_as_issue_15_asks() -> None:
    token_map = classify("speculative_token_map")
    assert token_map is not None and token_map.cls is FlagClass.MUST_MATCH
    assert token_map.field == "spec.speculative.tokenMap"
    polling = classify("disaggregation_decode_polling_interval")
    assert polling is not None and polling.cls is FlagClass.PER_POOL_SAFE


def _renderable() -> list[Any]:
    sources = [yaml.safe_load(path.read_text()) for path in EXAMPLES] + [case.manifest() for case in VALID_CASES]
    typed = edited(
        {
            "spec.speculative.tokenMap": "m/freq.pt",
            "spec.engine": {"contextLength": 4096, "quantization": "fp8", "tokenizerPath": "t/t", "chatTemplate": "c"},
        }
    )
    return [parse_service(obj) for obj in [*sources, typed]]


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_every_rendered_flag_is_owned_or_typed_must_match(role: str) -> None:
    # Otherwise extraArgs could set a rendered option a second time, on one pool only.
    for service in _renderable():
        profile = PROFILES[service.spec.sglang.version]
        argv = server_args(service, role)  # type: ignore[arg-type]
        extra = len(service.spec.engine.extra_args) + len(pool(service.spec, role).extra_args)  # type: ignore[arg-type]
        for flag in [a for a in argv[3 : len(argv) - extra] if a.startswith("--")]:
            option = profile.option(flag)
            assert option is not None, f"{flag} is unknown to sglang {profile.version}"
            policy = classify(option.dest)
            assert policy is not None, flag
            if option.dest in flag_policy.TYPED_MUST_MATCH:
                continue
            if option.dest in flag_policy.MULTI_NODE:
                # Rendered for a multi-node pool only, and refused anywhere in extraArgs.
                assert pool(service.spec, role).nodes_per_instance > 1, flag  # type: ignore[arg-type]
                assert policy.cls is FlagClass.FORBIDDEN, flag
                continue
            assert policy.cls is FlagClass.OWNED, f"{flag} is rendered but not OWNED"
            # 0.5.2's --dp-size is OWNED there, a forbidden replica count on 0.5.23: not in the release-blind pattern.
            assert is_owned_flag(flag) or flag == "--dp-size", f"the CEL pattern misses {flag}"


def test_typed_must_match_fields_are_the_rules_fields() -> None:
    fields = {policy.field for policy in flag_policy.TYPED_MUST_MATCH.values()}
    assert fields == set(TYPED_FIELDS)
    assert all(p.cls is FlagClass.MUST_MATCH for p in flag_policy.TYPED_MUST_MATCH.values())


def _owned_in(profile: SGLangProfile, flag: str) -> bool:
    option = profile.option(flag)
    assert option is not None
    policy = classify(option.dest)
    return policy is not None and policy.cls is FlagClass.OWNED


def test_cel_pattern_is_exactly_the_owned_spellings() -> None:
    # A spelling whose dest is OWNED in one release and not in another (--dp-size: 0.5.2's DP-attention size, 0.5.23's
    # data-parallel replicas) stays out of the release-blind pattern; the Python rule refuses it by dest.
    mixed = {
        flag
        for flag in set().union(*(p.flags for p in PROFILES.values()))
        if len({_owned_in(p, flag) for p in PROFILES.values() if flag in p.flags}) > 1
    }
    assert mixed == {"--dp-size", "--data-parallel-size"}
    for profile in PROFILES.values():
        for flag in profile.flags:
            owned = _owned_in(profile, flag) and flag not in mixed
            # Never stricter than the Python rules (the API server would refuse what they accept), and every owned
            # spelling of every release is in it.
            assert is_owned_flag(flag) == owned, flag
            assert is_owned_flag(f"{flag}=x") == owned, flag
    assert "--nccl-init-addr" not in OWNED_FLAGS and "--speculative-draft-model" in OWNED_FLAGS
    # The API server estimates a regex's cost from its length (times 64 elements of 1024 characters, per list).
    assert len(_OWNED_FLAG_RE) < 1500


# ---- the argv reader ---------------------------------------------------------------------------------------------


def _problems(profile: SGLangProfile, tokens: list[str]) -> list[tuple[int, str]]:
    return [(p.index, p.problem) for p in parse(tokens, profile.options, profile.aliases)[1]]


@pytest.mark.parametrize(
    ("tokens", "index", "says"),
    [
        (["-h"], 0, "single-dash"),
        (["-"], 0, "lone '-'"),
        (["--"], 0, "ends the options"),
        (["model"], 0, "positional"),
        (["--max-running-requests", "8", "9"], 2, "positional"),
        (["--chunked-prefill"], 0, "not an option"),
        (["--chunked-prefill=8"], 0, "not an option"),
        (["--enable-metrics-for-all-schedulers=1"], 0, "takes no value"),
        (["--chunked-prefill-size"], 0, "needs 1 value"),
        (["--load-format", "--skip-tokenizer-init"], 0, "starts with '-'"),
        (["--chunked-prefill-size=4096 --tp-size=2"], 0, "not a valid int"),
        (["--mem-fraction-static", "lots"], 1, "not a valid float"),
        (["--tokenizer-mode", "fastest"], 1, "not one of the choices"),
        (["--preferred-sampling-params", "{bad"], 1, "not a valid json"),
        (["--cuda-graph-bs-prefill"], 0, "needs 1 value"),
        (["--cuda-graph-bs-prefill", "1", "x"], 2, "not a valid int"),
    ],
)
def test_reader_refuses_what_argparse_refuses_or_misreads(tokens: list[str], index: int, says: str) -> None:
    problems = _problems(PROFILE_0_5_23, tokens)
    assert problems and problems[0][0] == index and says in problems[0][1], problems


def test_reader_finds_options_their_values_and_canonical_spelling() -> None:
    tokens = ["--ep", "2", "--chunked-prefill-size", "-1", "--cuda-graph-bs-prefill", "1", "2", "--no-dllm-fdfo"]
    parsed, problems = parse(tokens, PROFILE_0_5_23.options, PROFILE_0_5_23.aliases)
    assert problems == []
    assert [(p.index, p.canonical, p.option.dest, p.values) for p in parsed] == [
        (0, "--ep-size", "ep_size", ((1, "2"),)),
        (2, "--chunked-prefill-size", "chunked_prefill_size", ((3, "-1"),)),
        (4, "--cuda-graph-bs-prefill", "cuda_graph_bs_prefill", ((5, "1"), (6, "2"))),
        (7, "--dllm-fdfo", "dllm_fdfo", ()),
    ]


def test_releases_differ_where_their_parsers_do() -> None:
    assert _problems(PROFILE_0_5_2, ["--cuda-graph-bs", "1", "2"]) == []
    assert "not an option" in _problems(PROFILE_0_5_23, ["--cuda-graph-bs", "1", "2"])[0][1]
    assert _problems(PROFILE_0_5_23, ["--disaggregation-decode-polling-interval", "4"]) == []
    assert _problems(PROFILE_0_5_2, ["--disaggregation-decode-polling-interval", "4"])


_CONVERTERS: Mapping[str | None, Any] = {"int": int, "float": float, "json": json.loads, "str": str, "other": str}


def _argparse_twin(options: Mapping[str, Option], aliases: Mapping[str, str]) -> argparse.ArgumentParser:
    """An argparse parser rebuilt from the table, as SGLang configures it but without abbreviations."""
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    spellings: dict[str, list[str]] = {}
    for flag, canonical in aliases.items():
        spellings.setdefault(canonical, []).append(flag)
    for canonical, option in options.items():
        names = sorted(spellings.get(canonical, [canonical]), key=lambda f: f != canonical)
        if any(n.startswith("--no-") for n in names if n != canonical):
            names = [canonical]  # BooleanOptionalAction adds its --no- spelling itself
            parser.add_argument(*names, dest=option.dest, action=argparse.BooleanOptionalAction)
        elif option.nargs == 0:
            parser.add_argument(*names, dest=option.dest, action="store_true")
        else:
            kwargs: dict[str, Any] = {"dest": option.dest, "type": _CONVERTERS[option.value]}
            if option.nargs is not None:
                kwargs["nargs"] = option.nargs
            if option.choices and option.value != "other":
                kwargs["choices"] = option.choices
            parser.add_argument(*names, **kwargs)
    return parser


TWIN_CORPUS = [
    ["--chunked-prefill-size", "-1", "--mem-fraction-static", "0.8"],
    ["--cuda-graph-bs-prefill", "1", "2", "4", "--enable-mixed-chunk"],
    ["--ep", "2", "--decode-context-parallel-size=2", "--no-dllm-fdfo"],
    ["--tokenizer-mode", "slow", '--json-model-override-args={"a": 1}'],
    ["--preferred-sampling-params", '{"temperature": 0}', "--log-level", "debug"],
    ["--nccl-port", "9000", "--grpc-port=9001"],
    ["--chunked-prefill-size=4096 --tp-size=2"],
    ["--tokenizer-mode", "fastest"],
    ["--max-running-requests", "8", "9"],
    ["--enable-mixed-chunk=1"],
    ["--load-format"],
    ["--chunked-prefill", "8"],
]


@pytest.mark.parametrize("tokens", TWIN_CORPUS, ids=lambda t: " ".join(t)[:40])
def test_what_the_reader_accepts_argparse_accepts_alike(tokens: list[str]) -> None:
    profile = PROFILE_0_5_23
    parsed, problems = parse(tokens, profile.options, profile.aliases)
    twin = _argparse_twin(profile.options, profile.aliases)
    try:
        namespace, unknown = twin.parse_known_args(tokens)
        accepted = unknown == []
    except (argparse.ArgumentError, SystemExit):
        accepted = False
    assert accepted == (problems == []), (problems, accepted)
    if accepted:
        for found in parsed:
            assert getattr(namespace, found.option.dest) != twin.get_default(found.option.dest), found.flag


# ---- the rules ---------------------------------------------------------------------------------------------------


def _extra_args_edits(edits: Mapping[str, Any]) -> bool:
    return any(key.endswith("extraArgs") for key in edits)


HOLES = [s for s in ADVERSARIAL if s.cls in (SIDE_DOOR, PER_POOL, ARITHMETIC) and _extra_args_edits(s.edits)]


@pytest.mark.parametrize("spec", HOLES, ids=lambda s: s.id)
def test_every_extra_args_hole_of_the_corpus_is_refused_with_its_option_named(spec: Any) -> None:
    _, rejection = check(spec.manifest())
    ours = [p for p in rejection.problems if "extra-args" in p.rule]
    assert ours, f"{spec.id} admitted: {rejection.text}"
    for problem in ours:
        assert re.fullmatch(r"spec\.(prefill|decode|engine)\.extraArgs\[\d+\]", problem.field), problem.field
        assert problem.detail and problem.detail in rejection.text


def test_corpus_holes_are_the_expected_number() -> None:
    # 9 side-door, 24 per-pool-compute and 17 arithmetic entries go through extraArgs (issue 15's corpus).
    assert len(HOLES) == 50


def test_details_name_the_fix() -> None:
    service = parse_service(
        edited(
            {
                "spec.prefill.extraArgs": ["--tokenizer-path", "t", "--pp-size", "2", "--tokenizer-mode", "slow"],
                "spec.decode.extraArgs": ["--context-length", "2048"],
            }
        )
    )
    got = {(v.rule, v.field, v.detail) for v in validate(service)}
    move = "must be identical on both pools: move it to spec.engine.extraArgs"
    assert got == {
        (
            "pool-extra-args-must-match",
            "spec.prefill.extraArgs[0]",
            f"--tokenizer-path {move} or the typed field spec.engine.tokenizerPath",
        ),
        (
            "pool-extra-args-must-match",
            "spec.decode.extraArgs[0]",
            f"--context-length {move} or the typed field spec.engine.contextLength",
        ),
        (
            "pool-extra-args-forbidden",
            "spec.prefill.extraArgs[2]",
            "--pp-size: " + flag_policy.FORBIDDEN["pp_size"].reason,  # type: ignore[operator]
        ),
        (
            "pool-extra-args-must-match",
            "spec.prefill.extraArgs[4]",
            f"--tokenizer-mode {move}",
        ),
    }


def test_engine_extra_args_take_must_match_but_not_owned_or_forbidden() -> None:
    ok = parse_service(edited({"spec.engine.extraArgs": ["--load-format", "dummy", "--enable-fp32-lm-head"]}))
    assert validate(ok) == []
    bad = parse_service(edited({"spec.engine.extraArgs": ["--enable-fp32-lm-head", "--model", "x", "--pp-size", "2"]}))
    assert [(v.rule, v.field) for v in validate(bad)] == [
        ("pool-extra-args-owned", "spec.engine.extraArgs[1]"),
        ("pool-extra-args-forbidden", "spec.engine.extraArgs[3]"),
    ]


def test_a_shared_port_is_checked_on_each_pool_once() -> None:
    service = parse_service(edited({"spec.engine.extraArgs": ["--nccl-port", "8998"]}))
    assert [(v.rule, v.field) for v in validate(service)] == [("pool-extra-args-port", "spec.engine.extraArgs[0]")]
    service = parse_service(edited({"spec.engine.extraArgs": ["--nccl-port", "9000"]}))
    assert validate(service) == []


def test_a_parallel_size_is_checked_against_each_pool() -> None:
    args = ["--moe-dp-size", "2"]
    service = parse_service(edited({"spec.engine.extraArgs": args, "spec.prefill.tensorParallelSize": 2}))
    violations = validate(service)
    assert [(v.rule, v.field) for v in violations] == [("pool-extra-args-parallel-size", "spec.engine.extraArgs[0]")]
    assert violations[0].detail == "--moe-dp-size 2 does not divide spec.decode.tensorParallelSize 1"


def test_quantization_of_another_release_is_refused() -> None:
    # mxfp8 is a --quantization choice of 0.5.23 only (the generated tables).
    assert "mxfp8" in PROFILE_0_5_23.options["--quantization"].choices
    assert "mxfp8" not in PROFILE_0_5_2.options["--quantization"].choices
    assert validate(parse_service(edited({"spec.engine.quantization": "mxfp8"}))) == []
    old = edited({"spec.engine.quantization": "mxfp8", "spec.sglang.version": "0.5.2"})
    assert [v.rule for v in validate(parse_service(old))] == ["engine-quantization-supported"]


# ---- the legitimate specs ----------------------------------------------------------------------------------------


def test_decode_polling_interval_passes_in_decode_extra_args() -> None:
    spec = next(s for s in LEGITIMATE if s.id == "legit-decode-polling-interval")
    service, rejection = check(spec.manifest())
    assert not rejection, rejection.text
    assert service is not None
    assert server_args(service, "decode")[-2:] == ["--disaggregation-decode-polling-interval", "4"]


def test_token_map_renders_on_both_pools_from_the_typed_field_or_engine_extra_args() -> None:
    token_map = "thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt"
    spec = next(s for s in LEGITIMATE if s.id == "legit-speculative-token-map")
    _, rejection = check(spec.manifest())
    # As the corpus writes it (the same map in both pools' extraArgs) it is refused, pointing at the two ways in.
    assert [p.detail for p in rejection.problems] == [
        "--speculative-token-map must be identical on both pools: move it to spec.engine.extraArgs or the typed "
        "field spec.speculative.tokenMap"
    ] * 2
    for edits in (
        {"spec.speculative.tokenMap": token_map},
        {"spec.engine.extraArgs": ["--speculative-token-map", token_map]},
    ):
        manifest = spec.manifest()
        manifest["spec"]["prefill"].pop("extraArgs")
        manifest["spec"]["decode"].pop("extraArgs")
        service = parse_service(edited(edits, base=manifest))
        assert validate(service) == []
        for role in ("prefill", "decode"):
            argv = server_args(service, role)
            assert argv[argv.index("--speculative-token-map") + 1] == token_map


def test_engine_extra_args_render_after_the_typed_flags_and_before_the_pool() -> None:
    service = parse_service(
        edited(
            {
                "spec.engine": {
                    "contextLength": 8192,
                    "extraArgs": ["--load-format", "dummy", "--chunked-prefill-size", "4096"],
                },
                "spec.decode.extraArgs": ["--chunked-prefill-size", "8192"],
            }
        )
    )
    argv = server_args(service, "decode")
    assert argv[-6:] == ["--load-format", "dummy", "--chunked-prefill-size", "4096", "--chunked-prefill-size", "8192"]
    assert argv.index("--context-length") < argv.index("--speculative-algorithm") < argv.index("--load-format")


def test_a_typed_must_match_option_is_set_once() -> None:
    both = edited({"spec.engine": {"contextLength": 4096, "extraArgs": ["--context-length", "8192"]}})
    violations = validate(parse_service(both))
    assert [(v.rule, v.field, v.detail) for v in violations] == [
        (
            "pool-extra-args-must-match",
            "spec.engine.extraArgs[0]",
            "--context-length is set by spec.engine.contextLength too: keep one",
        )
    ]


def test_shared_must_match_settings_are_in_the_fingerprint_and_pool_ones_are_not() -> None:
    base = fingerprint(parse_service(edited({})))
    for edits in (
        {"spec.engine.extraArgs": ["--tokenizer-mode", "slow"]},
        {"spec.engine.contextLength": 8192},
        {"spec.speculative.tokenMap": "m/freq.pt"},
    ):
        assert fingerprint(parse_service(edited(edits))) != base, edits
    assert fingerprint(parse_service(edited({"spec.decode.extraArgs": ["--chunked-prefill-size", "8"]}))) == base
