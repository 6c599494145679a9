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

The load signals the SLA planner reads (`disaggspec.autoscale`): `sglang:prompt_tokens_total` (counter, 0.5.2 :624,
0.5.23 :1856; counted once per finished request by the tokenizer manager, 0.5.2 :825, 0.5.23 :2109), summed like the
request counters; the scheduler gauges `sglang:num_running_reqs` (0.5.2 :187, 0.5.23 :365), `sglang:num_queue_reqs`
(:217, :371), `sglang:gen_throughput` (:211, :383) and the PD queues `sglang:num_prefill_prealloc_queue_reqs` (0.5.2
:257; renamed `sglang:num_prefill_bootstrap_queue_reqs` in 0.5.23, :583: the same bootstrap queue),
`sglang:num_decode_prealloc_queue_reqs` (:269, :595), `sglang:num_decode_transfer_queue_reqs` (:275, :601), summed over
their series: the scheduler exports them once per DP group (attention-TP rank 0, label `dp_rank`), so the sum is the
server's. 0.5.23 with priority scheduling also exports each queue gauge broken down by a non-empty `priority` label
beside the total (`priority=""`; observability/metrics_collector.py:1417-1428 `_log_gauge_queue_count`): those
breakdown series are skipped, or every request would count twice. `sglang:num_prefill_inflight_queue_reqs` (0.5.2
metrics/collector.py:262, set at managers/scheduler_metrics_mixin.py:153; 0.5.23 :588, logged per priority like
the queues above, :1690) is read apart from the PD queues: its requests are prefilled and wait only for their KV
transfer to end, so they load no queue the planner sizes for, but their prompt tokens are counted only when the
transfer ends. `sglang:token_usage` (:199, :405:
the used share of the KV pool, each DP group its own pool) is the largest series: the fullest pool is the one that
retracts or stops admitting first.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

ACCEPT_LENGTH: Final = "sglang:spec_accept_length"
ACCEPT_RATE: Final = "sglang:spec_accept_rate"
VERIFY_CALLS: Final = "sglang:spec_verify_calls_total"
GENERATION_TOKENS: Final = "sglang:generation_tokens_total"
REQUESTS: Final = "sglang:num_requests_total"
BOOTSTRAP_FAILED: Final = "sglang:num_bootstrap_failed_reqs_total"
TRANSFER_FAILED: Final = "sglang:num_transfer_failed_reqs_total"
PROMPT_TOKENS: Final = "sglang:prompt_tokens_total"
RUNNING: Final = "sglang:num_running_reqs"
QUEUED: Final = "sglang:num_queue_reqs"
PD_QUEUES: Final = (
    "sglang:num_prefill_prealloc_queue_reqs",  # 0.5.2
    "sglang:num_prefill_bootstrap_queue_reqs",  # 0.5.23: the same queue renamed
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
)
TRANSFERRING: Final = "sglang:num_prefill_inflight_queue_reqs"
GEN_THROUGHPUT: Final = "sglang:gen_throughput"
TOKEN_USAGE: Final = "sglang:token_usage"

_GAUGES: Final = (ACCEPT_LENGTH, ACCEPT_RATE)
_COUNTERS: Final = (VERIFY_CALLS, GENERATION_TOKENS, REQUESTS, PROMPT_TOKENS)
_QUEUE_GAUGES: Final = (RUNNING, QUEUED, *PD_QUEUES, TRANSFERRING)
"""Exported as a total plus, in 0.5.23 with priority scheduling, one series per priority (skipped)."""
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
    prompt_tokens: float | None = None
    running: float | None = None
    """Requests in the running batch (decode) or the last prefill batch, summed over DP groups."""
    queued: float | None = None
    """Requests in SGLang's waiting queue: prefill, bootstrapped but not prefilled yet; decode, KV arrived but no
    place in the running batch yet."""
    pd_queued: float | None = None
    """Requests in the PD queues: a prefill's bootstrap queue, a decode's pre-allocation and transfer queues."""
    transferring: float | None = None
    """A prefill's inflight queue: requests prefilled whose KV transfer has not ended."""
    gen_throughput: float | None = None
    """Tokens per second generated over the scheduler's last decode log interval (0 once idle)."""
    token_usage: float | None = None
    """Used share of the fullest KV pool, 0 to 1."""

    @property
    def failures(self) -> float:
        """Bootstrap plus transfer failures so far (a release without the counters counts none)."""
        return (self.bootstrap_failed or 0.0) + (self.transfer_failed or 0.0)


