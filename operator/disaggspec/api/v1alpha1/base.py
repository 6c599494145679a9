"""The pieces every block of the v1alpha1 API shares: the base models (`SpecModel`, `StatusModel`) that put the wire
format in camelCase and set how unknown fields are treated, the string, list and argument bounds that keep the CRD's
CEL cost estimates finite, and the small annotated types (names, Secret keys, quantities) more than one block uses.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Bounds that keep CEL cost estimates finite; generous for any real manifest.
_MAX_STR: Final = 1024
_MAX_NAME: Final = 253
_MAX_ARG: Final = 4096
_MAX_LIST: Final = 128
_MAX_EXTRA_ARGS: Final = 64
_SERVER_PATH_PATTERN: Final = r"^[^-\s]\S*$"
"""A path or repo id rendered as a server argument's value: no whitespace, and no leading '-', which argparse would
read as the next option."""
_DNS_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A DNS subdomain (RFC 1123), the form of a PriorityClass name."""

Name = Annotated[str, Field(min_length=1, max_length=_MAX_NAME)]
ConfigKey = Annotated[str, Field(min_length=1, max_length=_MAX_NAME, pattern=r"^[-._a-zA-Z0-9]+$")]
"""A key of a Secret or ConfigMap (letters, digits, '-', '_', '.'), as the API server requires of the child's env."""
Quantity = int | Annotated[str, Field(max_length=64)]
QuantityMap = Annotated[dict[str, Quantity], Field(max_length=32)]
FreeForm = dict[str, Any]


class SpecModel(BaseModel):
    """Base of every spec model: camelCase on the wire, unknown fields rejected, immutable once parsed."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class StatusModel(BaseModel):
    """Base of every status model: camelCase on the wire, unknown fields ignored (written by newer operators)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)
