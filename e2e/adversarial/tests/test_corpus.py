"""The adversarial corpus is well-formed: large enough, unique ids, every entry a real edit of its base with a class
and a reason. No cluster."""

from __future__ import annotations

import json

import pytest
import yaml

from e2e.adversarial.corpus import ADVERSARIAL, BASES, CLASSES, LEGITIMATE, Spec


def test_corpus_is_large_enough() -> None:
    assert len(ADVERSARIAL) >= 110


def test_ids_are_unique() -> None:
    ids = [spec.id for spec in (*ADVERSARIAL, *LEGITIMATE)]
    assert len(ids) == len(set(ids))


def test_every_class_is_used() -> None:
    assert {spec.cls for spec in ADVERSARIAL} == set(CLASSES)


@pytest.mark.parametrize("spec", [*ADVERSARIAL, *LEGITIMATE], ids=lambda s: s.id)
def test_entry_is_an_edit_of_its_base(spec: Spec) -> None:
    assert spec.base in BASES
    assert spec.cls in CLASSES or spec in LEGITIMATE
    assert spec.reason.strip() and "\n" not in spec.reason
    manifest = spec.manifest()
    # It survives both wire forms measure.py and a user would send.
    assert yaml.safe_load(yaml.safe_dump(manifest)) == manifest
    assert json.loads(json.dumps(manifest)) == manifest
    assert isinstance(manifest["spec"], dict)
    assert manifest["spec"] != BASES[spec.base]["spec"]
    assert manifest["apiVersion"] == "disaggspec.io/v1alpha1" and manifest["kind"] == "DisaggSpecService"


def test_bases_are_untouched_by_edits() -> None:
    before = json.dumps(BASES, sort_keys=True)
    for spec in ADVERSARIAL:
        spec.manifest()["spec"]["sglang"]["image"] = "mutated"
    assert json.dumps(BASES, sort_keys=True) == before
