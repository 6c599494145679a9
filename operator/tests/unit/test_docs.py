"""The generated README blocks: in sync with the models and the rule table, complete (every CRD field, every rule),
deterministic, and strict about their marker comments."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from disaggspec.api import crd
from disaggspec.api import docs as gen
from disaggspec.validation import ALL_RULES, RULES, TRANSITION_RULES
from tests.unit.dss_cases import REPO_ROOT

Schema = dict[str, Any]


def _readme() -> str:
    return (REPO_ROOT / gen.README).read_text()


def _block(text: str, name: str) -> str:
    return text.split(gen.begin_marker(name), 1)[1].split(gen.end_marker(name), 1)[0]


def _crd_paths(node: Schema, path: str) -> Iterator[str]:
    """Every field path of the generated CRD schema below `path` ([] for list items), independent of the docs walk."""
    for key, child in node.get("properties", {}).items():
        yield f"{path}.{key}"
        yield from _crd_paths(child, f"{path}.{key}")
    items = node.get("items")
    if isinstance(items, dict):
        yield from _crd_paths(items, f"{path}[]")


def test_committed_readme_is_generated() -> None:
    text = _readme()
    assert gen.render_readme(text) == text, "README.md is stale: run `make generate`"


def test_every_crd_field_is_in_the_reference() -> None:
    reference = gen.api_reference()
    pointers = [(place.path, place.first) for place in gen.places() if place.first is not None]
    schema = crd.openapi_schema()["properties"]
    missing = []
    for root in ("spec", "status"):
        for path in _crd_paths(schema[root], root):
            # A model used twice is tabled at its first place: spec.decode.replicas is documented as
            # spec.prefill.replicas, spec.decode.speculative.draftModel.path (via spec.prefill) as
            # spec.speculative.draftModel.path.
            documented, before = path, ""
            while documented != before:
                before = documented
                for repeat, first in pointers:
                    if documented == repeat or documented.startswith((repeat + ".", repeat + "[")):
                        documented = first + documented[len(repeat) :]
            if f"| `{documented}` |" not in reference:
                missing.append(path)
    assert not missing, f"fields missing from the API reference: {missing}"
    assert len(pointers) >= 3  # decode, the router's resources, the decode/router status: the walk found the repeats


def test_every_model_field_is_in_the_reference() -> None:
    reference = gen.api_reference()
    documented = {place.cls for place in gen.places()}
    assert {cls for _, cls in gen.all_places()} == documented
    for place in gen.places():
        if place.first is not None:
            assert f"### {place.heading}" in reference and place.first in reference
            continue
        for name, info in place.cls.model_fields.items():
            row = next(line for line in reference.splitlines() if line.startswith(f"| `{place.path}.{info.alias}` |"))
            assert info.description and gen._md(info.description) in row, f"{place.cls.__name__}.{name}"


def test_reference_shows_types_defaults_enums_and_constraints() -> None:
    rows = {
        line.split(" | ")[0].strip("| `"): line for line in gen.api_reference().splitlines() if line.startswith("| `")
    }
    assert (
        "| enum |" in rows["spec.speculative.algorithm"]
        and "`EAGLE`, `EAGLE3`, `NEXTN`" in rows["spec.speculative.algorithm"]
    )
    assert "| yes |" in rows["spec.speculative.algorithm"]
    assert "| integer | `8998` | no | min 1; max 65535 |" in rows["spec.transfer.bootstrapPort"]
    assert "pattern `^/`" in rows["spec.model.volume.mountPath"]
    assert "| list of [EnvVar](#specprefillenv-envvar) | `[]` | no | max 128 items |" in rows["spec.prefill.env"]
    assert "| map of quantity (integer or string) | `{}` |" in rows["spec.prefill.resources.limits"]
    assert "one entry per `type`" in rows["status.conditions"]
    assert "| unset | no |" in rows["spec.transfer.rdma"]


def test_every_rule_is_in_the_table() -> None:
    table = _block(_readme(), gen.RULE_TABLE)
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split(" | ")[0] for row in rows] == [f"| `{rule.id}`" for rule in ALL_RULES]
    for rule, row in zip(ALL_RULES, rows, strict=True):
        assert gen._md(rule.message) in row
        assert all(f"`{field}`" in row for field in rule.fields)
        if rule.cel is None:
            assert "Python only: webhook, reconcile" in row
        else:
            assert "CRD CEL" in row
    assert f"{len(RULES)} rules" in table and f"{len(TRANSITION_RULES)} transition rules" in table


def test_rule_table_names_the_schema_node_of_each_cel_rule() -> None:
    table = gen.rule_table()
    row = next(line for line in table.splitlines() if line.startswith("| `env-value-exclusive` |"))
    assert "CRD CEL on `spec.prefill.env[]`, `spec.decode.env[]`;" in row
    row = next(line for line in table.splitlines() if line.startswith("| `immutable-transfer-backend` |"))
    assert "transition rule on `spec.transfer` (updates)" in row
    row = next(line for line in table.splitlines() if line.startswith("| `name-length` |"))
    assert "CRD CEL on the object root;" in row


@pytest.mark.parametrize("name", gen.BLOCKS)
@pytest.mark.parametrize("marker", [gen.begin_marker, gen.end_marker], ids=["begin", "end"])
def test_missing_marker_fails_naming_it(name: str, marker: Any, tmp_path: Path, capsys: Any) -> None:
    text = _readme().replace(marker(name), "")
    with pytest.raises(gen.MarkerError, match=re.escape(marker(name))):
        gen.render_readme(text)
    (tmp_path / gen.README).write_text(text)
    assert gen.main(["--root", str(tmp_path), "--check"]) == 1
    assert marker(name) in capsys.readouterr().err
    assert gen.main(["--root", str(tmp_path)]) == 1
    assert (tmp_path / gen.README).read_text() == text, "a failed run must not write"


def test_repeated_or_misordered_marker_fails() -> None:
    text = _readme()
    begin, end = gen.begin_marker(gen.RULE_TABLE), gen.end_marker(gen.RULE_TABLE)
    with pytest.raises(gen.MarkerError, match="appears 2 times"):
        gen.render_readme(text + "\n" + begin + "\n")
    swapped = text.replace(begin, "@@").replace(end, begin).replace("@@", end)
    with pytest.raises(gen.MarkerError, match="comes before"):
        gen.render_readme(swapped)


def test_rendering_is_deterministic_and_idempotent() -> None:
    assert gen.blocks() == gen.blocks()
    once = gen.render_readme(_readme())
    assert gen.render_readme(once) == once


def test_only_the_blocks_change(tmp_path: Path, capsys: Any) -> None:
    shutil.copy(REPO_ROOT / gen.README, tmp_path / gen.README)
    path = tmp_path / gen.README
    original = path.read_text()
    stale = original.replace("| `spec-topk-match` |", "| `spec-topk-mismatch` |").replace(
        "## Quickstart", "## Quickstart (edited by hand)"
    )
    path.write_text(stale)
    assert gen.main(["--root", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "-| `spec-topk-mismatch` |" in err and "+| `spec-topk-match` |" in err and "Quickstart" not in err
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert path.read_text() == original.replace("## Quickstart", "## Quickstart (edited by hand)")
    assert gen.main(["--root", str(tmp_path), "--check"]) == 0


def test_a_field_without_description_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Undocumented(BaseModel):
        """A model whose field says nothing."""

        size: int = Field(default=1)

    monkeypatch.setattr(gen, "ROOTS", (("spec", Undocumented),))
    with pytest.raises(ValueError, match=r"Undocumented\.size has no description"):
        gen.api_reference()


def _github_anchors(text: str) -> set[str]:
    outside_code = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    found: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", outside_code, flags=re.M):
        slug, n = gen.anchor(heading), 1
        while slug in found:  # GitHub numbers repeated headings
            slug, n = f"{gen.anchor(heading)}-{n}", n + 1
        found.add(slug)
    return found


def test_every_readme_link_to_a_heading_resolves() -> None:
    text = _readme()
    anchors = _github_anchors(text)
    targets = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert "validation-rules" in targets and "spectransferrdma-rdmaspec" in targets
    assert targets <= anchors, f"dangling links: {sorted(targets - anchors)}"
