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


@pytest.mark.parametrize("relative", list(gen.files()), ids=str)
def test_committed_crd_is_generated(relative: Path) -> None:
    committed = (REPO_ROOT / relative).read_text()
    assert committed == gen.files()[relative], "stale CRD: run `make generate`"


def test_pool_crd_has_the_scale_subresource() -> None:
    version = gen.pool_crd()["spec"]["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["required"] == ["replicas"]
    assert schema["properties"]["status"]["properties"]["selector"]["type"] == "string"


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
        "Rollout",
        "Age",
    ]


def _cel_in_crd() -> list[tuple[str, dict[str, str]]]:
    return [(path, entry) for path, node in _walk(_schema()) for entry in node.get("x-kubernetes-validations", [])]


def test_every_cel_rule_has_its_python_twin() -> None:
    table = {r.message: r for r in ALL_RULES if r.cels}
    assert len(table) == sum(1 for r in ALL_RULES if r.cels), "two rules share a message"
    found = _cel_in_crd()
    for path, entry in found:
        rule = table.get(entry["message"])
        assert rule is not None, f"CEL at {path or '<root>'} has no rule-table twin: {entry['message']!r}"
        assert (entry["rule"], entry.get("fieldPath")) in {(cel.expression, cel.field_path) for cel in rule.cels}


def test_every_cel_rule_names_its_field() -> None:
    # The API server reports a CEL failure at its node plus fieldPath: without one, a rule on the spec node would
    # report plain `spec`. Only a rule about its node as a whole may go without, and it must say why.
    for rule in ALL_RULES:
        for cel in rule.cels:
            assert cel.field_path or cel.on_node, f"{rule.id}: CEL without fieldPath and without a reason"
            if cel.field_path:
                assert cel.field_path.startswith("."), rule.id
    on_node = sorted(rule.id for rule in ALL_RULES for cel in rule.cels if cel.field_path is None)
    assert all(cel.on_node for rule in ALL_RULES for cel in rule.cels if cel.field_path is None), on_node
    table = {r.message: r for r in ALL_RULES}
    for _, entry in _cel_in_crd():
        assert "fieldPath" in entry or any(c.on_node for c in table[entry["message"]].cels), entry["message"]


def test_every_message_names_a_full_field_path() -> None:
    for rule in ALL_RULES:
        assert "spec." in rule.message or "metadata." in rule.message, f"{rule.id}: {rule.message!r}"


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
        "EngineSpec": {".spec.engine"},
        "EnvVarSource": {".spec.prefill.env[].valueFrom", ".spec.decode.env[].valueFrom"},
        "SGLangSpec": {".spec.sglang"},
        "RouterSpec": {".spec.router"},
        "RolloutSpec": {".spec.rollout"},
        "PoolScaleLimits": {".spec.autoscaling.prefill", ".spec.autoscaling.decode"},
        "AutoscalingSpec": {".spec.autoscaling"},
        "PrefillDecodeRatio": {".spec.autoscaling.planner.prefillDecodeRatio"},
        "DraftModel": {
            ".spec.speculative.draftModel",
            ".spec.prefill.speculative.draftModel",
            ".spec.decode.speculative.draftModel",
        },
        "LocalObjectReference": {".spec.sglang.imagePullSecrets[]"},
        "PersistentVolumeClaimVolume": {".spec.model.volume.persistentVolumeClaim"},
        "SecretKeyRef": {".spec.model.hfTokenSecretRef"},
        "KeySelector": {
            f".spec.{pool}.env[].valueFrom.{ref}"
            for pool in ("prefill", "decode")
            for ref in ("secretKeyRef", "configMapKeyRef")
        },
        "HostPathVolume": {
            ".spec.model.volume.hostPath",
            ".spec.model.cache.hostPath",
            ".spec.engine.compileCache.hostPath",
        },
        "CacheVolume": {".spec.model.cache", ".spec.engine.compileCache"},
        "CacheClaim": {".spec.model.cache.persistentVolumeClaim", ".spec.engine.compileCache.persistentVolumeClaim"},
        "ResourceRequirements": {".spec.prefill.resources", ".spec.decode.resources", ".spec.router.resources"},
        "DisruptionSpec": {".spec.prefill.disruption", ".spec.decode.disruption", ".spec.router.disruption"},
        "Toleration": {".spec.prefill.tolerations[]", ".spec.decode.tolerations[]"},
        "NodeSelectorRequirement": {
            f".spec.{pool}.affinity.nodeAffinity.{where}.{kind}[]"
            for pool in ("prefill", "decode")
            for where in (
                "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[]",
                "preferredDuringSchedulingIgnoredDuringExecution[].preference",
            )
            for kind in ("matchExpressions", "matchFields")
        },
        "LabelSelectorRequirement": {
            f".spec.{pool}.affinity.{kind}.{where}.{selector}.matchExpressions[]"
            for pool in ("prefill", "decode")
            for kind in ("podAffinity", "podAntiAffinity")
            for where in (
                "requiredDuringSchedulingIgnoredDuringExecution[]",
                "preferredDuringSchedulingIgnoredDuringExecution[].podAffinityTerm",
            )
            for selector in ("labelSelector", "namespaceSelector")
        },
    }
    per_message: dict[str, set[str]] = {}
    for path, entry in _cel_in_crd():
        per_message.setdefault(entry["message"], set()).add(path)
    for rule in ALL_RULES:
        if not rule.cels:
            continue
        nodes = {cel.node if isinstance(cel.node, str) else cel.node.__name__ for cel in rule.cels}
        assert rule.message in placed, f"{rule.id} is not in the CRD"
        assert per_message[rule.message] == set().union(*(expected_nodes[node] for node in nodes)), rule.id


def test_python_only_rules_are_few_and_named() -> None:
    python_only = sorted(r.id for r in RULES if not r.cels)
    # The extraArgs rules (but the owned one) need the generated flag tables of every release: too large for CEL.
    # The two parallelism ones read option values out of extraArgs (the prefill chunk, the DP dispatch method), which
    # needs the release's parser to know every spelling of the option.
    assert python_only == [
        "engine-quantization-supported",
        "parallelism-dp-attention-chunk-pages",
        "parallelism-prefill-dp-dispatch",
        "pool-extra-args-forbidden",
        "pool-extra-args-known",
        "pool-extra-args-must-match",
        "pool-extra-args-parallel-size",
        "pool-extra-args-port",
    ]


def test_crd_conforms_to_the_apiextensions_schema() -> None:
    # Offline twin of the integration install: the CRD object matches Kubernetes' own OpenAPI for CRDs.
    kubernetes_validate.validate(yaml.safe_load(gen.render_yaml()), kubernetes_validate.latest_version(), strict=True)
