"""What one server sustains, learned from the service's own traffic (pure; no profile needed).

Prefill is compute-bound: a server prefills about a fixed number of prompt tokens per second, whatever the mix of
requests (SGLang forms each prefill batch from its waiting queue up to `--chunked-prefill-size` tokens, 0.5.2
managers/schedule_policy.py:271 `PrefillAdder`). What a server served is its capacity only while work waited for it
all along: `saturated` takes the intervals during which the pod's waiting queue held at least `threshold` requests
at every scrape for `persist_seconds`. A queue of one at one instant is ordinary below capacity (a request that
arrives during a forward pass waits for the next batch); a queue that persists means arrivals outpaced the batches.
Intervals whose KV pool was nearly full are left out: a prefill whose pool is held by KV still transferring adds no
request (`PrefillAdder.add_one_req` answers NO_TOKEN, :498-520), so it queues below its compute capacity.

Decode is memory-bound: one step reads the weights and every running request's KV, so its time grows about
linearly with the batch, t = a + b n (a, the weights and fixed costs; b, one request's KV and attention). With
speculative decoding each step is one verify pass that emits accept-length tokens per request, and SGLang's
`gen_throughput` is the tokens of the last decode log interval over its duration (0.5.2
managers/scheduler_metrics_mixin.py:166-169, the tokens counted at scheduler.py:1835 and
scheduler_output_processor_mixin.py:207: accepted drafts plus one per request, i.e. accept length per request and
step; 0.5.23 managers/scheduler_components/metrics_reporter.py:944, batch_result_processor.py:983-984), so the step
time is n x L / gen_throughput. Its fit (`fit`, least squares over `remember`ed samples) gives the batch one server
holds at the ITL target: ITL = t / L, so n = (itl x L - a) / b, which a lower accept length lowers. The KV pool caps it
too: the requests holding KV over the used share of the pool (`kv_samples`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from disaggspec.autoscale.signals import Series, increase, intervals

StepSample = tuple[float, float]
"""(running requests, decode step seconds) of one server at one scrape."""

FULL_KV = 0.9
"""A KV pool at least this full retracts or stops admitting: no prefill rate nor KV ratio is learned from it."""
MIN_KV_SHARE = 0.1
"""`sglang:token_usage` is rounded to 2 decimals (0.5.2 managers/scheduler_metrics_mixin.py:140, :226): below this a
ratio to it is mostly rounding."""


def ewma(old: float | None, new: float, weight: float) -> float:
    """`new` blended into `old` (`new` alone when nothing was learned yet)."""
    return new if old is None else old + weight * (new - old)


def saturated(series: Series, after: float, threshold: float, persist_seconds: float) -> tuple[float, float]:
    """(prompt tokens, server seconds) of the prefill intervals ending after `after` that ran with a persisting
    queue (see the module docstring); their ratio is one server's prompt tokens per second."""
    tokens = seconds = 0.0
    for scrapes in series.values():
        run: list[int] = []
        runs: list[list[int]] = []
        for index, (_, sample) in enumerate(scrapes):
            if (sample.queued or 0.0) >= threshold:
                run.append(index)
            elif run:
                runs.append(run)
                run = []
        if run:
            runs.append(run)
        for found in runs:
            if scrapes[found[-1]][0] - scrapes[found[0]][0] < persist_seconds:
                continue
            for first, second in itertools.pairwise(found):
                (start, before), (end, sample) = scrapes[first], scrapes[second]
                if end <= after or end <= start or (sample.token_usage or 0.0) >= FULL_KV:
                    continue
                tokens += increase(before.prompt_tokens, sample.prompt_tokens)
                seconds += end - start
    return tokens, seconds


def busiest(series: Series, start: float, end: float) -> float:
    """The highest prompt tokens per second one pod served over [start, end]: a floor under its capacity."""
    best = 0.0
    per_pod: dict[str, tuple[float, float]] = {}
    for interval in intervals(series):
        if interval.start < start or interval.end > end:
            continue
        tokens, seconds = per_pod.get(interval.pod, (0.0, 0.0))
        per_pod[interval.pod] = (tokens + interval.grew("prompt_tokens"), seconds + interval.seconds)
    for tokens, seconds in per_pod.values():
        if seconds >= (end - start) / 2:  # a pod scraped for half the span at least: one interval is too noisy
            best = max(best, tokens / seconds)
    return best


