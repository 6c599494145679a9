"""The planner's inputs, settings, remembered state and decisions (pure data; `planner.decide` maps one to another).

`PlannerState` is what the planner learned (per-server capacities, decode step samples) and remembers (its
recommendations over the stabilization window, how long it has watched); the operator persists it in the service's
status through `to_wire`/`from_wire`, so a restart or a failover keeps the capacities. Its times are the caller's
monotonic clock: another process's clock is told apart by `planner` (a clock that went back, or a gap), which then
restarts the watch rather than trusting the times.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from disaggspec.autoscale.capacity import StepSample
from disaggspec.servinghealth.samples import PodSample


@dataclass(frozen=True)
class PoolLimits:
    """One pool's floor and ceiling (`spec.autoscaling`)."""

    min_replicas: int
    max_replicas: int

    def clamp(self, replicas: int) -> int:
        return min(max(replicas, self.min_replicas), self.max_replicas)


@dataclass(frozen=True)
class PlannerSettings:
    """The targets and limits of one service (`spec.autoscaling.planner`), and the model's tuning (defaults)."""

    ttft_seconds: float
    itl_seconds: float
    prefill: PoolLimits
    decode: PoolLimits
    ratio_min: float | None
    """Prefill/decode replica ratio band; None: unbounded."""
    ratio_max: float | None
    lead_seconds: float
    """How far ahead scale-up looks: the time a new server takes to load the model and become ready."""
    stabilization_seconds: float
    """Scale-down takes the highest recommendation of this window (as the HorizontalPodAutoscaler does)."""
    recent_seconds: float = 60.0
    """Demand now is the mean of this much of the window (the trend is fitted over all of it)..."""
    surge_seconds: float = 20.0
    """...or the mean of this much, when it stands above the rounds before it beyond their noise: a step up in load
    shows in the last rounds before it moves the minute's mean (`signals.stepped_up`)."""
    queue_threshold: float = 2.0
    """Waiting requests per server that, held at every scrape for `persist_seconds`, mean a saturated pool."""
    persist_seconds: float = 30.0
    utilisation_min: float = 0.5
    utilisation_max: float = 0.9
    decode_headroom: float = 0.9
    """Share of one decode server's ITL/KV capacity planned for (routing is never perfectly even)."""
    handover_gate: float = 1.15
    """Decode is sized for what prefill is about to hand over once that is this many times the requests prefill
    passes on now (below it the two differ by noise, and decode's own load is the better reading)."""
    learn_weight: float = 0.3
    """EWMA weight of one window's observation."""
    step_samples_per_bucket: int = 4
    step_samples_limit: int = 48


Series = Mapping[str, Sequence[tuple[float, PodSample]]]


@dataclass(frozen=True)
class PoolWindow:
    """One pool over the window, from the monitor's scrapes."""

    replicas: int
    """What the scale target asks now."""
    ready: int
    """Ready servers that were scraped."""
    series: Series
    """Pod name -> (monotonic seconds, sample), oldest first."""


@dataclass(frozen=True)
class ServiceWindow:
    """Both pools of one service; `rolling_out`: a rollout is under way (scale-down waits for its end)."""

    prefill: PoolWindow
    decode: PoolWindow
    rolling_out: bool
    fingerprint: str | None = None
    """The spec fingerprint of the servers; a new one forgets the capacities learned (None: not tracked)."""


@dataclass(frozen=True)
class PlannerState:
    """What the planner learned and remembers between windows (see the module docstring)."""

    prefill_rate: float | None = None
    """Prompt tokens per second one prefill server sustains."""
    mean_prompt: float | None = None
    mean_output: float | None = None
    """Output tokens per request (decode), learned from the windows its load held steady."""
    step_samples: tuple[StepSample, ...] = ()
    kv_requests: float | None = None
    """Requests one decode server holds in KV."""
    accept_length: float | None = None
    fingerprint: str | None = None
    clock: float | None = None
    """The `now` of the decision that made this state."""
    watching_since: float | None = None
    """Since when the planner has watched without a gap: scale-down needs `stabilization_seconds` of it."""
    learned_until: float | None = None
    """The latest scrape time learned from (windows overlap: nothing is learned twice)."""
    history: tuple[tuple[float, int, int, int], ...] = ()
    """(time, prefill, decode, prefill for its arrivals alone) recommendations within the stabilization window."""

    def to_wire(self) -> dict[str, Any]:
        """A small JSON-able dict (for the service's status)."""
        wire: dict[str, Any] = {"version": 1}
        scalars = {
            "prefillTokensPerSecond": self.prefill_rate,
            "meanPromptTokens": self.mean_prompt,
            "meanOutputTokens": self.mean_output,
            "kvRequests": self.kv_requests,
            "acceptLength": self.accept_length,
            "clock": self.clock,
            "watchingSince": self.watching_since,
            "learnedUntil": self.learned_until,
        }
        wire |= {key: _short(value) for key, value in scalars.items() if value is not None}
        if self.fingerprint is not None:
            wire["fingerprint"] = self.fingerprint
        if self.step_samples:
            wire["decodeSteps"] = [[_short(n), _short(t)] for n, t in self.step_samples]
        if self.history:
            wire["history"] = [[_short(t), p, d, standing] for t, p, d, standing in self.history]
        return wire

    @classmethod
    def from_wire(cls, wire: Mapping[str, Any] | None) -> PlannerState:
        """The state `to_wire` wrote; a field that does not read back is dropped (learned again), never an error."""
        if not isinstance(wire, Mapping) or wire.get("version") != 1:
            return cls()

        def number(key: str) -> float | None:
            value = wire.get(key)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                return None
            return float(value)

        def rows(key: str, width: int) -> list[list[float]]:
            found = wire.get(key)
            if not isinstance(found, list) or not all(
                isinstance(row, list) and len(row) == width and all(isinstance(v, int | float) for v in row)
                for row in found
            ):
                return []
            return found

        fingerprint = wire.get("fingerprint")
        return cls(
            prefill_rate=number("prefillTokensPerSecond"),
            mean_prompt=number("meanPromptTokens"),
            mean_output=number("meanOutputTokens"),
            step_samples=tuple((float(n), float(t)) for n, t in rows("decodeSteps", 2) if n > 0 and t > 0),
            kv_requests=number("kvRequests"),
            accept_length=number("acceptLength"),
            fingerprint=fingerprint if isinstance(fingerprint, str) else None,
            clock=number("clock"),
            watching_since=number("watchingSince"),
            learned_until=number("learnedUntil"),
            history=tuple((float(t), int(p), int(d), int(s)) for t, p, d, s in rows("history", 4))
            # Written before the prefill-for-its-arrivals column: that is the whole recommendation.
            or tuple((float(t), int(p), int(d), int(p)) for t, p, d in rows("history", 3)),
        )


def _short(value: float) -> float:
    return float(f"{value:.6g}")


@dataclass(frozen=True)
class PoolDecision:
    """One pool's replicas: `reason` says why in words, `inputs` are the numbers behind it."""

    role: str
    current: int
    desired: int
    reason: str
    inputs: Mapping[str, float]


@dataclass(frozen=True)
class Decision:
    """Both pools; `message` is one line naming the inputs that drove the decision."""

    prefill: PoolDecision
    decode: PoolDecision
    message: str
