"""Resource rules: the resources of each pool's SGLang container and of the router container have the names and
quantities the API server accepts in a Pod, checked on the DisaggSpecService so a bad one is refused at admission
instead of when the operator applies that one child (after the others were applied).

Kubernetes' container rules restated: keys are native (cpu, memory, ephemeral-storage, hugepages-<size>) or
domain-prefixed extended resources outside kubernetes.io; values are non-negative quantities, whole numbers for
extended resources; a request is at most its limit; extended resources and hugepages are not overcommitted, so a
request needs an equal limit; hugepages need a cpu or memory request or limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from disaggspec.api.v1alpha1 import ResourceRequirements
from disaggspec.validation import _places
from disaggspec.validation._cel import quote
from disaggspec.validation._core import Rule
from disaggspec.validation._places import node_rule
from disaggspec.validation._syntax import (
    EXTENDED_RESOURCE,
    NATIVE_RESOURCE,
    RESERVED_RESOURCE,
    found,
    full,
    is_quantity_cel,
    quantity,
    quantity_cel,
)

Quantities = Mapping[str, int | str]

_OVERCOMMITTABLE: Final = r"^(cpu|memory|ephemeral-storage)$"
"""The resources whose request may be below the limit (not extended resources, not hugepages)."""
_FIELDS: Final = ("spec.prefill.resources", "spec.decode.resources", "spec.router.resources")


def resource_name_ok(name: str) -> bool:
    """A native container resource, or an extended resource in a domain Kubernetes does not keep for itself."""
    return full(NATIVE_RESOURCE, name) or (full(EXTENDED_RESOURCE, name) and not found(RESERVED_RESOURCE, name))


def resource_name_cel(k: str) -> str:
    """`resource_name_ok` in CEL for the key expression `k`."""
    return (
        f"({k}.matches({quote(NATIVE_RESOURCE)}) || "
        f"({k}.matches({quote(EXTENDED_RESOURCE)}) && !{k}.matches({quote(RESERVED_RESOURCE)})))"
    )


def _names_ok(values: Quantities) -> bool:
    return all(resource_name_ok(name) for name in values)


def _names_cel(field: str) -> str:
    return f"!has(self.{field}) || self.{field}.all(k, {resource_name_cel('k')})"


RESOURCE_NAMES: Final = node_rule(
    "resource-names",
    _FIELDS,
    "spec.<pool>.resources and spec.router.resources keys must be cpu, memory, ephemeral-storage, hugepages-<size> "
    "or a domain-prefixed extended resource (for example example.com/fpga; not in kubernetes.io, no 'requests.' "
    "prefix): fix the resource name",
    checks=(
        (ResourceRequirements, _places.resources, lambda r: _names_ok(r.limits), _names_cel("limits"), ".limits"),
        (ResourceRequirements, _places.resources, lambda r: _names_ok(r.requests), _names_cel("requests"), ".requests"),
    ),
)


def _quantity_ok(name: str, value: int | str) -> bool:
    amount = quantity(value)
    if amount is None or amount < 0:
        return False
    return full(NATIVE_RESOURCE, name) or amount.denominator == 1


def _quantities_cel(field: str) -> str:
    value = f"self.{field}[k]"
    return (
        f"!has(self.{field}) || self.{field}.all(k, {is_quantity_cel(value)} && "
        f"{quantity_cel(value)}.compareTo(quantity('0')) >= 0 && "
        f"(k.matches({quote(NATIVE_RESOURCE)}) || {quantity_cel(value)}.isInteger()))"
    )


RESOURCE_QUANTITIES: Final = node_rule(
    "resource-quantities",
    _FIELDS,
    "spec.<pool>.resources and spec.router.resources values must be non-negative quantities (for example 8, 500m, "
    "64Gi), and whole numbers for extended resources such as nvidia.com/gpu: fix the quantity",
    checks=(
        (
            ResourceRequirements,
            _places.resources,
            lambda r: all(_quantity_ok(k, v) for k, v in r.limits.items()),
            _quantities_cel("limits"),
            ".limits",
        ),
        (
            ResourceRequirements,
            _places.resources,
            lambda r: all(_quantity_ok(k, v) for k, v in r.requests.items()),
            _quantities_cel("requests"),
            ".requests",
        ),
    ),
)


def _compare(request: int | str, limit: int | str) -> int | None:
    """-1, 0 or 1 as request is below, at or above limit; None when either is no quantity (another rule's case)."""
    a, b = quantity(request), quantity(limit)
    if a is None or b is None:
        return None
    return (a > b) - (a < b)


def _within_limits(r: ResourceRequirements) -> bool:
    return all(_compare(v, r.limits[k]) in (None, -1, 0) for k, v in r.requests.items() if k in r.limits)


def _compare_cel(k: str) -> str:
    """CEL: whether request and limit of key `k` are both quantities (guard before `_compare_to_cel`)."""
    return f"{is_quantity_cel(f'self.requests[{k}]')} && {is_quantity_cel(f'self.limits[{k}]')}"


def _compare_to_cel(k: str) -> str:
    return f"{quantity_cel(f'self.requests[{k}]')}.compareTo({quantity_cel(f'self.limits[{k}]')})"


REQUEST_WITHIN_LIMIT: Final = node_rule(
    "resource-request-within-limit",
    _FIELDS,
    "spec.<pool>.resources.requests and spec.router.resources.requests may not exceed the limit of the same "
    "resource: lower the request or raise the limit",
    checks=(
        (
            ResourceRequirements,
            _places.resources,
            _within_limits,
            "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || "
            f"!({_compare_cel('k')}) || {_compare_to_cel('k')} <= 0)",
            ".requests",
        ),
    ),
)


def _not_overcommitted(r: ResourceRequirements) -> bool:
    return all(
        k in r.limits and _compare(v, r.limits[k]) in (None, 0)
        for k, v in r.requests.items()
        if not full(_OVERCOMMITTABLE, k)
    )


EXTENDED_REQUEST_LIMITED: Final = node_rule(
    "resource-extended-request-limited",
    _FIELDS,
    "an extended resource or hugepages in spec.<pool>.resources.requests or spec.router.resources.requests needs a "
    "limit of the same quantity (they cannot be overcommitted): set resources.limits to the request, or set only "
    "the limit",
    checks=(
        (
            ResourceRequirements,
            _places.resources,
            _not_overcommitted,
            f"!has(self.requests) || self.requests.all(k, k.matches({quote(_OVERCOMMITTABLE)}) || "
            f"(has(self.limits) && k in self.limits && (!({_compare_cel('k')}) || {_compare_to_cel('k')} == 0)))",
            ".requests",
        ),
    ),
)


def _hugepages_sized(r: ResourceRequirements) -> bool:
    keys = {*r.limits, *r.requests}
    return not any(k.startswith("hugepages-") for k in keys) or bool(keys & {"cpu", "memory"})


def _any_cel(field: str, condition: str) -> str:
    return f"(has(self.{field}) && {condition.format(m=f'self.{field}')})"


HUGEPAGES_NEED_CPU_OR_MEMORY: Final = node_rule(
    "resource-hugepages-cpu-memory",
    _FIELDS,
    "hugepages in spec.<pool>.resources or spec.router.resources need a cpu or memory request or limit beside "
    "them: add resources.limits.memory (or cpu)",
    checks=(
        (
            ResourceRequirements,
            _places.resources,
            _hugepages_sized,
            "!("
            + " || ".join(_any_cel(f, "{m}.exists(k, k.startsWith('hugepages-'))") for f in ("limits", "requests"))
            + ") || "
            + " || ".join(_any_cel(f, "('cpu' in {m} || 'memory' in {m})") for f in ("limits", "requests")),
            ".limits",
        ),
    ),
)

RULES: Final[tuple[Rule, ...]] = (
    RESOURCE_NAMES,
    RESOURCE_QUANTITIES,
    REQUEST_WITHIN_LIMIT,
    EXTENDED_REQUEST_LIMITED,
    HUGEPAGES_NEED_CPU_OR_MEMORY,
)
"""This module's rules in table order."""