def step_samples(series: Series, after: float) -> list[StepSample]:
    """(running, step seconds) at every scrape after `after` that closes an interval with tokens generated."""
    found = []
    for interval in intervals(series):
        sample = interval.after
        n, throughput = sample.running or 0.0, sample.gen_throughput or 0.0
        if interval.end <= after or n <= 0 or throughput <= 0 or interval.grew("generation_tokens") <= 0:
            continue
        length = sample.accept_length if sample.accept_length and sample.accept_length > 0 else 1.0
        found.append((n, n * length / throughput))
    return found


def kv_samples(series: Series, after: float) -> list[float]:
    """Requests one decode server holds in KV at `FULL_KV` of its pool, from each scrape after `after` with a
    meaningful share used: running, waiting and in the PD queues (a transferring request holds its pre-allocated
    KV) over the used share. Scrapes of a pool past `FULL_KV` are left out: their pre-allocation queue waits for
    memory and holds none."""
    found = []
    for interval in intervals(series):
        sample = interval.after
        share = sample.token_usage
        holding = (sample.running or 0.0) + (sample.queued or 0.0) + (sample.pd_queued or 0.0)
        if interval.end <= after or share is None or not MIN_KV_SHARE <= share < FULL_KV or holding <= 0:
            continue
        if interval.grew("generation_tokens") > 0:
            found.append(holding / share * FULL_KV)
    return found


def _bucket(n: float) -> int:
    """Batch sizes within a factor of about 1.4 share a bucket."""
    return round(2 * math.log2(max(n, 1.0)))


def remember(
    kept: Sequence[StepSample], new: Iterable[StepSample], per_bucket: int, limit: int
) -> tuple[StepSample, ...]:
    """The samples to keep, oldest first: the newest `per_bucket` of each batch-size bucket, at most `limit` in all.
    Bucketing keeps the spread of batch sizes the fit needs: a steady load would otherwise fill the memory with one
    batch size and leave the slope undetermined."""
    merged = [*kept, *new]
    counts: dict[int, int] = {}
    chosen: list[StepSample] = []
    for sample in reversed(merged):
        bucket = _bucket(sample[0])
        if counts.get(bucket, 0) < per_bucket and len(chosen) < limit:
            counts[bucket] = counts.get(bucket, 0) + 1
            chosen.append(sample)
    return tuple(reversed(chosen))


@dataclass(frozen=True)
class StepFit:
    """Decode step time t = base + per_request x running."""

    base: float
    per_request: float
    samples: int

    def holds(self, itl_seconds: float, accept_length: float) -> float:
        """Running requests one server holds with t / L at the ITL target (at least one)."""
        return max((itl_seconds * accept_length - self.base) / self.per_request, 1.0)


def fit(samples: Sequence[StepSample]) -> StepFit | None:
    """The least-squares line through the samples; through the origin (base 0) when their batch sizes spread too
    little (max below 1.5 x min, or fewer than 4) or the line's base or slope comes out negative. Without the
    base a server's capacity is underestimated wherever it meets the ITL target (t / n overstates the slope), so the
    fallback errs towards more servers. None without samples."""
    if not samples:
        return None
    ns = [n for n, _ in samples]
    count = len(samples)
    if count >= 4 and max(ns) >= 1.5 * min(ns):
        mn = sum(ns) / count
        mt = sum(t for _, t in samples) / count
        var = sum((n - mn) ** 2 for n in ns)
        slope = sum((n - mn) * (t - mt) for n, t in samples) / var
        base = mt - slope * mn
        if slope > 0 and base >= 0:
            return StepFit(base, slope, count)
    through_origin = sum(n * t for n, t in samples) / sum(n * n for n in ns)
    return StepFit(0.0, through_origin, count) if through_origin > 0 else None
