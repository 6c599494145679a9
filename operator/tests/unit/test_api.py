"""The models as an API: camelCase wire format, unknown fields rejected, every field documented, effective settings."""

from __future__ import annotations

import pydantic
import pytest
from pydantic import BaseModel

from disaggspec.api import effective_speculative, effective_speculative_pair, parse_service, parse_spec
from disaggspec.api import v1alpha1 as api
from tests.unit.dss_cases import BASE, edited


def _models() -> list[type[BaseModel]]:
    return [
        value
        for value in vars(api).values()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == api.__name__
    ]


@pytest.mark.parametrize("model", _models(), ids=lambda m: m.__name__)
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    assert model.__doc__, f"{model.__name__} has no docstring"
    for name, field in model.model_fields.items():
        if model is api.DisaggSpecService:
            continue  # apiVersion/kind/metadata/spec/status: described in the CRD root by the generator
        assert field.description, f"{model.__name__}.{name} has no description"


@pytest.mark.parametrize("model", [m for m in _models() if issubclass(m, api.SpecModel)], ids=lambda m: m.__name__)
def test_spec_models_forbid_unknown_fields(model: type[BaseModel]) -> None:
    assert model.model_config.get("extra") == "forbid"


def test_wire_format_is_camel_case() -> None:
    service = parse_service(BASE)
    dumped = service.spec.model_dump(by_alias=True, exclude_none=True)
    assert dumped["speculative"]["eagleTopk"] == 1
    assert dumped["transfer"]["bootstrapPort"] == 8998
    assert "tensorParallelSize" in dumped["prefill"]
    assert parse_spec(dumped) == service.spec


def test_snake_case_also_parses() -> None:
    spec = parse_spec({**BASE["spec"], "transfer": {"bootstrap_port": 9000}})
    assert spec.transfer.bootstrap_port == 9000


def test_unknown_field_rejected() -> None:
    with pytest.raises(pydantic.ValidationError, match="extra"):
        parse_service(edited({"spec.speculative.topk": 2}))


def test_defaults() -> None:
    spec = parse_service(BASE).spec
    assert spec.transfer.backend == "mooncake" and spec.transfer.bootstrap_port == 8998
    assert spec.router.policy is None and spec.router.port == api.DEFAULT_ROUTER_PORT
    assert spec.engine.page_size == 1 and spec.engine.kv_cache_dtype == "auto"
    assert spec.prefill.replicas == 1 and spec.prefill.extra_args == []


def test_effective_merges_pool_over_shared() -> None:
    spec = parse_service(
        edited(
            {
                "spec.speculative.numSteps": 2,
                "spec.decode.speculative": {"numSteps": 4, "draftModel": {"path": "other/draft"}},
            }
        )
    ).spec
    prefill = effective_speculative(spec, "prefill")
    decode = effective_speculative(spec, "decode")
    assert (prefill.num_steps, prefill.num_draft_tokens) == (2, 3)
    assert (decode.num_steps, decode.num_draft_tokens) == (4, 5)
    assert decode.draft_model is not None and decode.draft_model.path == "other/draft"
    assert decode.algorithm == prefill.algorithm == "EAGLE3"


def test_effective_tree_leaves_draft_tokens_as_given() -> None:
    service = parse_service(edited({"spec.speculative.eagleTopk": 4}))
    pair = effective_speculative_pair(service)
    assert pair["prefill"].num_draft_tokens is None
    assert pair["decode"].topk_entries == 4


def test_topk_entries_multiply_with_multi_layer() -> None:
    service = parse_service(
        edited({"spec.speculative.multiLayer": True, "spec.speculative.eagleTopk": 2, "spec.speculative.numSteps": 3})
    )
    assert effective_speculative_pair(service)["prefill"].topk_entries == 6


def test_models_are_frozen() -> None:
    spec = parse_service(BASE).spec
    with pytest.raises(pydantic.ValidationError):
        spec.prefill.replicas = 3  # type: ignore[misc]
