"""childrefusal: which failed writes are refusals, the spec field a child field comes from, and the plain message.

The refusal texts are the ones a v1.37 API server answered for the adversarial corpus' specs (dry-run server-side
apply of the rendered children), trimmed to what each case needs.
"""

from __future__ import annotations

from typing import Any

import pytest

from disaggspec import constants as c
from disaggspec.childrefusal import (
    NOTHING_APPLIED,
    Cause,
    Refusal,
    describe,
    explain,
    is_refusal,
    spec_field,
)

QUOTA = (
    'deployments.apps "llama-prefill" is forbidden: exceeded quota: q, requested: count/deployments.apps=1, used: '
    "count/deployments.apps=2, limited: count/deployments.apps=2"
)
RBAC = (
    'deployments.apps "llama-prefill" is forbidden: User "system:serviceaccount:ops:disaggspec" cannot patch '
    'resource "deployments" in API group "apps" in the namespace "team"'
)
DUPLICATE_ENV = (
    "failed to create typed patch object (team/llama-prefill; apps/v1, Kind=Deployment): "
    '.spec.template.spec.containers[name="sglang"].env: duplicate entries for key [name="A"]'
)
BAD_QUANTITY = (
    "failed to convert new object (team/llama-prefill; apps/v1, Kind=Deployment) to proper version: unable to convert "
    "unstructured object to apps/v1, Kind=Deployment: quantities must match the regular expression '^([+-]?[0-9.]+)'"
)


@pytest.mark.parametrize(
    ("status", "message", "refused"),
    [
        (422, 'Deployment.apps "x" is invalid: ...', True),
        (400, "bad request", True),
        (403, QUOTA, True),
        (403, 'admission webhook "policy.example.com" denied the request: no GPUs on Fridays', True),
        (403, RBAC, False),
        (
            403,
            'rolebindings "x" is forbidden: user "sa" is attempting to grant RBAC permissions not currently held',
            False,
        ),
        (500, DUPLICATE_ENV, True),
        (500, BAD_QUANTITY, True),
        (500, "etcdserver: request timed out", False),
        (503, "unavailable", False),
        (504, "timeout", False),
        (429, "too many requests", False),
        (409, "the object has been modified", False),
        (404, "not found", False),
    ],
)
def test_refusals_are_told_from_transient_failures(status: int, message: str, refused: bool) -> None:
    assert is_refusal(status, message) is refused


def _deployment(role: str, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "sglang"}
    if env is not None:
        container["env"] = env
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"llama-{role}", "labels": {c.LABEL_ROLE: role}},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }


OPERATOR_ENV = [{"name": "NCCL_IB_HCA", "value": "mlx5_0"}]
SPEC: dict[str, Any] = {
    "prefill": {"env": [{"name": "FOO", "valueFrom": {}}, {"name": "BAR", "value": "1"}]},
    "decode": {},
}
PREFILL = _deployment("prefill", OPERATOR_ENV + SPEC["prefill"]["env"])


