"""The verdicts behind SpecDecodeHealthy and TransferHealthy, from a window of pool-pod signals (pure, no clock).

`reduce` turns one pod's scrapes (time, `PodSample`) within the window into a `PodWindow`: counter increases (a
decrease is a restarted server: the new value counts from zero, as PromQL's `increase` does) and the accept length
weighted by the verify steps run since the previous scrape, so samples taken while the pod was idle weigh nothing.
Where a release has no verify-step counter (0.5.2), steps are estimated as generated tokens over the accept length
(each verify step emits accept-length tokens). `judge` then applies `HealthSettings`' thresholds to every pod of one
service. Messages name pods and numbers (rounded, so a steady state reads the same from one pass to the next).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from disaggspec import conditions as r
from disaggspec import constants as c
from disaggspec.conditions import ConditionReason
from disaggspec.config import HealthSettings
from disaggspec.servinghealth.samples import PodSample

Role = Literal["prefill", "decode"]


@dataclass(frozen=True)
class PodWindow:
    """One pool pod's signals over the window."""

    pod: str
    role: Role
    accept_length: float | None
    """Mean tokens per verify step in the window, weighted by steps; None without speculative traffic."""
    verify_steps: float
    requests: float
    failures: float
    """Bootstrap plus transfer failures in the window."""


@dataclass(frozen=True)
class Judgement:
    """One condition's status, reason and message."""

    reason: ConditionReason
    message: str


@dataclass(frozen=True)
class Verdict:
    """Both conditions of one service, and the numbers the operator exports as gauges."""

    spec_decode: Judgement
    transfer: Judgement
    accept_length: float | None
    """The window mean behind spec_decode; None when it is Unknown."""
    failures_per_second: float | None
    """Bootstrap plus transfer failures per second over the window; None when nothing answered."""

    def key(self) -> tuple[str, str]:
        """What a transition is: the two reasons (each reason has one status)."""
        return (self.spec_decode.reason.reason, self.transfer.reason.reason)


NOT_MEASURED = Verdict(
    Judgement(r.SPEC_DECODE_NOT_MEASURED, "not measured yet"),
    Judgement(r.TRANSFER_NOT_MEASURED, "not measured yet"),
    None,
    None,
)
"""What a service shows before its first measurement, or with measurement off."""


def _increase(before: float | None, after: float | None) -> float:
    if after is None:
        return 0.0
    if before is None or after < before:  # absent before, or the server restarted: counted from zero
        return after if before is not None else 0.0
    return after - before


def reduce(pod: str, role: Role, scrapes: Sequence[tuple[float, PodSample]]) -> PodWindow:
    """A pod's window from its scrapes (oldest first); one scrape alone shows no increase."""
    steps_total = weighted = requests = failures = 0.0
    for (_, before), (_, after) in itertools.pairwise(scrapes):
        requests += _increase(before.requests, after.requests)
        failures += _increase(before.bootstrap_failed, after.bootstrap_failed)
        failures += _increase(before.transfer_failed, after.transfer_failed)
        accept = after.accept_length
        if after.verify_calls is not None:
            steps = _increase(before.verify_calls, after.verify_calls)
        elif accept is not None and accept > 0:
            steps = _increase(before.generation_tokens, after.generation_tokens) / max(accept, 1.0)
        else:
            steps = 0.0
        if steps > 0 and accept is not None and accept > 0:
            steps_total += steps
            weighted += steps * accept
    mean = weighted / steps_total if steps_total else None
    return PodWindow(pod, role, mean, steps_total, requests, failures)


def _fmt(value: float) -> str:
    return f"{value:.2f}"


