"""Operator-wide settings that are not part of any DisaggSpecService: default images, router image, namespaces.

Settings come from environment variables (the chart sets them from its values), parsed once at start-up by
`from_env`; render receives the resulting frozen object, so render stays pure and testable with any settings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

# The patched SGLang image per supported version (built from images/sglang/); the repository is configurable.
DEFAULT_IMAGE_REPOSITORY = "disaggspec/sglang"
DEFAULT_IMAGE_TAGS: Mapping[str, str] = {"0.5.2": "v0.5.2-disaggspec", "0.5.23": "v0.5.23-disaggspec"}


@dataclass(frozen=True)
class OperatorConfig:
    """Settings shared by every service the operator reconciles."""

    image_repository: str = DEFAULT_IMAGE_REPOSITORY
    image_tags: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_IMAGE_TAGS))
    router_image: str = ""
    """Image of the PD router; empty means the service's SGLang image (which ships sglang_router)."""
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch; empty means all."""
    resync_seconds: float = 300.0
    """How often every service is compared with its children even when nothing changed."""

    def sglang_image(self, version: str) -> str:
        """The patched image of `version` (the default when a service names no image of its own)."""
        return f"{self.image_repository}:{self.image_tags[version]}"


def from_env(env: Mapping[str, str] | None = None) -> OperatorConfig:
    """Read `DISAGGSPEC_*` variables; unset ones keep their defaults."""
    env = os.environ if env is None else env
    tags = dict(DEFAULT_IMAGE_TAGS)
    for version in DEFAULT_IMAGE_TAGS:
        key = "DISAGGSPEC_SGLANG_TAG_" + version.replace(".", "_")
        if env.get(key):
            tags[version] = env[key]
    namespaces = tuple(ns.strip() for ns in env.get("DISAGGSPEC_NAMESPACES", "").split(",") if ns.strip())
    resync = env.get("DISAGGSPEC_RESYNC_SECONDS", "300")
    try:
        resync_seconds = float(resync)
    except ValueError:
        resync_seconds = 0.0
    if not resync_seconds > 0:
        raise ValueError(f"DISAGGSPEC_RESYNC_SECONDS must be a positive number of seconds, not {resync!r}")
    return OperatorConfig(
        image_repository=env.get("DISAGGSPEC_SGLANG_REPOSITORY", DEFAULT_IMAGE_REPOSITORY),
        image_tags=tags,
        router_image=env.get("DISAGGSPEC_ROUTER_IMAGE", ""),
        namespaces=namespaces,
        resync_seconds=resync_seconds,
    )
