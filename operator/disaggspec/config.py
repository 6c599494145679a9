"""Operator-wide settings that are not part of any DisaggSpecService: router image, namespaces, resync period, and how
the serving pods' runtime health is measured (`HealthSettings`, `DISAGGSPEC_HEALTH_*`).

Settings come from environment variables (the chart sets them from its values), parsed once at start-up by
`from_env`; render receives the resulting frozen object, so render stays pure and testable with any settings. There is
no default SGLang image: every service names its own (`spec.sglang.image` is required).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

HealthSource = Literal["scrape", "prometheus", "off"]


@dataclass(frozen=True)
class HealthSettings:
    """How the operator judges SpecDecodeHealthy and TransferHealthy (docs/operator.md, "Runtime health")."""

    source: HealthSource = "scrape"
    """`scrape`: the leader reads each ready pool pod's `/metrics` itself; `prometheus`: it queries `prometheus_url`
    (chosen whenever that is set); `off`: no measurement, both conditions stay Unknown (NotMeasured)."""
    prometheus_url: str = ""
    """Base URL of a Prometheus HTTP API (e.g. http://prometheus.monitoring:9090); empty: scrape the pods."""
    interval_seconds: float = 15.0
    """How often every service's pods are measured."""
    window_seconds: float = 300.0
    """The judgement looks at this much history (counter increases and the accept-length samples within it)."""
    timeout_seconds: float = 2.0
    """Per request (one pod's /metrics, one Prometheus query): a pod that does not answer costs at most this."""
    concurrency: int = 8
    """Requests in flight at once."""
    port: int = 30000
    """The pool pods' SGLang HTTP port (the rendered `--port`)."""
    min_accept_length: float = 1.1
    """A floor for every service: SpecDecodeHealthy is False when the window's mean accept length (tokens per verify
    step, bonus included) is below this: 1.0 means no draft token is ever accepted."""
    min_verify_steps: int = 50
    """Verify steps the decode pods must have run in the window for a judgement; fewer: Unknown (NoTraffic)."""
    accept_drop: float = 0.25
    """SpecDecodeHealthy turns False when the window's normalised accept rate, (L - 1) / (numDraftTokens - 1), is
    more than this fraction below the service's expected rate (spec.speculative.expectedAcceptLength, else the
    baseline learned from its own healthy traffic, status.specDecode). 0.25 flags the seed's bug (DeepSeek NEXTN, 4
    draft tokens: 1.565 -> 1.362, a 36% drop) and tolerates the swing between prompt mixes (docs/operator.md)."""
    accept_recover: float = 0.15
    """Hysteresis: once False, SpecDecodeHealthy turns True again only when the drop is at most this fraction."""
    drop_min_verify_steps: int = 500
    """Verify steps the window needs to judge a drop against the expectation (fewer: only the floor is judged, and a
    False condition stays False): with fewer, the window mean of a healthy service wanders by more than 10%."""
    baseline_min_verify_steps: int = 2000
    """A learned baseline is used (judged against) once it is based on at least this many verify steps."""
    baseline_window_steps: int = 200
    """A window teaches the baseline only with at least this many verify steps (and only when it is healthy and
    within `accept_recover` of the current baseline); at most one window per `window_seconds`, so learned windows do
    not overlap."""
    baseline_weight: float = 0.2
    """The smallest weight a new window gets in the baseline (an exponentially weighted mean; until the baseline holds
    1/weight windows' worth of steps it is the plain step-weighted mean)."""
    max_failures_per_second: float = 0.05
    """TransferHealthy is False when bootstrap plus transfer failures per second over the window exceed this..."""
    min_failures: int = 3
    """...and at least this many failures were counted (one stray failure is not a verdict)."""


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
    health: HealthSettings = field(default_factory=HealthSettings)
    """Runtime health measurement (SpecDecodeHealthy, TransferHealthy)."""


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
        health=health_from_env(env),
    )


