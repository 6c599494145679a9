"""Pod-shape rules: the labels, annotations, node selector and tolerations a pool passes into its pod template have
the shape the API server requires of a Pod, so a bad one is refused at admission rather than when the operator
applies that pool's Deployment. Unknown toleration fields, operators and effects are refused by the typed schema
(`Toleration`, `Affinity`); what a type cannot say (values that fit an operator, keys that are label keys) is a
rule here. What needs the cluster (namespaces that exist, the scheduler's view) is left to the server-side dry-run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Final

from disaggspec.api.v1alpha1 import LabelSelectorRequirement, NodeSelectorRequirement, PoolSpec, Toleration
from disaggspec.validation import _places
from disaggspec.validation._cel import quote
from disaggspec.validation._core import Rule
from disaggspec.validation._places import node_rule
from disaggspec.validation._syntax import LABEL_VALUE, QUALIFIED_NAME, full

_FIELDS: Final = ("spec.prefill", "spec.decode")


def _labels_ok(labels: Mapping[str, str]) -> bool:
    return all(full(QUALIFIED_NAME, k) and full(LABEL_VALUE, v) for k, v in labels.items())


def _labels_cel(field: str) -> str:
    return (
        f"!has(self.{field}) || self.{field}.all(k, k.matches({quote(QUALIFIED_NAME)}) && "
        f"self.{field}[k].matches({quote(LABEL_VALUE)}))"
    )


POD_LABELS: Final = node_rule(
    "pool-pod-labels",
    ("spec.prefill.podLabels", "spec.decode.podLabels"),
    "spec.<pool>.podLabels keys must be qualified names ([lowercase DNS subdomain/]name, the name 1-63 letters, "
    "digits, '-', '_' or '.', alphanumeric at both ends) and values label values (at most 63 such characters, "
    "alphanumeric at both ends, or empty): fix the label",
    checks=((PoolSpec, _places.pools, lambda p: _labels_ok(p.pod_labels), _labels_cel("podLabels"), ".podLabels"),),
)

NODE_SELECTOR: Final = node_rule(
    "pool-node-selector",
    ("spec.prefill.nodeSelector", "spec.decode.nodeSelector"),
    "spec.<pool>.nodeSelector keys must be label keys ([lowercase DNS subdomain/]name of at most 63 characters) and "
    "values label values (at most 63 letters, digits, '-', '_' or '.', alphanumeric at both ends): match the node "
    "label exactly",
    checks=(
        (PoolSpec, _places.pools, lambda p: _labels_ok(p.node_selector), _labels_cel("nodeSelector"), ".nodeSelector"),
    ),
)

# Annotation keys are checked lowercased, as the API server does, so an upper-case prefix passes.
POD_ANNOTATIONS: Final = node_rule(
    "pool-pod-annotations",
    ("spec.prefill.podAnnotations", "spec.decode.podAnnotations"),
    "spec.<pool>.podAnnotations keys must be qualified names ([DNS subdomain/]name, the name 1-63 letters, digits, "
    "'-', '_' or '.', alphanumeric at both ends): fix the annotation key",
    checks=(
        (
            PoolSpec,
            _places.pools,
            lambda p: all(full(QUALIFIED_NAME, k.lower()) for k in p.pod_annotations),
            f"!has(self.podAnnotations) || self.podAnnotations.all(k, k.lowerAscii().matches({quote(QUALIFIED_NAME)}))",
            ".podAnnotations",
        ),
    ),
)


# ---- tolerations -------------------------------------------------------------------------------------------------


def _toleration_rule(
    rule_id: str, message: str, holds: Callable[[Toleration], bool], cel: str, field_path: str
) -> Rule:
    """A rule over each toleration of both pools, on the Toleration schema node."""
    return node_rule(
        rule_id,
        ("spec.prefill.tolerations", "spec.decode.tolerations"),
        message,
        checks=((Toleration, _places.tolerations, holds, cel, field_path),),
    )


TOLERATION_KEY: Final = _toleration_rule(
    "pool-toleration-key",
    "spec.<pool>.tolerations[].key must be a label key ([lowercase DNS subdomain/]name of at most 63 characters) "
    "or empty: use the taint's exact key",
    lambda t: not t.key or full(QUALIFIED_NAME, t.key),
    f"!has(self.key) || self.key == '' || self.key.matches({quote(QUALIFIED_NAME)})",
    ".key",
)

TOLERATION_EXISTS_NO_VALUE: Final = _toleration_rule(
    "pool-toleration-exists-value",
    "spec.<pool>.tolerations[] with operator Exists matches any value and must not set value: remove value, or use "
    "operator Equal",
    lambda t: t.operator != "Exists" or not t.value,
    "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
    ".value",
)

TOLERATION_EMPTY_KEY_EXISTS: Final = _toleration_rule(
    "pool-toleration-empty-key",
    "spec.<pool>.tolerations[] without a key matches every taint and needs operator Exists: set operator: Exists, or "
    "give the taint's key",
    lambda t: bool(t.key) or t.operator == "Exists",
    "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
    ".operator",
)

TOLERATION_SECONDS_NO_EXECUTE: Final = _toleration_rule(
    "pool-toleration-seconds",
    "spec.<pool>.tolerations[].tolerationSeconds applies only to effect NoExecute: set effect: NoExecute, or remove "
    "tolerationSeconds",
    lambda t: t.toleration_seconds is None or t.effect == "NoExecute",
    "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
    ".tolerationSeconds",
)


# ---- affinity requirements ---------------------------------------------------------------------------------------

_INTEGER: Final = r"^-?[0-9]+$"


def _values_fit(operator: str, values: list[str]) -> bool:
    """In/NotIn test a set (non-empty), Exists/DoesNotExist test presence (no values), Gt/Lt compare one integer."""
    if operator in ("In", "NotIn"):
        return bool(values)
    if operator in ("Exists", "DoesNotExist"):
        return not values
    return len(values) == 1 and full(_INTEGER, values[0])


_VALUES_CEL: Final = (
    "self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : "
    "self.operator in ['Exists', 'DoesNotExist'] ? (!has(self.values) || size(self.values) == 0) : "
    f"(has(self.values) && size(self.values) == 1 && self.values[0].matches({quote(_INTEGER)}))"
)

AFFINITY_VALUES: Final = node_rule(
    "pool-affinity-values",
    ("spec.prefill.affinity", "spec.decode.affinity"),
    "spec.<pool>.affinity matchExpressions/matchFields values must fit the operator: In and NotIn need at least "
    "one value, Exists and DoesNotExist take none, Gt and Lt take exactly one integer: fix values or the operator",
    checks=(
        (
            NodeSelectorRequirement,
            _places.node_requirements,
            lambda r: _values_fit(r.operator, r.values),
            _VALUES_CEL,
            ".values",
        ),
        (
            LabelSelectorRequirement,
            _places.label_requirements,
            lambda r: _values_fit(r.operator, r.values),
            _VALUES_CEL,
            ".values",
        ),
    ),
)

_KEY_CEL: Final = f"self.key.matches({quote(QUALIFIED_NAME)})"

AFFINITY_KEY: Final = node_rule(
    "pool-affinity-key",
    ("spec.prefill.affinity", "spec.decode.affinity"),
    "spec.<pool>.affinity matchExpressions/matchFields keys must be label keys ([lowercase DNS subdomain/]name of "
    "at most 63 characters): use the label's exact key",
    checks=(
        (NodeSelectorRequirement, _places.node_requirements, lambda r: full(QUALIFIED_NAME, r.key), _KEY_CEL, ".key"),
        (LabelSelectorRequirement, _places.label_requirements, lambda r: full(QUALIFIED_NAME, r.key), _KEY_CEL, ".key"),
    ),
)

RULES: Final[tuple[Rule, ...]] = (
    POD_LABELS,
    POD_ANNOTATIONS,
    NODE_SELECTOR,
    TOLERATION_KEY,
    TOLERATION_EXISTS_NO_VALUE,
    TOLERATION_EMPTY_KEY_EXISTS,
    TOLERATION_SECONDS_NO_EXECUTE,
    AFFINITY_VALUES,
    AFFINITY_KEY,
)
"""This module's rules in table order."""
