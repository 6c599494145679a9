"""Golden files: the full rendered manifests of every example and of each case under tests/golden/.

A case folder holds `expected.yaml` and, unless it renders an example of the same name, `input.yaml`. Run with
`UPDATE_GOLDEN=1` to rewrite the expected files after an intended change; reviewers read the diff.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from disaggspec.api import parse_service
from disaggspec.config import OperatorConfig
from disaggspec.render import render
from disaggspec.validation import validate

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "operator" / "tests" / "golden"
NAMESPACE = "golden"
CASES: dict[str, Path] = {p.stem: p for p in sorted((REPO / "examples").glob("*.yaml"))}
CASES.update({d.name: d / "input.yaml" for d in sorted(GOLDEN.iterdir()) if (d / "input.yaml").is_file()})


def _rendered(source: Path) -> list[dict[str, Any]]:
    obj = yaml.safe_load(source.read_text())
    obj["metadata"]["namespace"] = NAMESPACE
    service = parse_service(obj)
    assert validate(service) == [], f"{source} must be a valid spec"
    return render(service, OperatorConfig())


@pytest.mark.parametrize("case", sorted(CASES), ids=str)
def test_render_matches_golden(case: str) -> None:
    expected_file = GOLDEN / case / "expected.yaml"
    rendered = yaml.safe_dump_all(_rendered(CASES[case]), sort_keys=True, width=200)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        expected_file.parent.mkdir(parents=True, exist_ok=True)
        expected_file.write_text(rendered)
    assert expected_file.is_file(), f"no golden file for {case}: run UPDATE_GOLDEN=1 pytest {__file__}"
    assert rendered == expected_file.read_text(), f"render of {case} changed: review, then UPDATE_GOLDEN=1"


def test_render_is_deterministic() -> None:
    for source in CASES.values():
        assert _rendered(source) == _rendered(source)


def test_every_golden_folder_is_a_case() -> None:
    assert {d.name for d in GOLDEN.iterdir() if d.is_dir()} == set(CASES)