def health_from_env(env: Mapping[str, str]) -> HealthSettings:
    """`DISAGGSPEC_HEALTH_*`: SOURCE (scrape|off; PROMETHEUS_URL set means prometheus), PROMETHEUS_URL,
    INTERVAL_SECONDS, WINDOW_SECONDS, TIMEOUT_SECONDS, CONCURRENCY, PORT, MIN_ACCEPT_LENGTH, MIN_VERIFY_STEPS,
    ACCEPT_DROP, ACCEPT_RECOVER, DROP_MIN_VERIFY_STEPS, BASELINE_MIN_VERIFY_STEPS, BASELINE_WINDOW_STEPS,
    BASELINE_WEIGHT, MAX_FAILURES_PER_SECOND, MIN_FAILURES. Unset ones keep `HealthSettings`' defaults; a bad value
    raises."""
    defaults = HealthSettings()
    url = env.get("DISAGGSPEC_HEALTH_PROMETHEUS_URL", "").strip().rstrip("/")
    source = env.get("DISAGGSPEC_HEALTH_SOURCE", "scrape").strip() or "scrape"
    if source not in ("scrape", "off"):
        raise ValueError(f"DISAGGSPEC_HEALTH_SOURCE must be scrape or off (set PROMETHEUS_URL instead), not {source!r}")
    chosen: HealthSource = "off" if source == "off" else ("prometheus" if url else "scrape")

    def number(key: str, default: float, minimum: float = 0.0) -> float:
        raw = env.get(f"DISAGGSPEC_HEALTH_{key}")
        if raw is None or not raw.strip():
            return default
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not value > minimum:
            raise ValueError(f"DISAGGSPEC_HEALTH_{key} must be a number above {minimum:g}, not {raw!r}")
        return value

    def fraction(key: str, default: float) -> float:
        value = number(key, default)
        if value >= 1:
            raise ValueError(f"DISAGGSPEC_HEALTH_{key} must be a fraction below 1, not {value:g}")
        return value

    return HealthSettings(
        source=chosen,
        prometheus_url=url,
        interval_seconds=number("INTERVAL_SECONDS", defaults.interval_seconds),
        window_seconds=number("WINDOW_SECONDS", defaults.window_seconds),
        timeout_seconds=number("TIMEOUT_SECONDS", defaults.timeout_seconds),
        concurrency=int(number("CONCURRENCY", defaults.concurrency)),
        port=int(number("PORT", defaults.port)),
        min_accept_length=number("MIN_ACCEPT_LENGTH", defaults.min_accept_length),
        min_verify_steps=int(number("MIN_VERIFY_STEPS", defaults.min_verify_steps, minimum=-1)),
        accept_drop=fraction("ACCEPT_DROP", defaults.accept_drop),
        accept_recover=fraction("ACCEPT_RECOVER", defaults.accept_recover),
        drop_min_verify_steps=int(number("DROP_MIN_VERIFY_STEPS", defaults.drop_min_verify_steps, minimum=-1)),
        baseline_min_verify_steps=int(
            number("BASELINE_MIN_VERIFY_STEPS", defaults.baseline_min_verify_steps, minimum=-1)
        ),
        baseline_window_steps=int(number("BASELINE_WINDOW_STEPS", defaults.baseline_window_steps, minimum=-1)),
        baseline_weight=fraction("BASELINE_WEIGHT", defaults.baseline_weight),
        max_failures_per_second=number("MAX_FAILURES_PER_SECOND", defaults.max_failures_per_second, minimum=-1),
        min_failures=int(number("MIN_FAILURES", defaults.min_failures, minimum=-1)),
    )


def _names(value: str) -> tuple[str, ...]:
    """A comma-separated list, blanks and empty items dropped, duplicates kept once (in order)."""
    return tuple(dict.fromkeys(name.strip() for name in value.split(",") if name.strip()))
