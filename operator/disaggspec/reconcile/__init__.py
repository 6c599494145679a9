"""One reconcile pass of a DisaggSpecService, as named stages: `reconciler` runs them (its docstring lists them),
`guards` holds what may stop a pass from writing, `events` says which Events a status transition emits."""

from disaggspec.reconcile.guards import ROLLBACK_HOLD_SECONDS, ApiMissing, HeldOff, missing_api
from disaggspec.reconcile.reconciler import Reconciler, model_cache_observation, render_failure

__all__ = [
    "ROLLBACK_HOLD_SECONDS",
    "ApiMissing",
    "HeldOff",
    "Reconciler",
    "missing_api",
    "model_cache_observation",
    "render_failure",
]
