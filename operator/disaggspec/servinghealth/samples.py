"""One pool pod's SGLang metrics at one instant, read from its `/metrics` text (pure; names cited per release).

Names, in both supported releases unless noted (0.5.2 `sglang/srt/metrics/collector.py`, 0.5.23
`sglang/srt/observability/metrics_collector.py`): `sglang:spec_accept_length` (gauge, 0.5.2 :249, 0.5.23 :512: the
mean tokens per verify step over the scheduler's last decode log interval, 0.5.2 `managers/scheduler_metrics_mixin.py`
:202-207), `sglang:spec_accept_rate` (gauge, 0.5.23 :518 only), `sglang:spec_verify_calls_total` (counter, 0.5.23
:1866 only), `sglang:generation_tokens_total` and `sglang:num_requests_total` (counters, 0.5.2 :630/:693, 0.5.23
:1861/:1941), `sglang:num_bootstrap_failed_reqs_total` and `sglang:num_transfer_failed_reqs_total` (counters, 0.5.2
:281/:286, 0.5.23 :668/:673). The request counters are summed over their series (labels such as `is_streaming`) and
the accept gauges averaged. None means the pod does not export the name (its release has no such metric).

The two failure counters are read per server, not per rank: the largest of the pod's series. Every TP rank of a
server builds its own collector with --enable-metrics (0.5.2 managers/scheduler_metrics_mixin.py:52-62
`init_metrics`; 0.5.23 observability/metrics_collector.py:1375-1404 `SchedulerMetricsCollector.init_new`), label
`tp_rank`, and counts every failed request after the KV poll has been all-reduced over the attention-TP group, gated
by `enable_metrics` only (0.5.2 disaggregation/prefill.py:243 `pop_bootstrapped`, :529
`process_disagg_prefill_inflight_queue`, decode.py:339 `_update_handshake_waiters`, :602 `pop_transferred`; 0.5.23
disaggregation/prefill.py:1311 `handle_inflight_transfer_failure`, :1376 `handle_bootstrap_failure`, decode.py:1176
`_update_handshake_waiters`, :2826 `_record_transfer_failure`): a tp8 server with N failures exports eight series of
N, and their sum is 8N. Every rank sees the same count, so one rank would do; the maximum is taken rather than
`tp_rank="0"` because it needs no rank to be present (a multi-node server's worker node holds ranks 8..15) and a
scrape that lands between two ranks' increments reads the newer count. With DP attention (`parallelism.
dataParallelAttention`) the poll is all-reduced over each DP group's attention-TP ranks only, so each DP group counts
its own requests and labels its series `dp_rank` (0.5.2 managers/scheduler_metrics_mixin.py:60-61; 0.5.23
observability/metrics_collector.py:1391-1392): the server's count is the sum over `dp_rank` of each group's largest
series (one group, no label, without DP).
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
_COUNTERS: Final = (VERIFY_CALLS, GENERATION_TOKENS, REQUESTS)
PER_SERVER: Final = (BOOTSTRAP_FAILED, TRANSFER_FAILED)
"""Counted by every TP rank: the pod's value is its largest series (see the module docstring)."""


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


_WANTED: Final = frozenset(_GAUGES + _COUNTERS + PER_SERVER)


def parse(text: str) -> PodSample:
    """The sample in a Prometheus text exposition; raises ValueError on text that is not one.

    Only the lines of the wanted names are parsed (`name{labels} value [timestamp]`): a server exports some 300
    lines, and a full parse of each scrape cost the operator's CPU (and the GIL) several times more."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    largest: dict[tuple[str, str], float] = {}
    """(name, dp_rank label or "") -> the group's largest series, for the `PER_SERVER` counters."""
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
        value = float(fields[0])
        sums[name] += value
        counts[name] += 1
        if name in PER_SERVER:
            group = _dp_rank(line[end:]) if end == brace else ""
            largest[(name, group)] = max(value, largest.get((name, group), value))
    if not samples:
        raise ValueError("no sample in the text: not a Prometheus exposition")

    def total(name: str) -> float | None:
        return sums[name] if counts[name] else None

    def mean(name: str) -> float | None:
        return sums[name] / counts[name] if counts[name] else None

    def per_server(name: str) -> float | None:
        groups = [value for (found, _), value in largest.items() if found == name]
        return sum(groups) if groups else None

    return PodSample(
        accept_length=mean(ACCEPT_LENGTH),
        accept_rate=mean(ACCEPT_RATE),
        verify_calls=total(VERIFY_CALLS),
        generation_tokens=total(GENERATION_TOKENS),
        requests=total(REQUESTS),
        bootstrap_failed=per_server(BOOTSTRAP_FAILED),
        transfer_failed=per_server(TRANSFER_FAILED),
    )


def _dp_rank(labels: str) -> str:
    """The `dp_rank` label's value in a sample's `{...}` text, "" when it has none."""
    at = labels.find('dp_rank="')
    if at < 0:
        return ""
    start = at + len('dp_rank="')
    return labels[start : labels.find('"', start)]