def _accept_length_judgement(
    decode: Sequence[PodWindow], steps: float, window: str, missing: str, settings: HealthSettings
) -> tuple[Judgement, float]:
    """SpecDecodeHealthy once the decode pods ran enough verify steps: their step-weighted mean accept length
    against the threshold, and that mean."""
    accept = sum(p.accept_length * p.verify_steps for p in decode if p.accept_length is not None) / steps
    each = ", ".join(
        f"{p.pod} {_fmt(p.accept_length)} ({p.verify_steps:.0f} steps)" for p in decode if p.accept_length is not None
    )
    low = accept < settings.min_accept_length
    comparison = "<" if low else ">="
    text = (
        f"mean accept length {_fmt(accept)} {comparison} {settings.min_accept_length:g} over {window}: {each}{missing}"
    )
    return Judgement(r.SPEC_DECODE_LOW_ACCEPT if low else r.SPEC_DECODE_ACCEPTING, text), accept


def _spec_decode_judgement(
    decode: Sequence[PodWindow], window: str, missing: str, settings: HealthSettings, error: str | None
) -> tuple[Judgement, float | None]:
    """SpecDecodeHealthy from the decode pods' windows (sorted by pod), and the mean accept length behind it."""
    if error is not None:
        return Judgement(r.SPEC_DECODE_NO_METRICS, error), None
    if not decode:
        return Judgement(r.SPEC_DECODE_NO_METRICS, f"no ready decode pod to measure{missing}"), None
    steps = sum(p.verify_steps for p in decode if p.accept_length is not None)
    if steps < max(settings.min_verify_steps, 1):
        text = (
            f"{steps:.0f} verify steps on the decode pods in {window}, {settings.min_verify_steps} needed to "
            f"judge{missing}"
        )
        return Judgement(r.SPEC_DECODE_NO_TRAFFIC, text), None
    return _accept_length_judgement(decode, steps, window, missing, settings)


def _transfer_judgement(
    pods: Sequence[PodWindow],
    span_seconds: float,
    window: str,
    missing: str,
    settings: HealthSettings,
    error: str | None,
) -> tuple[Judgement, float | None]:
    """TransferHealthy from every pool pod's window, and the failures per second behind it."""
    if error is not None:
        return Judgement(r.TRANSFER_NO_METRICS, error), None
    if not pods:
        return Judgement(r.TRANSFER_NO_METRICS, f"no ready pool pod to measure{missing}"), None
    failures = sum(p.failures for p in pods)
    requests = sum(p.requests for p in pods)
    rate = failures / span_seconds if span_seconds > 0 else 0.0
    failing = sorted((p for p in pods if p.failures > 0), key=lambda p: p.pod)
    each = ", ".join(f"{p.pod} {p.failures:.0f}" for p in failing)
    if failures >= max(settings.min_failures, 1) and rate > settings.max_failures_per_second:
        text = (
            f"{failures:.0f} bootstrap/transfer failures in {window} ({rate:.2f}/s > "
            f"{settings.max_failures_per_second:g}/s): {each}{missing}"
        )
        return Judgement(r.TRANSFER_FAILING, text), rate
    if requests == 0 and failures == 0:
        return Judgement(r.TRANSFER_NO_TRAFFIC, f"no request served in {window}{missing}"), rate
    counted = f": {each}" if each else ""
    text = (
        f"{failures:.0f} bootstrap/transfer failures for {requests:.0f} requests in {window} "
        f"({rate:.2f}/s){counted}{missing}"
    )
    return Judgement(r.TRANSFER_OK, text), rate


def judge(
    pods: Sequence[PodWindow],
    unreachable: Sequence[str],
    span_seconds: float,
    settings: HealthSettings,
    error: str | None = None,
) -> Verdict:
    """The verdict on one service from its pods' windows; `unreachable` names ready pods that did not answer,
    `span_seconds` is how much time the windows cover, `error` says why nothing could be read at all."""
    decode = sorted((p for p in pods if p.role == c.ROLE_DECODE), key=lambda p: p.pod)
    missing = f" (no answer from {', '.join(sorted(unreachable))})" if unreachable else ""
    window = f"the last {span_seconds:.0f}s"
    spec, accept = _spec_decode_judgement(decode, window, missing, settings, error)
    transfer, rate = _transfer_judgement(pods, span_seconds, window, missing, settings, error)
    return Verdict(spec, transfer, accept, rate)
