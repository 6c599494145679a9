"""The verdicts behind SpecDecodeHealthy and TransferHealthy, from a window of pool-pod signals (pure, no clock).

`reduce` turns one pod's scrapes (time, `PodSample`) within the window into a `PodWindow`: counter increases (a
decrease is a restarted server: the new value counts from zero, as PromQL's `increase` does) and the accept length
weighted by the verify steps run since the previous scrape, so samples taken while the pod was idle weigh nothing.
Where a release has no verify-step counter (0.5.2), steps are estimated as generated tokens over the accept length
(each verify step emits accept-length tokens). `judge` then applies `HealthSettings`' thresholds to every pod of one
service. Messages name pods and numbers (rounded, so a steady state reads the same from one pass to the next).

SpecDecodeHealthy judges drops, not only a floor (issue 29): the window's accept length L is normalised by the draft
tokens, r = (L - 1) / (numDraftTokens - 1), which is exactly what SGLang 0.5.23 exports as `sglang:spec_accept_rate`
(accepted drafts over proposed drafts, proposed = verify steps x (numDraftTokens - 1):
`sglang/srt/managers/scheduler_components/metrics_reporter.py`, `SchedulerMetricsReporter.report_decode_stats`), and
that gauge is used where the pods export it. r is compared with the service's `Expectation` (the spec's
expectedAcceptLength, else a `Baseline` learned from its own healthy windows by `learn`): more than
`HealthSettings.accept_drop` below it is False; once False, it turns True again only within `accept_recover`
(hysteresis). The absolute floor `min_accept_length` still applies to every service. A judgement made before the
monitor has watched a whole window is `provisional`: status keeps the condition it already holds instead.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
    accept_rate: float | None = None
    """Mean `sglang:spec_accept_rate` in the window, weighted by steps (SGLang 0.5.23 only); None without it."""


@dataclass(frozen=True)
class Judgement:
    """One condition's status, reason and message."""

    reason: ConditionReason
    message: str
    provisional: bool = False
    """Not a verdict yet (no measurement by this process, or too short a history to tell NoTraffic): status keeps
    the condition it already holds, and writes this one only when it holds none."""


@dataclass(frozen=True)
class Baseline:
    """The accept length a service's own healthy traffic showed (`status.specDecode`)."""

    accept_length: float
    verify_steps: float
    fingerprint: str | None = None
    """The spec fingerprint it was learned under; another one starts afresh."""


@dataclass(frozen=True)
class Expectation:
    """What SpecDecodeHealthy compares the window with."""

    accept_length: float
    num_draft_tokens: int
    source: str
    """Where it comes from, as the message says it."""

    @property
    def rate(self) -> float:
        return normalised(self.accept_length, self.num_draft_tokens)


@dataclass(frozen=True)
class Verdict:
    """Both conditions of one service, and the numbers the operator exports as gauges."""

    spec_decode: Judgement
    transfer: Judgement
    accept_length: float | None
    """The window mean behind spec_decode; None when it is Unknown."""
    failures_per_second: float | None
    """Bootstrap plus transfer failures per second over the window; None when nothing answered."""
    expected: Expectation | None = None
    """What the window was judged against (None: only the floor)."""
    verify_steps: float = 0.0
    """The decode pods' verify steps in the window."""
    baseline: Baseline | None = None
    """The learned baseline after this measurement (set by the monitor); None: none learned, or not measured by this
    process yet (status keeps what it holds)."""

    def key(self) -> tuple[str, str]:
        """What a transition is: the two reasons (each reason has one status)."""
        return (self.spec_decode.reason.reason, self.transfer.reason.reason)


NOT_MEASURED = Verdict(
    Judgement(r.SPEC_DECODE_NOT_MEASURED, "not measured yet"),
    Judgement(r.TRANSFER_NOT_MEASURED, "not measured yet"),
    None,
    None,
)
"""What a service shows with measurement off (and before its first measurement when it never had a verdict)."""

PENDING = Verdict(
    Judgement(r.SPEC_DECODE_NOT_MEASURED, "not measured yet", provisional=True),
    Judgement(r.TRANSFER_NOT_MEASURED, "not measured yet", provisional=True),
    None,
    None,
)
"""No verdict from this process yet (it just started, or just became the leader): status keeps the conditions it
holds (a restart or a failover writes nothing for a service whose state did not change); a new service reads
NotMeasured."""


def normalised(accept_length: float, num_draft_tokens: int) -> float:
    """(L - 1) / (numDraftTokens - 1): the fraction of proposed draft tokens accepted, 0 (none) to 1 (every one);
    SGLang 0.5.23's `sglang:spec_accept_rate`."""
    return (accept_length - 1.0) / max(num_draft_tokens - 1, 1)


