"""The generated CRD: committed copies match the models, the schema is structural and documented, and every CEL
rule in it is a rule-table entry with the same message (and vice versa)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from disaggspec.validation import ALL_RULES, RULES
from tools import crd as gen
from tools.common import repo_root

REPO_ROOT = repo_root()

Schema = dict[str, Any]


def _schema() -> Schema:
    doc = yaml.safe_load(gen.render_yaml())
    schema: Schema = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _walk(node: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    yield path, node
    for key, child in node.get("properties", {}).items():
        yield from _walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("relative", gen.OUTPUTS, ids=str)
def test_committed_crd_is_generated(relative: Path) -> None:
    committed = (REPO_ROOT / relative).read_text()
    assert committed == gen.render_yaml(), "stale CRD: run `make generate`"


def test_header_first_line() -> None:
    assert gen.render_yaml().splitlines()[0] == gen.HEADER.strip()
    assert "do not edit" in gen.HEADER


def test_generation_is_deterministic() -> None:
    assert gen.render_yaml() == gen.render_yaml()


def test_check_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gen.main(["--root", str(tmp_path)]) == 0
    assert gen.main(["--root", str(tmp_path), "--check"]) == 0
    stale = tmp_path / gen.OUTPUTS[1]
    stale.write_text(stale.read_text().replace("dss", "dsx", 1))
    capsys.readouterr()
    assert gen.main(["--root", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "-    - dsx" in err and "+    - dss" in err


def test_structural() -> None:
    for path, node in _walk(_schema()):
        assert "$ref" not in node and "title" not in node and "$defs" not in node, path
        assert "anyOf" not in node and "oneOf" not in node and "allOf" not in node, path
        assert node.get("additionalProperties", {}) is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
        else:
            assert "type" in node, f"{path} has no type"
        assert node.get("default", "unset") is not None, f"{path} defaults to null"


def test_every_field_described() -> None:
    for path, node in _walk(_schema()):
        if path.endswith(("[]", "}")) or path in ("", ".metadata"):
            continue
        assert node.get("description"), f"{path} has no description"


def test_crd_metadata() -> None:
    doc = yaml.safe_load(gen.render_yaml())
    spec = doc["spec"]
    assert doc["metadata"]["name"] == "disaggspecservices.disaggspec.io"
    assert spec["names"]["shortNames"] == ["dss"]
    assert spec["names"]["categories"] == ["all", "disaggspec"]
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Ready",
        "Algorithm",
        "Prefill",
        "Decode",
        "Age",
    ]


def _cel_in_crd() -> list[tuple[str, dict[str, str]]]:
    return [(path, entry) for path, node in _walk(_schema()) for entry in node.get("x-kubernetes-validations", [])]


def test_every_cel_rule_has_its_python_twin() -> None:
    table = {r.message: r for r in ALL_RULES if r.cel is not None}
    found = _cel_in_crd()
    for path, entry in found:
        rule = table.get(entry["message"])
        assert rule is not None, f"CEL at {path or '<root>'} has no rule-table twin: {entry['message']!r}"
        assert rule.cel is not None and entry["rule"] == rule.cel.expression


def test_every_table_cel_lands_in_the_crd() -> None:
    placed = {entry["message"]: path for path, entry in _cel_in_crd()}
    expected_nodes = {
        "root": {""},
        "DisaggSpecServiceSpec": {".spec"},
        "PoolSpec": {".spec.prefill", ".spec.decode"},
        "RdmaSpec": {".spec.transfer.rdma"},
        "ModelVolume": {".spec.model.volume"},
        "ModelSpec": {".spec.model"},
        "EnvVar": {".spec.prefill.env[]", ".spec.decode.env[]"},
        "TransferSpec": {".spec.transfer"},
    }
    per_message: dict[str, set[str]] = {}
    for path, entry in _cel_in_crd():
        per_message.setdefault(entry["message"], set()).add(path)
    for rule in ALL_RULES:
        if rule.cel is None:
            continue
        node = rule.cel.node if isinstance(rule.cel.node, str) else rule.cel.node.__name__
        assert rule.message in placed, f"{rule.id} is not in the CRD"
        assert per_message[rule.message] == expected_nodes[node], rule.id


def test_python_only_rules_are_few_and_named() -> None:
    python_only = sorted(r.id for r in RULES if r.cel is None)
    assert python_only == ["pool-extra-args-known"]


def test_crd_conforms_to_the_apiextensions_schema() -> None:
    # Offline twin of the integration install: the CRD object matches Kubernetes' own OpenAPI for CRDs.
    kubernetes_validate.validate(yaml.safe_load(gen.render_yaml()), kubernetes_validate.latest_version(), strict=True)