@pytest.mark.parametrize(
    ("manifest", "field", "expected"),
    [
        (PREFILL, "spec.template.spec.containers[0].env[1].valueFrom", "spec.prefill.env[0]"),
        (PREFILL, "spec.template.spec.containers[0].env[2].name", "spec.prefill.env[1]"),
        (PREFILL, "spec.template.spec.containers[0].env[0].value", None),  # the operator's own variable
        (PREFILL, '.spec.template.spec.containers[name="sglang"].env[name="BAR"]', "spec.prefill.env[1]"),
        (PREFILL, '.spec.template.spec.containers[name="sglang"].env', "spec.prefill.env"),
        (PREFILL, "spec.template.labels", "spec.prefill.podLabels"),
        (PREFILL, "spec.template.metadata.labels", "spec.prefill.podLabels"),
        (PREFILL, "spec.template.annotations", "spec.prefill.podAnnotations"),
        (PREFILL, "spec.template.spec.nodeSelector", "spec.prefill.nodeSelector"),
        (_deployment("decode"), "spec.template.spec.tolerations[2].operator", "spec.decode.tolerations[2]"),
        (_deployment("decode"), "spec.template.spec.affinity.nodeAffinity", "spec.decode.affinity"),
        (PREFILL, "spec.template.spec.containers[0].resources.limits[memory]", "spec.prefill.resources"),
        (_deployment("router"), "spec.template.spec.containers[0].resources.requests", "spec.router.resources"),
        (PREFILL, "spec.template.spec.volumes[1].hostPath.path", "spec.model.volume"),
        (PREFILL, "spec.template.spec.containers[0].volumeMounts[1].mountPath", "spec.model.volume"),
        (PREFILL, "spec.template.spec.containers[0].image", "spec.sglang.image"),
        (_deployment("router"), "spec.template.spec.containers[0].image", "spec.router.image"),
        (_deployment("router"), "spec.template.labels", None),  # the router's pod labels are the operator's
        (PREFILL, "spec.replicas", "spec.prefill.replicas"),
        (PREFILL, "spec.template.spec.containers[0].command", None),
        (PREFILL, "metadata.name", None),
        (
            {"kind": "Service", "metadata": {"labels": {c.LABEL_ROLE: "router"}}},
            "spec.type",
            "spec.router.serviceType",
        ),
    ],
)
def test_a_child_field_maps_back_to_the_spec_field_it_comes_from(
    manifest: dict[str, Any], field: str, expected: str | None
) -> None:
    assert spec_field(field, manifest, SPEC) == expected


def test_an_invalid_child_is_described_by_its_causes_and_their_spec_fields() -> None:
    refusal = Refusal(
        "Deployment",
        "llama-prefill",
        422,
        "Invalid",
        'Deployment.apps "llama-prefill" is invalid: spec.template.spec.containers[0].env[1].valueFrom: ...',
        (
            Cause(
                "spec.template.spec.containers[0].env[1].valueFrom",
                'Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef`',
            ),
        ),
    )
    assert explain([refusal], [PREFILL], SPEC) == (
        "the API server refuses Deployment llama-prefill: spec.template.spec.containers[0].env[1].valueFrom: Invalid "
        'value: "": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` (from spec.prefill.env[0]); '
        f"{NOTHING_APPLIED}"
    )


def test_a_quota_refusal_keeps_the_quota_in_words_without_the_object_prefix() -> None:
    refusal = Refusal("Deployment", "llama-prefill", 403, "Forbidden", QUOTA)
    assert describe(refusal, PREFILL, SPEC) == (
        "the API server refuses Deployment llama-prefill: exceeded quota: q, requested: count/deployments.apps=1, "
        "used: count/deployments.apps=2, limited: count/deployments.apps=2"
    )


def test_a_server_side_apply_500_is_described_without_its_internal_prefix() -> None:
    duplicate = describe(Refusal("Deployment", "llama-prefill", 500, "InternalError", DUPLICATE_ENV), PREFILL, SPEC)
    assert duplicate == (
        "the API server refuses Deployment llama-prefill: "
        '.spec.template.spec.containers[name="sglang"].env: duplicate entries for key [name="A"] '
        "(from spec.prefill.env)"
    )
    quantity = describe(Refusal("Deployment", "llama-prefill", 500, "InternalError", BAD_QUANTITY), None, None)
    assert quantity.startswith("the API server refuses Deployment llama-prefill: quantities must match")


def test_several_refusals_make_one_message() -> None:
    first = Refusal("Deployment", "llama-prefill", 403, "Forbidden", QUOTA)
    second = Refusal("Service", "llama-router", 403, "Forbidden", 'services "llama-router" is forbidden: exceeded')
    text = explain([first, second])
    assert text.count("the API server refuses") == 2 and text.endswith(f"; {NOTHING_APPLIED}")
