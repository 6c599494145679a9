"""The table's row types and the shapes many rows share: a rule checked per pool over its effective speculative
settings, and a rule checked on each pool's own spec."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, NamedTuple

from pydantic import BaseModel

from disaggspec.api.effective import EffectiveSpeculative, PoolName, effective_speculative_pair, pool
from disaggspec.api.v1alpha1 import DisaggSpecService, DisaggSpecServiceSpec, PoolSpec
from disaggspec.constants import POOLS
from disaggspec.sglang.profiles import SGLangProfile, profile_for


@dataclass(frozen=True)
class Violation:
    """One failed rule: which rule, the field path it points at, and the rule's message."""

    rule: str
    field: str
    message: str
    detail: str | None = None
    """What exactly is wrong at `field` (say, which option and why), for rules whose static message covers many
    cases; None for most rules."""


class Finding(NamedTuple):
    """What a check yields instead of a bare field path when it has a per-violation detail."""

    field: str
    detail: str


@dataclass(frozen=True)
class Cel:
    """A rule's CEL form: the expression, the schema node it sits on, and the fieldPath (relative to the node) the API
    server reports a violation at. A rule that checks its node as a whole (which source of a volume is set, say) has
    no field below it to name: it leaves `field_path` unset and says why in `on_node`, so the report names the node
    itself (`spec.model.volume`, `spec.prefill.env[2].valueFrom`)."""

    node: type[BaseModel] | Literal["root"]
    expression: str
    field_path: str | None = None
    on_node: str | None = None

    def __post_init__(self) -> None:
        if (self.field_path is None) == (self.on_node is None):
            raise ValueError(f"give a CEL rule either a field_path or why it reports its node: {self.expression}")


Check = Callable[[DisaggSpecService], Iterable[str | Finding]]
"""Yields the field path of every place the rule is violated (nothing when it holds), or a Finding with a detail."""
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
    cel: Cel | tuple[Cel, ...] | None = None
    """One CEL rule, or several (one per pool, each naming its own fieldPath) with this rule's message."""

    @property
    def cels(self) -> tuple[Cel, ...]:
        """Every CEL form of the rule (empty for a Python-only rule)."""
        return () if self.cel is None else (self.cel,) if isinstance(self.cel, Cel) else self.cel


@dataclass(frozen=True)
class TransitionRule(_Row):
    """A rule over an update (old -> new); its CEL form is a transition rule using `oldSelf`."""

    check: TransitionCheck
    cel: Cel

    @property
    def cels(self) -> tuple[Cel, ...]:
        """The rule's CEL transition rule, as a one-element tuple (the shape `Rule.cels` has)."""
        return (self.cel,)


def profile_of(service: DisaggSpecService) -> SGLangProfile:
    """The profile of the SGLang release the service runs."""
    return profile_for(service.spec.sglang.version)


def speculative_path(p: PoolName, wire: str) -> str:
    """Where a pool's effective speculative field is reported: under the pool's own speculative block."""
    return f"spec.{p}.speculative.{wire}"


def speculative_field_path(p: PoolName, wire: str) -> str:
    """The fieldPath, relative to the spec node, of `speculative_path(p, wire)`."""
    return "." + speculative_path(p, wire).removeprefix("spec.")


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
    node once per pool; a violation points at `spec.<pool>.speculative.<wire>`."""

    def check(service: DisaggSpecService) -> Iterator[str]:
        for p, eff in effective_speculative_pair(service).items():
            if not holds(service, eff):
                yield speculative_path(p, wire)

    # One CEL rule per pool, so the API server names the pool's own field as the Python twin does.
    cels = tuple(Cel(DisaggSpecServiceSpec, cel(p), speculative_field_path(p, wire)) for p in POOLS)
    return Rule(rule_id, fields, message, check, cels)


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
        for p in POOLS:
            if not holds(pool(service.spec, p)):
                yield f"spec.{p}.{wire}"

    return Rule(rule_id, fields, message, check, Cel(PoolSpec, cel, f".{wire}"))
