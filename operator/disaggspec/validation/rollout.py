"""Rules on spec.rollout: a rollout budget that can make progress."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from disaggspec.api.v1alpha1 import DisaggSpecService, RolloutSpec
from disaggspec.validation._core import Cel, Rule

_DEFAULT_SURGE: Final = RolloutSpec.model_fields["max_surge"].default
_DEFAULT_UNAVAILABLE: Final = RolloutSpec.model_fields["max_unavailable"].default


def _budget(service: DisaggSpecService) -> Iterator[str]:
    rollout = service.spec.rollout
    if rollout.max_surge + rollout.max_unavailable < 1:
        yield "spec.rollout.maxSurge"


ROLLOUT_BUDGET: Final = Rule(
    id="rollout-budget",
    fields=("spec.rollout.maxSurge", "spec.rollout.maxUnavailable"),
    message="spec.rollout.maxSurge and spec.rollout.maxUnavailable may not both be 0: a rollout could then neither "
    "start a new pod nor remove an old one; set maxSurge to 1 (needs a free slot for one pool pod) or "
    "maxUnavailable to 1 (replaces pods in place, one at a time)",
    check=_budget,
    cel=Cel(
        RolloutSpec,
        f"(has(self.maxSurge) ? self.maxSurge : {_DEFAULT_SURGE}) + "
        f"(has(self.maxUnavailable) ? self.maxUnavailable : {_DEFAULT_UNAVAILABLE}) >= 1",
        field_path=".maxSurge",
    ),
)

RULES: Final = (ROLLOUT_BUDGET,)