def expectation(
    expected_accept_length: float | None,
    num_draft_tokens: int | None,
    baseline: Baseline | None,
    settings: HealthSettings,
) -> Expectation | None:
    """The spec's expectedAcceptLength, else a learned baseline based on enough verify steps, else None (only the
    floor is judged); None too without numDraftTokens (not speculative)."""
    if num_draft_tokens is None or num_draft_tokens < 2:
        return None
    if expected_accept_length is not None:
        return Expectation(expected_accept_length, num_draft_tokens, "spec.speculative.expectedAcceptLength")
    if (
        baseline is not None
        and baseline.verify_steps >= settings.baseline_min_verify_steps
        and baseline.accept_length > 1
    ):
        steps = _significant(baseline.verify_steps)
        return Expectation(baseline.accept_length, num_draft_tokens, f"learned from {steps} verify steps")
    return None


def _significant(value: float, digits: int = 2) -> int:
    """`value` rounded down to `digits` significant digits (what status keeps, so it changes seldom)."""
    if value < 1:
        return 0
    scale = 10 ** max(math.floor(math.log10(value)) - digits + 1, 0)
    return int(value // scale * scale)


def learn(
    baseline: Baseline | None, verdict: Verdict, fingerprint: str | None, settings: HealthSettings
) -> Baseline | None:
    """The baseline after one more window (pure): only a healthy window (AcceptLengthNormal, and within
    `accept_recover` of the expectation it was judged against) with at least `baseline_window_steps` verify steps
    teaches it; anything else leaves it as it was (frozen while unhealthy, so a drop is never learned as normal). A
    baseline of another fingerprint is dropped. The mean is step-weighted until it holds 1/`baseline_weight` windows'
    worth of steps, then exponentially weighted (weight `baseline_weight`), so it follows a slow drift of the traffic
    within the recover band."""
    if baseline is not None and baseline.fingerprint != fingerprint:
        baseline = None
    accept, steps = verdict.accept_length, verdict.verify_steps
    if (
        verdict.spec_decode.reason not in (r.SPEC_DECODE_ACCEPTING, r.SPEC_DECODE_LEARNING)
        or accept is None
        or steps < max(settings.baseline_window_steps, 1)
    ):
        return baseline
    expected = verdict.expected
    if expected is not None and _drop(accept, expected) > settings.accept_recover:
        return baseline
    if baseline is None:
        return Baseline(round(accept, 4), float(_significant(steps)), fingerprint)
    total = baseline.verify_steps + steps
    weight = max(steps / total, settings.baseline_weight)
    learned = baseline.accept_length + weight * (accept - baseline.accept_length)
    return Baseline(round(learned, 4), float(_significant(total)), fingerprint)


def _drop(accept: float, expected: Expectation, rate: float | None = None) -> float:
    """How far below the expectation the window is, as a fraction of the expected normalised rate (negative: above)."""
    measured = normalised(accept, expected.num_draft_tokens) if rate is None else rate
    return 1.0 - measured / expected.rate if expected.rate > 0 else 0.0


def _increase(before: float | None, after: float | None) -> float:
    if after is None:
        return 0.0
    if before is None or after < before:  # absent before, or the server restarted: counted from zero
        return after if before is not None else 0.0
    return after - before


def reduce(pod: str, role: Role, scrapes: Sequence[tuple[float, PodSample]]) -> PodWindow:
    """A pod's window from its scrapes (oldest first); one scrape alone shows no increase."""
    steps_total = weighted = requests = failures = rate_steps = rated = 0.0
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
            if after.accept_rate is not None:
                rate_steps += steps
                rated += steps * after.accept_rate
    mean = weighted / steps_total if steps_total else None
    # The rate only when every step of the window had one (a pod that exports it always does).
    rate = rated / rate_steps if steps_total and rate_steps == steps_total else None
    return PodWindow(pod, role, mean, steps_total, requests, failures, rate)


def _fmt(value: float) -> str:
    return f"{value:.2f}"


@dataclass(frozen=True)
class SpecContext:
    """What SpecDecodeHealthy needs beyond the pods' windows (the monitor's state; pure data)."""

    expected: Expectation | None = None
    was_low: bool = False
    """SpecDecodeHealthy was False (hysteresis: it turns True again only within `accept_recover`)."""
    settled: bool = True
    """The history covers the whole window (False right after the monitor started watching the service): a judgement
    of too little traffic is then provisional."""
    learning: str = ""
    """Without an expectation: how far the baseline is (for the message)."""


def _accept_length_judgement(
    decode: Sequence[PodWindow], steps: float, window: str, missing: str, settings: HealthSettings, context: SpecContext
) -> tuple[Judgement, float]:
    """SpecDecodeHealthy once the decode pods ran enough verify steps: their step-weighted mean accept length
    against the floor and the expectation, and that mean."""
    accept = sum(p.accept_length * p.verify_steps for p in decode if p.accept_length is not None) / steps
    each = ", ".join(
        f"{p.pod} {_fmt(p.accept_length)} ({p.verify_steps:.0f} steps)" for p in decode if p.accept_length is not None
    )
    if accept < settings.min_accept_length:
        text = f"mean accept length {_fmt(accept)} < {settings.min_accept_length:g} over {window}: {each}{missing}"
        return Judgement(r.SPEC_DECODE_LOW_ACCEPT, text), accept
    expected = context.expected
    if expected is None:
        text = (
            f"mean accept length {_fmt(accept)} >= {settings.min_accept_length:g} over {window}; no expected accept "
            f"length yet (spec.speculative.expectedAcceptLength unset{context.learning}): {each}{missing}"
        )
        return Judgement(r.SPEC_DECODE_LEARNING, text), accept
    rated = [p for p in decode if p.accept_length is not None]
    rate = None
    if rated and all(p.accept_rate is not None for p in rated):
        rate = sum((p.accept_rate or 0.0) * p.verify_steps for p in rated) / steps
    drop = _drop(accept, expected, rate)
    limit = settings.accept_recover if context.was_low else settings.accept_drop
    measured = normalised(accept, expected.num_draft_tokens) if rate is None else rate
    how = "below" if drop >= 0 else "above"
    text = (
        f"mean accept length {_fmt(accept)} over {window}, {abs(drop) * 100:.0f}% {how} the expected "
        f"{_fmt(expected.accept_length)} ({expected.source}; accept rate {measured:.2f} vs {expected.rate:.2f} over "
        f"{expected.num_draft_tokens - 1} draft tokens; False beyond {settings.accept_drop * 100:.0f}%, True again "
        f"within {settings.accept_recover * 100:.0f}%): {each}{missing}"
    )
    if steps < settings.drop_min_verify_steps:
        # Too few steps to tell a drop from noise: keep a False condition False, judge only the floor otherwise.
        text = f"{text}; {steps:.0f} verify steps, {settings.drop_min_verify_steps} needed to judge a drop"
        return Judgement(r.SPEC_DECODE_LOW_ACCEPT if context.was_low else r.SPEC_DECODE_ACCEPTING, text), accept
    low = drop > limit
    return Judgement(r.SPEC_DECODE_LOW_ACCEPT if low else r.SPEC_DECODE_ACCEPTING, text), accept


def _spec_decode_judgement(
    decode: Sequence[PodWindow],
    window: str,
    missing: str,
    settings: HealthSettings,
    error: str | None,
    context: SpecContext,
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
        return Judgement(r.SPEC_DECODE_NO_TRAFFIC, text, provisional=not context.settled), None
    return _accept_length_judgement(decode, steps, window, missing, settings, context)


def _transfer_judgement(
    pods: Sequence[PodWindow],
    span_seconds: float,
    window: str,
    missing: str,
    settings: HealthSettings,
    error: str | None,
    settled: bool = True,
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
        return Judgement(
            r.TRANSFER_NO_TRAFFIC, f"no request served in {window}{missing}", provisional=not settled
        ), rate
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
    context: SpecContext | None = None,
) -> Verdict:
    """The verdict on one service from its pods' windows; `unreachable` names ready pods that did not answer,
    `span_seconds` is how much time the windows cover, `error` says why nothing could be read at all, `context` the
    expectation and hysteresis state (None: only the floor, never provisional)."""
    context = context or SpecContext()
    decode = sorted((p for p in pods if p.role == c.ROLE_DECODE), key=lambda p: p.pod)
    missing = f" (no answer from {', '.join(sorted(unreachable))})" if unreachable else ""
    window = f"the last {span_seconds:.0f}s"
    spec, accept = _spec_decode_judgement(decode, window, missing, settings, error, context)
    transfer, rate = _transfer_judgement(pods, span_seconds, window, missing, settings, error, context.settled)
    steps = sum(p.verify_steps for p in decode if p.accept_length is not None)
    return Verdict(spec, transfer, accept, rate, expected=context.expected, verify_steps=steps)


def with_baseline(verdict: Verdict, baseline: Baseline | None) -> Verdict:
    """The verdict carrying the baseline to publish in status."""
    return replace(verdict, baseline=baseline)