_WANTED: Final = frozenset((*_GAUGES, *_COUNTERS, *PER_SERVER, *_QUEUE_GAUGES, GEN_THROUGHPUT, TOKEN_USAGE))


def parse(text: str) -> PodSample:
    """The sample in a Prometheus text exposition; raises ValueError on text that is not one.

    Only the lines of the wanted names are parsed (`name{labels} value [timestamp]`): a server exports some 300
    lines, and a full parse of each scrape cost the operator's CPU (and the GIL) several times more."""
    tally = _Tally()
    for name, labels, value in _wanted_samples(text):
        tally.add(name, labels, value)
    return tally.sample()


def _wanted_samples(text: str) -> Iterator[tuple[str, str, float]]:
    """(name, the `{...}` text onwards or "" without labels, value) of each sample line of a wanted name; raises
    ValueError on a line that is not a sample, and on text without one (every line counts, wanted or not)."""
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
        yield name, line[end:] if end == brace else "", float(fields[0])
    if not samples:
        raise ValueError("no sample in the text: not a Prometheus exposition")


@dataclass
class _Tally:
    """One scrape's wanted series folded as they are read: each name's sum and series count, and the largest series
    where the pod's value is a maximum (`TOKEN_USAGE`, and the `PER_SERVER` counters per DP group)."""

    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    largest: dict[tuple[str, str], float] = field(default_factory=dict)
    """(name, dp_rank label or "") -> the group's largest series."""

    def add(self, name: str, labels: str, value: float) -> None:
        if name in _QUEUE_GAUGES and _label(labels, "priority"):
            return  # a per-priority breakdown of the total (0.5.23), which is its own series
        if name == TOKEN_USAGE:
            self._keep_largest(name, "", value)
        self.sums[name] += value
        self.counts[name] += 1
        if name in PER_SERVER:
            self._keep_largest(name, _dp_rank(labels), value)

    def _keep_largest(self, name: str, group: str, value: float) -> None:
        self.largest[(name, group)] = max(value, self.largest.get((name, group), value))

    def sample(self) -> PodSample:
        return PodSample(
            accept_length=self._mean(ACCEPT_LENGTH),
            accept_rate=self._mean(ACCEPT_RATE),
            verify_calls=self._total(VERIFY_CALLS),
            generation_tokens=self._total(GENERATION_TOKENS),
            requests=self._total(REQUESTS),
            bootstrap_failed=self._per_server(BOOTSTRAP_FAILED),
            transfer_failed=self._per_server(TRANSFER_FAILED),
            prompt_tokens=self._total(PROMPT_TOKENS),
            running=self._total(RUNNING),
            queued=self._total(QUEUED),
            pd_queued=self._any_total(PD_QUEUES),
            transferring=self._total(TRANSFERRING),
            gen_throughput=self._total(GEN_THROUGHPUT),
            token_usage=self.largest.get((TOKEN_USAGE, "")),
        )

    def _total(self, name: str) -> float | None:
        return self.sums[name] if self.counts[name] else None

    def _mean(self, name: str) -> float | None:
        return self.sums[name] / self.counts[name] if self.counts[name] else None

    def _per_server(self, name: str) -> float | None:
        """The server's count: the sum over its DP groups of each group's largest series."""
        groups = [value for (found, _), value in self.largest.items() if found == name]
        return sum(groups) if groups else None

    def _any_total(self, names: tuple[str, ...]) -> float | None:
        """The sum over those of `names` the release exports (a PD queue renamed between releases)."""
        found = [self.sums[name] for name in names if self.counts[name]]
        return sum(found) if found else None


def _dp_rank(labels: str) -> str:
    """The `dp_rank` label's value in a sample's `{...}` text, "" when it has none."""
    return _label(labels, "dp_rank")


def _label(labels: str, name: str) -> str:
    """A label's value in a sample's `{...}` text, "" when it has none (a whole label name: `dp_rank` is not
    `attn_dp_rank`)."""
    found = _LABELS[name].search(labels)
    return found.group(1) if found else ""


_LABELS: Final = {name: re.compile(rf'[{{,\s]{name}\s*=\s*"([^"]*)"') for name in ("dp_rank", "priority")}
