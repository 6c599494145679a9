"""Prometheus metrics with the names, kinds and labels of each release (see facts.py for the citations).

A private registry per server; `_created` samples are disabled because SGLang exports through prometheus_client's
multiprocess collector, which has none. Every family is created with its base label values at start-up so a scraper
sees zeros before the first request (SGLang creates some children lazily; the values are the same). The counters of
`facts.EVERY_RANK` have one series per TP rank of this process, each incremented for every failed request of its DP
group, as every rank of a real server counts them; every other scheduler metric is one series per DP rank whose
attention-TP rank 0 runs in this process (one series, tp_rank 0, without data parallelism).

With several DP ranks (DP attention or DP replicas), each scheduler labels its series `dp_rank` (0.5.2
managers/scheduler_metrics_mixin.py:60-61; 0.5.23 observability/metrics_collector.py:1391-1392) and only attention-TP
rank 0 of each DP group exports its gauges (0.5.2 managers/scheduler.py:2483-2484 `current_scheduler_metrics_enabled`),
as `tp_rank` = dp_rank x attention TP size.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from e2e.serving.emulator import facts
from e2e.serving.emulator.facts import Metric, VersionFacts

DECODE_LOG_INTERVAL = 40
"""Verify steps the accept-length gauge averages over: `--decode-log-interval`'s default (0.5.2 server_args.py:208)."""

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

_BUCKETS: dict[str, tuple[float, ...]] = {
    "sglang:time_to_first_token_seconds": facts.TTFT_BUCKETS,
    "sglang:e2e_request_latency_seconds": facts.E2E_BUCKETS,
    "sglang:inter_token_latency_seconds": facts.ITL_BUCKETS,
    "sglang:kv_transfer_speed_gb_s": facts.KV_SPEED_BUCKETS,
    "sglang:kv_transfer_latency_ms": facts.KV_LATENCY_BUCKETS,
    "sglang:kv_transfer_bootstrap_ms": facts.KV_BOOTSTRAP_BUCKETS,
}


@dataclass(frozen=True)
class Labels:
    tokenizer: dict[str, str]
    scheduler: dict[str, str]


