"""Why a DisaggSpecService spec is refused, as one value shared by admission and reconcile; pure: no kopf, no I/O.

A spec is refused either by the API models (a pydantic `ValidationError`: a field the schema does not allow) or by the
rule table (`validation.validate`, or `validation.validate_update` on an update). Both become a `Rejection`: the list
of (rule, field, message) problems, with `text` for the admission response, the SpecConfigConsistent message and the
SpecRejected Event, and `rules` for the `disaggspec_rule_rejections_total` metric. Schema errors carry the rule id
`schema`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pydantic

from disaggspec.api import DisaggSpecService, parse_service
from disaggspec.validation import Violation, validate, validate_update

SCHEMA_RULE: Final = "schema"
"""The rule id of a problem the API models found (not a rule of the table)."""


@dataclass(frozen=True)
class Problem:
    """One reason a spec is refused: the rule id, the field path it points at, and what is wrong (with the fix)."""

    rule: str
    field: str
    message: str
    detail: str | None = None
    """What exactly is wrong at `field`, when the rule says (appended to the static message in `text`)."""

    @property
    def text(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f"[{self.rule}] {self.field}: {self.message}{detail}"


@dataclass(frozen=True)
class Rejection:
    """Every problem of one spec; empty (falsy) when the spec is accepted."""

    problems: tuple[Problem, ...] = ()

    @classmethod
    def of_violations(cls, violations: Iterable[Violation]) -> Rejection:
        """The rule table's violations."""
        return cls(tuple(Problem(v.rule, v.field, v.message, v.detail) for v in violations))

    @classmethod
    def of_schema_error(cls, error: pydantic.ValidationError) -> Rejection:
        """The API models' errors, one problem per error, naming the field by its path."""
        return cls(
            tuple(
                Problem(SCHEMA_RULE, ".".join(str(part) for part in item["loc"]), item["msg"])
                for item in error.errors()
            )
        )

    def __bool__(self) -> bool:
        return bool(self.problems)

    @property
    def text(self) -> str:
        """Every problem as `[rule] field: message`, joined by "; "."""
        return "; ".join(problem.text for problem in self.problems)

    @property
    def rules(self) -> tuple[str, ...]:
        """The rule id of each problem (once per problem, as the metric counts them)."""
        return tuple(problem.rule for problem in self.problems)


ACCEPTED: Final = Rejection()
"""No problem."""


def check(obj: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> tuple[DisaggSpecService | None, Rejection]:
    """Parse and validate a DisaggSpecService object (an update of `old` when given).

    Returns the parsed service (None when the models refuse the object) and the rejection (ACCEPTED when none).
    """
    try:
        service = parse_service(obj)
        violations = validate(service) if old is None else validate_update(parse_service(old), service)
    except pydantic.ValidationError as error:
        return None, Rejection.of_schema_error(error)
    return service, Rejection.of_violations(violations)
