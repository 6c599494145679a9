"""Where each repeated part of the spec sits, and the rule shape the content rules share: a check of one schema node,
run in Python on every place that node occurs and placed as CEL on the node's schema, reported at the same field.

A model such as ResourceRequirements occurs at spec.prefill.resources, spec.decode.resources and
spec.router.resources; its CEL sits once on its schema node and the API server reports `<place><fieldPath>`, so the
Python twin walks the same places and yields the same path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pydantic import BaseModel

from disaggspec.api.effective import pool
from disaggspec.api.v1alpha1 import (
    DisaggSpecService,
    DraftModel,
    EnvVar,
    LabelSelectorRequirement,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PoolSpec,
    ResourceRequirements,
    Toleration,
)
from disaggspec.constants import POOLS
from disaggspec.validation._core import Cel, Rule

Node = TypeVar("Node", bound=BaseModel)
Places = Callable[[DisaggSpecService], Iterator[tuple[str, Any]]]


def pools(service: DisaggSpecService) -> Iterator[tuple[str, PoolSpec]]:
    """spec.prefill and spec.decode."""
    for p in POOLS:
        yield f"spec.{p}", pool(service.spec, p)


def resources(service: DisaggSpecService) -> Iterator[tuple[str, ResourceRequirements]]:
    """Every ResourceRequirements: both pools' and the router's."""
    for path, pool_spec in pools(service):
        yield f"{path}.resources", pool_spec.resources
    yield "spec.router.resources", service.spec.router.resources


def env_vars(service: DisaggSpecService) -> Iterator[tuple[str, EnvVar]]:
    """Every env entry of both pools."""
    for path, pool_spec in pools(service):
        for index, env in enumerate(pool_spec.env):
            yield f"{path}.env[{index}]", env


def tolerations(service: DisaggSpecService) -> Iterator[tuple[str, Toleration]]:
    """Every toleration of both pools."""
    for path, pool_spec in pools(service):
        for index, toleration in enumerate(pool_spec.tolerations):
            yield f"{path}.tolerations[{index}]", toleration


def node_requirements(service: DisaggSpecService) -> Iterator[tuple[str, NodeSelectorRequirement]]:
    """Every node selector requirement of both pools' node affinity (required and preferred terms)."""
    for path, pool_spec in pools(service):
        node = pool_spec.affinity.node_affinity if pool_spec.affinity is not None else None
        if node is None:
            continue
        base = f"{path}.affinity.nodeAffinity"
        terms: list[tuple[str, NodeSelectorTerm]] = []
        if node.required_during_scheduling_ignored_during_execution is not None:
            required = node.required_during_scheduling_ignored_during_execution.node_selector_terms
            terms += [
                (f"{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]", t)
                for i, t in enumerate(required)
            ]
        preferred = node.preferred_during_scheduling_ignored_during_execution
        terms += [
            (f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference", t.preference)
            for i, t in enumerate(preferred)
        ]
        for term_path, term in terms:
            for i, requirement in enumerate(term.match_expressions):
                yield f"{term_path}.matchExpressions[{i}]", requirement
            for i, requirement in enumerate(term.match_fields):
                yield f"{term_path}.matchFields[{i}]", requirement


def label_requirements(service: DisaggSpecService) -> Iterator[tuple[str, LabelSelectorRequirement]]:
    """Every label selector requirement of both pools' pod affinity and anti-affinity terms."""
    for path, pool_spec in pools(service):
        if pool_spec.affinity is None:
            continue
        for kind, affinity in (
            ("podAffinity", pool_spec.affinity.pod_affinity),
            ("podAntiAffinity", pool_spec.affinity.pod_anti_affinity),
        ):
            if affinity is None:
                continue
            base = f"{path}.affinity.{kind}"
            terms = [
                (f"{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]", t)
                for i, t in enumerate(affinity.required_during_scheduling_ignored_during_execution)
            ]
            terms += [
                (f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm", t.pod_affinity_term)
                for i, t in enumerate(affinity.preferred_during_scheduling_ignored_during_execution)
            ]
            for term_path, term in terms:
                for name, selector in (
                    ("labelSelector", term.label_selector),
                    ("namespaceSelector", term.namespace_selector),
                ):
                    if selector is not None:
                        for i, requirement in enumerate(selector.match_expressions):
                            yield f"{term_path}.{name}.matchExpressions[{i}]", requirement


def draft_models(service: DisaggSpecService) -> Iterator[tuple[str, DraftModel]]:
    """The shared draft model and each pool's override, where set."""
    if service.spec.speculative.draft_model is not None:
        yield "spec.speculative.draftModel", service.spec.speculative.draft_model
    for path, pool_spec in pools(service):
        if pool_spec.speculative is not None and pool_spec.speculative.draft_model is not None:
            yield f"{path}.speculative.draftModel", pool_spec.speculative.draft_model


def node_rule(
    rule_id: str,
    fields: tuple[str, ...],
    message: str,
    *,
    checks: tuple[tuple[type[BaseModel], Places, Callable[[Any], bool], str, str], ...],
) -> Rule:
    """A rule over one or more schema nodes. Each check is (node class, its places, `holds` in Python, its CEL on the
    node, the fieldPath): a place where `holds` fails is reported at `<place><fieldPath>`, as the API server
    reports the CEL."""

    def check(service: DisaggSpecService) -> Iterator[str]:
        for _, places, holds, _, field_path in checks:
            for path, node in places(service):
                if not holds(node):
                    yield path + field_path

    cels = tuple(Cel(node, cel, field_path) for node, _, _, cel, field_path in checks)
    return Rule(rule_id, fields, message, check, cels)
