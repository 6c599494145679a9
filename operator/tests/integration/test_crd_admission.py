"""The generated CRD against a real kube-apiserver: every example is admitted, every CEL-expressible rule and schema
rule rejects its invalid manifest with the expected message, immutable fields stay immutable, defaults are applied,
and `kubectl explain` shows the field descriptions.

Dry-run creates go to the `default` namespace: `--dry-run=server` runs defaulting, schema and CEL validation and
persists nothing, so the many cases need no namespace each."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml

from disaggspec import constants as c
from disaggspec.api import parse_service
from disaggspec.config import OperatorConfig
from disaggspec.render import render
from disaggspec.validation import RULES_BY_ID, validate
from e2e.support.fixtures import Cluster
from tests.unit.dss_cases import EXAMPLES, IMMUTABLE_CASES, RULE_CASES, SCHEMA_CASES, VALID_CASES, Case, edited

pytestmark = pytest.mark.integration

_NOW = "2026-01-01T00:00:00Z"
CEL_CASES = tuple(case for case in RULE_CASES if case.rule is not None and RULES_BY_ID[case.rule].cels)
PYTHON_ONLY_CASES = tuple(case for case in RULE_CASES if case.rule is not None and not RULES_BY_ID[case.rule].cels)


@pytest.fixture(scope="module")
def crd(installed_crd: Cluster) -> Cluster:
    """The cluster with the committed CRD installed and established."""
    cluster = installed_crd
    # The API server serves the new resource a moment after Established; wait until a dry-run create goes through.
    cluster.wait_for(
        "DisaggSpecService to be served",
        lambda: _dry_run(cluster, edited({})).returncode == 0,
        timeout=60,
    )
    return cluster


def _dry_run(cluster: Cluster, obj: dict[str, Any], *verb: str) -> Any:
    return cluster.kubectl(
        *(verb or ("apply",)), "--dry-run=server", "-n", "default", "-f", "-", input=yaml.safe_dump(obj), check=False
    )


def _assert_rejected(result: Any, expected: str) -> None:
    assert result.returncode != 0, f"admitted, expected rejection with {expected!r}"
    assert expected in result.stderr, f"expected {expected!r} in:\n{result.stderr}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_admitted(crd: Cluster, path: Any) -> None:
    result = crd.kubectl("apply", "--dry-run=server", "-n", "default", "-f", str(path), check=False)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", VALID_CASES, ids=lambda c: c.name)
def test_valid_case_admitted(crd: Cluster, case: Case) -> None:
    result = _dry_run(crd, case.manifest())
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("case", CEL_CASES, ids=lambda c: c.name)
def test_cel_rule_rejects(crd: Cluster, case: Case) -> None:
    assert case.rule is not None
    message = RULES_BY_ID[case.rule].message
    result = _dry_run(crd, case.manifest())
    _assert_rejected(result, message)
    # The CEL twin reports where the Python twin does: at the same field, or at the field above it when CEL cannot
    # address a list item or map entry from the node it sits on (spec.decode.env for spec.decode.env[0].name).
    reported = _reported_fields(result.stderr, message)
    python = [v.field for v in validate(parse_service(case.manifest())) if v.rule == case.rule]
    assert reported and python
    for field in reported:
        if field == "<nil>":
            assert all(cel.on_node for cel in RULES_BY_ID[case.rule].cels), f"{case.rule} reports no field"
            continue
        assert any(p == field or p.startswith((field + ".", field + "[")) for p in python), (field, python)


def _reported_fields(stderr: str, message: str) -> list[str]:
    """The field paths the API server names for `message` in a rejection (one per failing CEL rule)."""
    found = re.findall(r"(?:^\* |is invalid: )(\S+): Invalid value: [^\n]*?" + re.escape(message), stderr, re.M)
    return [str(field) for field in found]


@pytest.mark.parametrize("case", SCHEMA_CASES, ids=lambda c: c.name)
def test_schema_rule_rejects(crd: Cluster, case: Case) -> None:
    assert case.schema_error is not None
    _assert_rejected(_dry_run(crd, case.manifest()), case.schema_error)


@pytest.mark.parametrize("case", PYTHON_ONLY_CASES, ids=lambda c: c.name)
def test_python_only_rule_passes_the_api_server(crd: Cluster, case: Case) -> None:
    # Documents the split: these need the webhook/reconcile (Python twin); the CRD alone admits them.
    result = _dry_run(crd, case.manifest())
    assert result.returncode == 0, result.stderr


def test_rejection_table_is_large_enough() -> None:
    assert len(CEL_CASES) + len(SCHEMA_CASES) >= 30


@pytest.mark.parametrize("case", IMMUTABLE_CASES, ids=lambda c: c.name)
def test_immutable_field_update_rejected(crd: Cluster, namespace: str, case: Case) -> None:
    assert case.rule is not None
    original = edited({"metadata.name": "immutable"})
    crd.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(original))
    changed = edited(case.edits, base=original)
    result = crd.kubectl(
        "apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(changed), check=False
    )
    _assert_rejected(result, RULES_BY_ID[case.rule].message)
    mutable = edited({"spec.decode.replicas": 3, "spec.speculative.numSteps": 2}, base=original)
    crd.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(mutable))


def test_defaults_applied_and_columns_printed(crd: Cluster, namespace: str) -> None:
    crd.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(edited({"metadata.name": "defaults"})))
    stored = json.loads(crd.kubectl("get", "dss", "defaults", "-n", namespace, "-o", "json").stdout)
    spec = stored["spec"]
    assert spec["transfer"] == {"backend": "mooncake", "bootstrapPort": 8998}
    # No stored policy: the renderer picks the pinned router's default for the release (RouterProfile.default_policy).
    assert "policy" not in spec["router"] and spec["router"]["port"] == 30000
    assert spec["engine"]["pageSize"] == 1 and spec["engine"]["kvCacheDtype"] == "auto"
    assert spec["prefill"]["replicas"] == 1
    header = crd.kubectl("get", "dss", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "ALGORITHM", "PREFILL", "DECODE", "ROLLOUT", "AGE"]
    listed = crd.kubectl("get", "disaggspec", "-n", namespace, "-o", "name").stdout
    assert "defaults" in listed


def test_generate_name_admitted(crd: Cluster) -> None:
    # The root CEL rules read metadata.name; the API server generates it before validation.
    obj = edited({"metadata": {"generateName": "gen-"}})
    result = _dry_run(crd, obj, "create")
    assert result.returncode == 0, result.stderr


def test_status_conditions_merge_by_type(crd: Cluster, namespace: str) -> None:
    crd.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(edited({"metadata.name": "status"})))
    condition = {"type": "Ready", "status": "False", "reason": "Test", "message": "m", "lastTransitionTime": _NOW}
    patch = {"status": {"observedGeneration": 1, "conditions": [condition], "prefill": {"ready": "0/1"}}}
    crd.kubectl(
        "patch", "dss", "status", "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
    )
    row = crd.kubectl("get", "dss", "status", "-n", namespace, "--no-headers").stdout.split()
    assert row[1:4] == ["False", "EAGLE3", "0/1"]


def test_explain_shows_descriptions(crd: Cluster) -> None:
    def explained() -> bool:
        result = crd.kubectl("explain", "dss.spec.speculative", check=False)
        return result.returncode == 0 and "eagleTopk" in result.stdout

    crd.wait_for("kubectl explain to know the CRD", explained, timeout=60)
    out = " ".join(crd.kubectl("explain", "dss.spec.speculative").stdout.split())
    assert "Speculative decoding settings shared by both pools" in out
    assert "--speculative-eagle-topk" in out
    topk = " ".join(crd.kubectl("explain", "dss.spec.speculative.numDraftTokens").stdout.split())
    assert "numSteps + 1" in topk


def test_env_names_the_api_server_accepts_are_admitted_and_rendered(crd: Cluster) -> None:
    """Env names beyond C identifiers (my.dotted-name): the CRD admits what the API server accepts for a container
    (printable ASCII but '=', KEP-4369, GA in 1.34), the rendered pool workloads pass the API server's own Pod
    validation, and '=' is refused by both."""
    case = next(case for case in VALID_CASES if case.name == "env-names-beyond-c-identifiers")
    obj = case.manifest()
    obj["metadata"]["namespace"] = "default"
    admitted = _dry_run(crd, obj)
    assert admitted.returncode == 0, admitted.stderr
    pools = [
        manifest
        for manifest in render(parse_service(obj), OperatorConfig())
        if manifest["kind"] == "Deployment" and manifest["metadata"]["labels"][c.LABEL_ROLE] in c.POOLS
    ]
    rendered = {e["name"] for manifest in pools for e in manifest["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert {"my.dotted-name", "MY-VAR", "1st var (x)"} <= rendered
    for manifest in pools:
        result = _dry_run(crd, manifest)
        assert result.returncode == 0, result.stderr
    refused = copy.deepcopy(pools[0])
    refused["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "A=B", "value": "1"})
    _assert_rejected(_dry_run(crd, refused), "printable ASCII characters other than '='")
