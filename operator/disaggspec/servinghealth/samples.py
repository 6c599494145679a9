"""One pool pod's SGLang metrics at one instant, read from its `/metrics` text (pure; names cited per release).

Names, in both supported releases unless noted (0.5.2 `sglang/srt/metrics/collector.py`, 0.5.23
`sglang/srt/observability/metrics_collector.py`): `sglang:spec_accept_length` (gauge, 0.5.2 :249, 0.5.23 :512: the
mean tokens per verify step over the scheduler's last decode log interval, 0.5.2 `managers/scheduler_metrics_mixin.py`
:202-207), `sglang:spec_accept_rate` (gauge, 0.5.23 :518 only), `sglang:spec_verify_calls_total` (counter, 0.5.23
:1866 only), `sglang:generation_tokens_total` and `sglang:num_requests_total` (counters, 0.5.2 :630/:693, 0.5.23
:1861/:1941), `sglang:num_bootstrap_failed_reqs_total` and `sglang:num_transfer_failed_reqs_total` (counters, 0.5.2
:281/:286, 0.5.23 :668/:673). Every series of a name is summed (counters: labels such as `is_streaming`, `tp_rank`)
or averaged (the accept gauges). None means the pod does not export the name (its release has no such metric).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Final

ACCEPT_LENGTH: Final = "sglang:spec_accept_length"
ACCEPT_RATE: Final = "sglang:spec_accept_rate"
VERIFY_CALLS: Final = "sglang:spec_verify_calls_total"
GENERATION_TOKENS: Final = "sglang:generation_tokens_total"
REQUESTS: Final = "sglang:num_requests_total"
BOOTSTRAP_FAILED: Final = "sglang:num_bootstrap_failed_reqs_total"
TRANSFER_FAILED: Final = "sglang:num_transfer_failed_reqs_total"

_GAUGES: Final = (ACCEPT_LENGTH, ACCEPT_RATE)
_COUNTERS: Final = (VERIFY_CALLS, GENERATION_TOKENS, REQUESTS, BOOTSTRAP_FAILED, TRANSFER_FAILED)


@dataclass(frozen=True)
class PodSample:
    """What one scrape of one pool pod said; counters are cumulative since the server started."""

    accept_length: float | None = None
    accept_rate: float | None = None
    verify_calls: float | None = None
    generation_tokens: float | None = None
    requests: float | None = None
    bootstrap_failed: float | None = None
    transfer_failed: float | None = None

    @property
    def failures(self) -> float:
        """Bootstrap plus transfer failures so far (a release without the counters counts none)."""
        return (self.bootstrap_failed or 0.0) + (self.transfer_failed or 0.0)


_WANTED: Final = frozenset(_GAUGES + _COUNTERS)


def parse(text: str) -> PodSample:
    """The sample in a Prometheus text exposition; raises ValueError on text that is not one.

    Only the lines of the wanted names are parsed (`name{labels} value [timestamp]`): a server exports some 300
    lines, and a full parse of each scrape cost the operator's CPU (and the GIL) several times more."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    samples = 0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        brace, space = line.find("{"), line.find(" ")
        if space < 0:
            raise ValueError(f"not a Prometheus sample line: {line[:80]!r}")
        end = brace if 0 <= brace < space else space
        samples += 1
        name = line[:end]
        if name not in _WANTED:
            continue
        rest = line[line.rfind("}") + 1 :] if end == brace else line[space:]
        fields = rest.split()
        if not fields:
            raise ValueError(f"a sample without a value: {line[:80]!r}")
        sums[name] += float(fields[0])
        counts[name] += 1
    if not samples:
        raise ValueError("no sample in the text: not a Prometheus exposition")

    def total(name: str) -> float | None:
        return sums[name] if counts[name] else None

    def mean(name: str) -> float | None:
        return sums[name] / counts[name] if counts[name] else None

    return PodSample(
        accept_length=mean(ACCEPT_LENGTH),
        accept_rate=mean(ACCEPT_RATE),
        verify_calls=total(VERIFY_CALLS),
        generation_tokens=total(GENERATION_TOKENS),
        requests=total(REQUESTS),
        bootstrap_failed=total(BOOTSTRAP_FAILED),
        transfer_failed=total(TRANSFER_FAILED),
    )
