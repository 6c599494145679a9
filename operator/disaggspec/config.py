"""Operator-wide settings that are not part of any DisaggSpecService: router image, namespaces, resync period.

Settings come from environment variables (the chart sets them from its values), parsed once at start-up by
`from_env`; render receives the resulting frozen object, so render stays pure and testable with any settings. There is
no default SGLang image: every service names its own (`spec.sglang.image` is required).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class OperatorConfig:
    """Settings shared by every service the operator reconciles."""

    router_image: str = ""
    """Image of the PD router for services that set no spec.router.image; empty means the router image pinned for the
    service's SGLang release (`RouterProfile.image`). One image for every release: set it only when all services run
    one release (the router packages differ between releases)."""
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means all."""
    resync_seconds: float = 300.0
    """How often every service is compared with its children even when nothing changed."""
    denied_namespaces: tuple[str, ...] = ("kube-system",)
    """Namespaces where the operator refuses to reconcile a service (renders no child there), whatever it watches: a
    guard for cluster-wide mode, where its ServiceAccount may create Deployments in any namespace."""


def from_env(env: Mapping[str, str] | None = None) -> OperatorConfig:
    """Read `DISAGGSPEC_*` variables; unset ones keep their defaults.

    `DISAGGSPEC_DENIED_NAMESPACES` is a comma list; set but empty, it denies none (unset: `kube-system`).
    """
    env = os.environ if env is None else env
    namespaces = _names(env.get("DISAGGSPEC_NAMESPACES", ""))
    denied = env.get("DISAGGSPEC_DENIED_NAMESPACES")
    denied_namespaces = OperatorConfig.denied_namespaces if denied is None else _names(denied)
    resync = env.get("DISAGGSPEC_RESYNC_SECONDS", "300")
    try:
        resync_seconds = float(resync)
    except ValueError:
        resync_seconds = 0.0
    if not resync_seconds > 0:
        raise ValueError(f"DISAGGSPEC_RESYNC_SECONDS must be a positive number of seconds, not {resync!r}")
    return OperatorConfig(
        router_image=env.get("DISAGGSPEC_ROUTER_IMAGE", ""),
        namespaces=namespaces,
        resync_seconds=resync_seconds,
        denied_namespaces=denied_namespaces,
    )


def _names(value: str) -> tuple[str, ...]:
    """A comma-separated list, blanks and empty items dropped, duplicates kept once (in order)."""
    return tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
