"""The table's row types and the shapes many rows share: a rule checked per pool over its effective speculative
settings, and a rule checked on each pool's own spec."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel

from disaggspec.api.effective import POOL_NAMES, EffectiveSpeculative, PoolName, effective_speculative_pair, pool
from disaggspec.api.v1alpha1 import DisaggSpecService, DisaggSpecServiceSpec, PoolSpec
from disaggspec.sglang.profiles import SGLangProfile, profile_for
from disaggspec.validation._cel import both


@dataclass(frozen=True)
class Violation:
    """One failed rule: which rule, the field path it points at, and the rule's message."""

    rule: str
    field: str
    message: str


@dataclass(frozen=True)
class Cel:
    """A rule's CEL form: the expression, the schema node it sits on, and an optional fieldPath relative to it."""

    node: type[BaseModel] | Literal["root"]
    expression: str
    field_path: str | None = None


Check = Callable[[DisaggSpecService], Iterable[str]]
"""Yields the field path of every place the rule is violated (nothing when it holds)."""
TransitionCheck = Callable[[DisaggSpecService, DisaggSpecService], Iterable[str]]


@dataclass(frozen=True)
class _Row:
    """What every row says: its id, the fields it reads, and the message a violation carries."""

    id: str
    fields: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class Rule(_Row):
    """One row of the table."""

    check: Check
    cel: Cel | None = None


@dataclass(frozen=True)
class TransitionRule(_Row):
    """A rule over an update (old -> new); its CEL form is a transition rule using `oldSelf`."""

    check: TransitionCheck
    cel: Cel


def profile_of(service: DisaggSpecService) -> SGLangProfile:
    """The profile of the SGLang release the service runs."""
    return profile_for(service.spec.sglang.version)


def speculative_path(p: PoolName, wire: str) -> str:
    """Where a pool's effective speculative field is reported: under the pool's own speculative block."""
    return f"spec.{p}.speculative.{wire}"


def effective_rule(
    rule_id: str,
    fields: tuple[str, ...],
    message: str,
    *,
    wire: str,
    holds: Callable[[DisaggSpecService, EffectiveSpeculative], bool],
    cel: Callable[[PoolName], str],
) -> Rule:
    """A rule over each pool's effective speculative settings: `holds` in Python, `cel(pool)` in CEL on the spec
    node for both pools; a violation points at `spec.<pool>.speculative.<wire>`."""

    def check(service: DisaggSpecService) -> Iterator[str]:
        for p, eff in effective_speculative_pair(service).items():
            if not holds(service, eff):
                yield speculative_path(p, wire)

    return Rule(rule_id, fields, message, check, Cel(DisaggSpecServiceSpec, both(cel)))


def pool_spec_rule(
    rule_id: str,
    fields: tuple[str, ...],
    message: str,
    *,
    wire: str,
    holds: Callable[[PoolSpec], bool],
    cel: str,
) -> Rule:
    """A rule over each pool's own spec: `holds` in Python, `cel` on the PoolSpec node; a violation points at
    `spec.<pool>.<wire>`."""

    def check(service: DisaggSpecService) -> Iterator[str]:
        for p in POOL_NAMES:
            if not holds(pool(service.spec, p)):
                yield f"spec.{p}.{wire}"

    return Rule(rule_id, fields, message, check, Cel(PoolSpec, cel))
