"""The rule table, case by case: every invalid case trips exactly its rule with the rule's message; valid cases trip
none; every rule has a failing case; update-only rules reject changes to immutable fields."""

from __future__ import annotations

import re
from typing import get_args

import pydantic
import pytest
import yaml

from disaggspec.api import PoolName, parse_service, pool
from disaggspec.api.v1alpha1 import DraftKvCacheDtype
from disaggspec.sglang.args import server_args
from disaggspec.sglang.flag_policy import FORBIDDEN, MULTI_NODE, TYPED_MUST_MATCH, FlagClass, Policy, classify
from disaggspec.sglang.profiles import PROFILES, profile_for
from disaggspec.validation import (
    ALL_RULES,
    OWNED_FLAGS,
    RULES,
    RULES_BY_ID,
    Rule,
    TransitionRule,
    is_owned_flag,
    validate,
    validate_update,
)
from tests.unit.dss_cases import EXAMPLES, IMMUTABLE_CASES, RULE_CASES, SCHEMA_CASES, VALID_CASES, Case, edited


@pytest.mark.parametrize("case", RULE_CASES, ids=lambda c: c.name)
def test_invalid_case_trips_its_rule(case: Case) -> None:
    assert case.rule is not None
    violations = validate(parse_service(case.manifest()))
    assert {v.rule for v in violations} == {case.rule} | case.also
    for violation in violations:
        assert violation.message == RULES_BY_ID[violation.rule].message
        assert violation.field.startswith(("spec.", "metadata."))


@pytest.mark.parametrize("case", VALID_CASES, ids=lambda c: c.name)
def test_valid_case_trips_nothing(case: Case) -> None:
    assert validate(parse_service(case.manifest())) == []


@pytest.mark.parametrize("case", SCHEMA_CASES, ids=lambda c: c.name)
def test_schema_case_rejected_by_the_models(case: Case) -> None:
    with pytest.raises(pydantic.ValidationError):
        parse_service(case.manifest())


def test_every_rule_has_a_failing_case() -> None:
    covered = {case.rule for case in RULE_CASES}
    assert {rule.id for rule in RULES} <= covered


def test_rule_ids_are_unique_kebab_case() -> None:
    ids = [rule.id for rule in ALL_RULES]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule_id) for rule_id in ids)


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.id)
def test_message_names_a_field_it_reads(rule: Rule | TransitionRule) -> None:
    leaves = {path.rsplit(".", 1)[-1] for path in rule.fields} | set(rule.fields)
    assert any(leaf in rule.message for leaf in leaves), f"{rule.message!r} names none of {rule.fields}"


def test_draft_kv_dtypes_come_all_or_none() -> None:
    # spec-draft-kv-dtype-version only asks whether a release has the flag; that suffices while a release with the
    # flag accepts every dtype of the API.
    for profile in PROFILES.values():
        assert profile.draft_kv_cache_dtypes in (frozenset(), frozenset(get_args(DraftKvCacheDtype)))


def test_owned_flags_are_real_flags() -> None:
    known = set().union(*(p.flags for p in PROFILES.values()))
    assert set(OWNED_FLAGS) <= known


def test_violation_points_at_the_pool() -> None:
    service = parse_service(edited({"spec.decode.extraArgs": ["--tp-size", "2"]}))
    assert [(v.rule, v.field) for v in validate(service)] == [("pool-extra-args-owned", "spec.decode.extraArgs[0]")]


def test_mismatch_points_at_the_overriding_pool() -> None:
    service = parse_service(edited({"spec.prefill.speculative": {"eagleTopk": 2, "numDraftTokens": 4}}))
    assert [v.field for v in validate(service)] == ["spec.prefill.speculative.eagleTopk"]


def test_unknown_flag_points_at_the_argument() -> None:
    service = parse_service(edited({"spec.prefill.extraArgs": ["--mem-fraction-static", "0.8", "--nope"]}))
    assert [v.field for v in validate(service)] == ["spec.prefill.extraArgs[2]"]


@pytest.mark.parametrize("case", IMMUTABLE_CASES, ids=lambda case: case.name)
def test_update_of_immutable_field_rejected(case: Case) -> None:
    old = parse_service(edited({}))
    violations = validate_update(old, parse_service(case.manifest()))
    assert [v.rule for v in violations] == [case.rule]
    assert case.rule is not None and violations[0].message == RULES_BY_ID[case.rule].message


def test_update_of_mutable_fields_accepted() -> None:
    old = parse_service(edited({}))
    new = parse_service(edited({"spec.decode.replicas": 4, "spec.speculative.numSteps": 5}))
    assert validate_update(old, new) == []


def test_update_revalidates_the_new_object() -> None:
    old = parse_service(edited({}))
    new = parse_service(edited({"spec.speculative.numDraftTokens": 9}))
    assert {v.rule for v in validate_update(old, new)} == {"spec-num-draft-tokens-chain"}


def _sources() -> list[dict[str, object]]:
    return [yaml.safe_load(path.read_text()) for path in EXAMPLES] + [case.manifest() for case in VALID_CASES]


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_rendered_flags_are_owned_and_known(role: PoolName) -> None:
    # The owned-flag rule must cover everything the renderer writes, or extraArgs could set a flag twice; and every
    # rendered flag must exist in the chosen release's parser.
    for obj in _sources():
        service = parse_service(obj)
        argv = server_args(service, role)
        extra = [*service.spec.engine.extra_args, *pool(service.spec, role).extra_args]
        rendered = argv[: len(argv) - len(extra)] if extra else argv
        profile = profile_for(service.spec.sglang.version)
        for arg in rendered:
            if arg.startswith("--"):
                # Rendered from a typed field: owned, or a must-match option with its typed field (which the rules
                # keep out of a pool's extraArgs and refuse twice in spec.engine.extraArgs).
                option = profile.option(arg)
                typed = option is not None and option.dest in TYPED_MUST_MATCH
                # A multi-node pool's --nnodes, --node-rank, --dist-init-addr: forbidden in extraArgs.
                multi_node = (
                    option is not None and option.dest in MULTI_NODE and classify(option.dest) == FORBIDDEN[option.dest]
                )
                # 0.5.2's --dp-size (the DP-attention size): OWNED there, a forbidden replica count on 0.5.23, so
                # outside the release-blind CEL pattern; the Python rule refuses it by dest.
                owned_here = option is not None and classify(option.dest) == Policy(
                    FlagClass.OWNED, field="spec.<pool>.parallelism.dataParallelAttention.size"
                )
                assert is_owned_flag(arg) or typed or multi_node or owned_here, (
                    f"{arg} is rendered but extraArgs may set it"
                )
                assert profile.knows_flag(arg), f"{arg} is unknown to sglang {profile.version}"
