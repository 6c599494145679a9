"""The effective-value table (`disaggspec.api.effective.SPECULATIVE_FIELDS`) that both the Python merge and the CEL
of the rule table are built from: it names every overridable field as the models do, and its merge is the one the
CEL expresses (a pool's key when present on the wire, else the shared key) on every case of the case table."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel

from disaggspec.api import effective_speculative, parse_service
from disaggspec.api.effective import (
    SHARED_ONLY_SPECULATIVE_FIELDS,
    SPECULATIVE_FIELDS,
    EffectiveSpeculative,
    SpeculativeField,
)
from disaggspec.api.v1alpha1 import PoolSpeculativeSpec, SpeculativeSpec
from disaggspec.constants import POOLS
from disaggspec.validation._cel import effective, is_set
from tests.unit.dss_cases import RULE_CASES, VALID_CASES, Case

CASES = (*RULE_CASES, *VALID_CASES)
UNSET = object()


def test_table_lists_every_overridable_field_in_model_order() -> None:
    attrs = [f.attr for f in SPECULATIVE_FIELDS]
    shared = [name for name in SpeculativeSpec.model_fields if name not in SHARED_ONLY_SPECULATIVE_FIELDS]
    assert attrs == shared == list(PoolSpeculativeSpec.model_fields)
    assert set(SHARED_ONLY_SPECULATIVE_FIELDS) <= set(SpeculativeSpec.model_fields)
    assert attrs == [f.name for f in dataclasses.fields(EffectiveSpeculative)]


@pytest.mark.parametrize("field", SPECULATIVE_FIELDS, ids=lambda f: f.wire)
def test_wire_name_and_unset_handling_match_the_models(field: SpeculativeField[Any]) -> None:
    shared = SpeculativeSpec.model_fields[field.attr]
    assert field.wire == shared.alias == PoolSpeculativeSpec.model_fields[field.attr].alias
    assert field.always_set == (shared.is_required() or shared.default is not None)


@pytest.mark.parametrize("field", SPECULATIVE_FIELDS, ids=lambda f: f.wire)
def test_cel_reads_the_wire_name(field: SpeculativeField[Any]) -> None:
    if field.always_set:
        cel = effective("decode", field)
        with pytest.raises(ValueError):
            effective("decode", field, "''")
    else:
        cel = effective("decode", field, "''") + is_set("decode", field)
        with pytest.raises(ValueError):
            effective("decode", field)
    assert f"self.decode.speculative.{field.wire}" in cel and f"self.speculative.{field.wire}" in cel


def _wire_merge(spec: dict[str, Any], pool: str, wire: str) -> object:
    """What the CEL of `effective`/`is_set` computes on the (defaulted) wire object: the pool's key when present,
    else the shared key, else unset."""
    mine = spec[pool].get("speculative", {})
    if wire in mine:
        return mine[wire]
    return spec["speculative"].get(wire, UNSET)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_python_merge_equals_the_wire_merge(case: Case) -> None:
    spec = parse_service(case.manifest()).spec
    wire = spec.model_dump(by_alias=True, exclude_none=True)
    for pool in POOLS:
        eff = effective_speculative(spec, pool)
        for field in SPECULATIVE_FIELDS:
            value = field.resolve(spec, pool)
            dumped = value.model_dump(by_alias=True, exclude_none=True) if isinstance(value, BaseModel) else value
            assert _wire_merge(wire, pool, field.wire) == (UNSET if value is None else dumped), field.wire
            if value is None and field.attr == "num_draft_tokens" and eff.eagle_topk == 1:
                value = eff.num_steps + 1  # the one derived value: what SGLang forces for a chain
            assert getattr(eff, field.attr) == value
