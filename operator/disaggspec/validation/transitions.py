"""Update rules (old -> new): fields a rollout could not survive changing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from disaggspec.api.effective import ALGORITHM
from disaggspec.api.v1alpha1 import DisaggSpecService, DisaggSpecServiceSpec, TransferSpec
from disaggspec.constants import POOLS
from disaggspec.validation._cel import both, effective
from disaggspec.validation._core import Cel, TransitionRule


def _algorithm_unchanged(old: DisaggSpecService, new: DisaggSpecService) -> Iterator[str]:
    """Each pool's effective algorithm (override over shared) is the same before and after the update."""
    if any(ALGORITHM.resolve(old.spec, p) != ALGORITHM.resolve(new.spec, p) for p in POOLS):
        yield "spec.speculative.algorithm"


IMMUTABLE_ALGORITHM: Final = TransitionRule(
    id="immutable-speculative-algorithm",
    fields=("spec.speculative.algorithm", "spec.prefill.speculative.algorithm", "spec.decode.speculative.algorithm"),
    message="the speculative algorithm (spec.speculative.algorithm and any pool override) is immutable: during a "
    "rollout old and new pods would exchange hidden states of different widths; create a new DisaggSpecService "
    "instead",
    check=_algorithm_unchanged,
    # On the spec node and over the effective values, so moving the change into both pools' overrides (which a
    # transition rule on spec.speculative alone would not see) is caught too.
    cel=Cel(
        DisaggSpecServiceSpec,
        both(lambda p: f"{effective(p, ALGORITHM)} == {effective(p, ALGORITHM, root='oldSelf')}"),
        ".speculative.algorithm",
    ),
)


def _backend_unchanged(old: DisaggSpecService, new: DisaggSpecService) -> Iterator[str]:
    if old.spec.transfer.backend != new.spec.transfer.backend:
        yield "spec.transfer.backend"


IMMUTABLE_TRANSFER_BACKEND: Final = TransitionRule(
    id="immutable-transfer-backend",
    fields=("spec.transfer.backend",),
    message="spec.transfer.backend is immutable: during a rollout old and new pods could not reach each other; "
    "create a new DisaggSpecService instead",
    check=_backend_unchanged,
    cel=Cel(TransferSpec, "self.backend == oldSelf.backend", ".backend"),
)
