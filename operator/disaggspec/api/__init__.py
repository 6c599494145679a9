"""The DisaggSpecService API: typed models (`v1alpha1`), parsing, and each pool's effective speculative settings.

Import from here: `parse_service`, the models, and `effective_speculative`. The CRD generator (`tools.crd`, build-time)
turns these models plus the CEL rules of `disaggspec.validation` into the committed CRD YAML. This package imports
neither kopf nor kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from disaggspec.api.effective import (
    EffectiveSpeculative,
    PoolName,
    effective_speculative,
    effective_speculative_pair,
    pool,
)
from disaggspec.api.v1alpha1 import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    DisaggSpecService,
    DisaggSpecServiceSpec,
    DisaggSpecServiceStatus,
    PoolSpec,
)


def parse_service(obj: Mapping[str, Any]) -> DisaggSpecService:
    """Parse a DisaggSpecService object (as the API server or a YAML file gives it); raises pydantic.ValidationError."""
    return DisaggSpecService.model_validate(dict(obj))


def parse_spec(spec: Mapping[str, Any]) -> DisaggSpecServiceSpec:
    """Parse only the `spec` of a DisaggSpecService (what a kopf handler receives as `spec`)."""
    return DisaggSpecServiceSpec.model_validate(dict(spec))


__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "DisaggSpecService",
    "DisaggSpecServiceSpec",
    "DisaggSpecServiceStatus",
    "EffectiveSpeculative",
    "PoolName",
    "PoolSpec",
    "effective_speculative",
    "effective_speculative_pair",
    "parse_service",
    "parse_spec",
    "pool",
]