class Metrics:
    """The server's metrics; `observe_*` methods record what happened, named after SGLang's collector methods."""

    def __init__(
        self,
        version_facts: VersionFacts,
        served_model_name: str,
        disaggregation_mode: str,
        tp_ranks: Sequence[int] = (0,),
        dp_size: int = 1,
        attn_tp_size: int = 1,
    ) -> None:
        """`tp_ranks`: the TP ranks whose schedulers run in this process (a node's share of the server): each one
        exports its own series of the `facts.EVERY_RANK` counters. `dp_size` > 1: the series carry `dp_rank`, one per
        DP group of `attn_tp_size` TP ranks."""
        self.facts = version_facts
        self.tp_ranks = tuple(str(rank) for rank in tp_ranks) or ("0",)
        self.attn_tp_size = max(1, attn_tp_size)
        self.dp_labelled = dp_size > 1
        self.dp_ranks = tuple(sorted({self._group(rank) for rank in self.tp_ranks}))
        """The DP ranks whose attention-TP rank 0 runs here (their gauges are exported from this process)."""
        self.registry = CollectorRegistry(auto_describe=True)
        engine_type = {"prefill": "prefill", "decode": "decode"}.get(disaggregation_mode, "unified")
        if version_facts.version == "0.5.2":
            engine_type = "unified"  # 0.5.2 scheduler_metrics_mixin.py:53 hard-codes it
        base = {"model_name": served_model_name, "engine_type": engine_type}
        scheduler = {"tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
        scheduler_names = (*version_facts.scheduler_labels, *(("dp_rank",) if self.dp_labelled else ()))
        self.labels = Labels(
            tokenizer={k: base[k] for k in version_facts.tokenizer_labels},
            scheduler={k: base.get(k, scheduler.get(k, "0")) for k in scheduler_names},
        )
        self._metrics: dict[str, Any] = {}
        for metric in version_facts.metrics:
            self._metrics[metric.defined_as] = self._create(metric)
        self._spec_tokens = 0
        self._spec_steps = 0
        self._spec_drafts = 0
        self._spec_proposed = 0
        self._recent: deque[tuple[int, int, int, int]] = deque()

    def _base(self, metric: Metric, dp_rank: int | None = None) -> dict[str, str]:
        if metric.scope == "tokenizer":
            return self.labels.tokenizer
        if not self.dp_labelled:
            return self.labels.scheduler
        rank = self.dp_ranks[0] if dp_rank is None else dp_rank
        return {**self.labels.scheduler, "tp_rank": str(rank * self.attn_tp_size), "dp_rank": str(rank)}

    def _group(self, tp_rank: str) -> int:
        """The DP rank a TP rank belongs to (0 without data parallelism)."""
        return int(tp_rank) // self.attn_tp_size if self.dp_labelled else 0

    def _rank_labels(self, metric: Metric, tp_rank: str) -> dict[str, str]:
        """A `facts.EVERY_RANK` series: the TP rank's own, in its DP group."""
        return {**self._base(metric, self._group(tp_rank)), "tp_rank": tp_rank}

    def _create(self, metric: Metric) -> Any:
        names = [*self._base(metric), *metric.extra_labels]
        doc = f"{metric.defined_as} (emulated; defined at {metric.source})"
        created: Any
        if metric.kind == "counter":
            created = Counter(metric.defined_as, doc, labelnames=names, registry=self.registry)
        elif metric.kind == "gauge":
            created = Gauge(metric.defined_as, doc, labelnames=names, registry=self.registry)
        else:
            buckets = _BUCKETS.get(metric.defined_as, facts.TTFT_BUCKETS)
            created = Histogram(metric.defined_as, doc, labelnames=names, buckets=buckets, registry=self.registry)
        if metric.defined_as in facts.EVERY_RANK:
            for rank in self.tp_ranks:
                created.labels(**self._rank_labels(metric, rank))
        elif not metric.extra_labels:
            for dp_rank in self.dp_ranks if metric.scope == "scheduler" else (None,):
                created.labels(**self._base(metric, dp_rank))
        elif metric.extra_labels == ("is_streaming",):
            for value in ("false", "true"):
                created.labels(**self._base(metric), is_streaming=value)
        return created

    def has(self, name: str) -> bool:
        return name in self._metrics

    def _child(self, name: str, dp_rank: int | None = None, **extra: str) -> Any:
        metric = next(m for m in self.facts.metrics if m.defined_as == name)
        return self._metrics[name].labels(**self._base(metric, dp_rank), **extra)

    def _streaming(self, name: str, stream: bool) -> Any:
        if self.facts.version == "0.5.2":
            return self._child(name)
        return self._child(name, is_streaming="true" if stream else "false")

    def exposition(self) -> bytes:
        return generate_latest(self.registry)

    # --- tokenizer side: observe_one_finished_request and friends -------------------------------------------------

    def observe_finished_request(
        self,
        *,
        prompt_tokens: int,
        generation_tokens: int,
        e2e_latency: float,
        stream: bool,
        spec_verify_ct: int,
    ) -> None:
        """0.5.2 collector.py:823-841, 0.5.23 metrics_collector.py:2092-2141."""
        self._streaming("sglang:prompt_tokens_total", stream).inc(prompt_tokens)
        self._streaming("sglang:generation_tokens_total", stream).inc(generation_tokens)
        self._streaming("sglang:num_requests_total", stream).inc()
        self._streaming("sglang:e2e_request_latency_seconds", stream).observe(e2e_latency)
        if spec_verify_ct > 0 and self.has("sglang:spec_verify_calls_total"):
            self._child("sglang:spec_verify_calls_total").inc(spec_verify_ct)

    def observe_time_to_first_token(self, seconds: float, stream: bool) -> None:
        self._streaming("sglang:time_to_first_token_seconds", stream).observe(seconds)

    def observe_inter_token_latency(self, seconds: float) -> None:
        self._child("sglang:inter_token_latency_seconds").observe(seconds)

    def observe_aborted_request(self) -> None:
        name = "sglang:num_aborted_requests" if self.facts.version == "0.5.2" else "sglang:num_aborted_requests_total"
        self._child(name).inc()

    # --- scheduler side ---------------------------------------------------------------------------------------------

    def set_queues(
        self, *, running: int, queued: int, prefill_bootstrap: int, prefill_inflight: int, dp_rank: int | None = None
    ) -> None:
        self._child("sglang:num_running_reqs", dp_rank).set(running)
        self._child("sglang:num_queue_reqs", dp_rank).set(queued)
        bootstrap_queue = (
            "sglang:num_prefill_prealloc_queue_reqs"
            if self.facts.version == "0.5.2"
            else "sglang:num_prefill_bootstrap_queue_reqs"
        )
        self._child(bootstrap_queue, dp_rank).set(prefill_bootstrap)
        self._child("sglang:num_prefill_inflight_queue_reqs", dp_rank).set(prefill_inflight)

    def set_decode_queues(self, *, prealloc: int, transfer: int, dp_rank: int | None = None) -> None:
        self._child("sglang:num_decode_prealloc_queue_reqs", dp_rank).set(prealloc)
        self._child("sglang:num_decode_transfer_queue_reqs", dp_rank).set(transfer)

    def set_usage(self, *, used_tokens: int, capacity: int, gen_throughput: float, dp_rank: int | None = None) -> None:
        self._child("sglang:num_used_tokens", dp_rank).set(used_tokens)
        self._child("sglang:token_usage", dp_rank).set(used_tokens / capacity if capacity else 0.0)
        self._child("sglang:gen_throughput", dp_rank).set(gen_throughput)

    def observe_spec(self, *, tokens: int, steps: int, correct_drafts: int, proposed_drafts: int) -> None:
        """Accept length = tokens per verify step, bonus token included, over the last `DECODE_LOG_INTERVAL` verify
        steps: SGLang sets the gauge every decode log interval from counters it then resets (0.5.2
        scheduler_metrics_mixin.py:200-231; 0.5.23 scheduler_components/metrics_reporter.py:292, :968-973), so it
        follows the model's current behaviour. Here it is updated per finished request, from the most recent
        requests that cover at least that many steps."""
        self._recent.append((tokens, steps, correct_drafts, proposed_drafts))
        while len(self._recent) > 1 and sum(item[1] for item in list(self._recent)[1:]) >= DECODE_LOG_INTERVAL:
            self._recent.popleft()
        self._spec_tokens = sum(item[0] for item in self._recent)
        self._spec_steps = sum(item[1] for item in self._recent)
        self._spec_drafts = sum(item[2] for item in self._recent)
        self._spec_proposed = sum(item[3] for item in self._recent)
        if self._spec_steps:
            self._child("sglang:spec_accept_length").set(self._spec_tokens / self._spec_steps)
        if self.has("sglang:spec_accept_rate") and self._spec_proposed:
            self._child("sglang:spec_accept_rate").set(self._spec_drafts / self._spec_proposed)

    def _every_rank(self, name: str, dp_rank: int) -> None:
        """One failed request of DP group `dp_rank`, counted by every TP rank of that group here (`facts.EVERY_RANK`:
        the poll is all-reduced over the attention-TP group, so each group counts its own requests)."""
        metric = next(m for m in self.facts.metrics if m.defined_as == name)
        for rank in self.tp_ranks:
            if self._group(rank) == dp_rank:
                self._metrics[name].labels(**self._rank_labels(metric, rank)).inc()

    def increment_bootstrap_failed_reqs(self, dp_rank: int = 0) -> None:
        self._every_rank("sglang:num_bootstrap_failed_reqs_total", dp_rank)

    def increment_transfer_failed_reqs(self, dp_rank: int = 0) -> None:
        self._every_rank("sglang:num_transfer_failed_reqs_total", dp_rank)

    def observe_kv_transfer(self, *, speed_gb_s: float, latency_ms: float, bootstrap_ms: float | None) -> None:
        """Prefill side, per finished transfer: 0.5.2 keeps the last value in gauges, 0.5.23 histograms."""
        for name, value in (
            ("sglang:kv_transfer_speed_gb_s", speed_gb_s),
            ("sglang:kv_transfer_latency_ms", latency_ms),
        ):
            child = self._child(name)
            if self.facts.version == "0.5.2":
                child.set(value)
            else:
                child.observe(value)
        if bootstrap_ms is not None and self.has("sglang:kv_transfer_bootstrap_ms"):
            self._child("sglang:kv_transfer_bootstrap_ms").observe(bootstrap_ms)
