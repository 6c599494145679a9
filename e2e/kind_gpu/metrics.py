"""SGLang's Prometheus metrics as the kind-gpu suite reads them: a text-format parser and per-release metric facts.

The parser handles the Prometheus text exposition format 0.0.4 as `prometheus_client` writes it (what SGLang's
`/metrics` serves): `# HELP`/`# TYPE` lines, samples with optional labels (escaped `\\`, `\"`, `\n` in values),
`NaN`/`+Inf`/`-Inf`, optional timestamps. SGLang runs `prometheus_client` in multiprocess mode
(`PROMETHEUS_MULTIPROC_DIR`, 0.5.2 sglang/srt/utils.py:1254-1275), where a labelled counter that was never incremented
is not exported at all, so "absent" means zero for the failure counters.

Facts per pinned release, read from the wheels (`pip download --no-deps sglang==<v>`):
- `sglang:spec_accept_length`: a gauge (multiprocess_mode mostrecent) holding the mean accept length of the *last
  decode log window* (`--decode-log-interval`, 40 forward steps): 0.5.2 sglang/srt/metrics/collector.py:248-253, set in
  managers/scheduler_metrics_mixin.py:202-231; 0.5.23 sglang/srt/observability/metrics_collector.py:511-516, set in
  managers/scheduler_components/metrics_reporter.py:968-1094 (0.5.23 adds `sglang:spec_accept_rate`, :517-522). The
  cumulative mean over every step since start is `internal_states[0].avg_spec_accept_length` of `/get_server_info`
  (0.5.2 managers/scheduler.py:2260-2263) or `/server_info` (0.5.23 scheduler_components/internal_state.py:119-125,
  243-253; `/get_server_info` is a deprecated alias there).
- Labels: 0.5.2 `model_name, engine_type ("unified" on every server, PD or not), tp_rank, pp_rank[, dp_rank]`
  (scheduler_metrics_mixin.py:52-61); 0.5.23 adds `moe_ep_rank` and sets `engine_type` to prefill/decode/unified
  (observability/metrics_collector.py:1377-1393, disaggregation/utils.py:156-161).
- Failures: counters `sglang:num_bootstrap_failed_reqs_total` and `sglang:num_transfer_failed_reqs_total` in both
  (0.5.2 collector.py:280-289, incremented in disaggregation/prefill.py:244,530 and decode.py:340,603; 0.5.23
  metrics_collector.py:667-676, prefill.py:1312,1377, decode.py:1177,2827,3373).
- Transfer: 0.5.2 registers gauges `sglang:kv_transfer_speed_gb_s` and `sglang:kv_transfer_latency_ms`
  (collector.py:290-301) but never sets them from a transfer (the scheduler's fields stay 0.0,
  managers/scheduler.py:440-441), so only the PD queue gauges (`sglang:num_prefill_inflight_queue_reqs`,
  `sglang:num_decode_transfer_queue_reqs`, ...) show the disaggregation path is instrumented. 0.5.23 observes real
  histograms on the prefill server per finished request: `sglang:kv_transfer_latency_ms`, `sglang:kv_transfer_total_mb`,
  `sglang:kv_transfer_speed_gb_s` (metrics_collector.py:637-648,694-699; disaggregation/prefill.py:1255,
  observability/req_time_stats.py:954-999; the byte count comes from disaggregation/common/conn.py:2238-2246).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

ACCEPT_LENGTH: Final = "sglang:spec_accept_length"
ACCEPT_RATE: Final = "sglang:spec_accept_rate"
BOOTSTRAP_FAILED: Final = "sglang:num_bootstrap_failed_reqs_total"
TRANSFER_FAILED: Final = "sglang:num_transfer_failed_reqs_total"
FAILURE_COUNTERS: Final = (BOOTSTRAP_FAILED, TRANSFER_FAILED)


class MetricsError(ValueError):
    """A metrics page that does not parse, or lacks a metric the suite needs."""


@dataclass(frozen=True)
class Sample:
    """One sample line: metric name, labels and value."""

    name: str
    labels: Mapping[str, str]
    value: float


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE_RE: Final = re.compile(
    rf"^(?P<name>{_NAME})(?:\{{(?P<labels>.*)\}})?\s+(?P<value>\S+)(?:\s+(?P<ts>-?\d+))?\s*$"
)
_LABEL_RE: Final = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPES: Final = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _unescape(raw: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], raw)


def _labels(raw: str, line: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    raw = raw.strip()
    while pos < len(raw):
        match = _LABEL_RE.match(raw, pos)
        if match is None:
            raise MetricsError(f"bad label set in line: {line!r}")
        labels[match.group(1)] = _unescape(match.group(2))
        pos = match.end()
    return labels


def _value(raw: str, line: str) -> float:
    special = {"NaN": math.nan, "+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf}
    if raw in special:
        return special[raw]
    try:
        return float(raw)
    except ValueError:
        raise MetricsError(f"bad sample value {raw!r} in line: {line!r}") from None


def parse(text: str) -> list[Sample]:
    """Every sample of a text-format exposition, in page order; comments and blank lines are skipped."""
    samples: list[Sample] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _SAMPLE_RE.match(stripped)
        if match is None:
            raise MetricsError(f"not a sample line: {line!r}")
        labels = _labels(match.group("labels") or "", line)
        samples.append(Sample(match.group("name"), labels, _value(match.group("value"), line)))
    return samples


def select(samples: Iterable[Sample], name: str, labels: Mapping[str, str] | None = None) -> list[Sample]:
    """The samples named `name` whose labels include every `labels` pair."""
    wanted = dict(labels or {})
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in wanted.items())]


def names(samples: Iterable[Sample]) -> set[str]:
    """Every metric name that has at least one sample."""
    return {s.name for s in samples}


def value(samples: Iterable[Sample], name: str, labels: Mapping[str, str] | None = None) -> float:
    """The value of the one sample matching `name` and `labels`; fails naming what exists when none or several do."""
    found = select(samples, name, labels)
    if len(found) != 1:
        seen = sorted({s.name for s in samples if s.name.split(":")[0] == name.split(":")[0]})[:40]
        what = "no sample" if not found else f"{len(found)} samples ({[dict(s.labels) for s in found]})"
        raise MetricsError(f"{what} of {name} with labels {dict(labels or {})}; metrics present: {seen}")
    return found[0].value


def total(samples: Iterable[Sample], name: str, labels: Mapping[str, str] | None = None) -> float:
    """Sum over every matching sample; 0.0 when none exists (a never-incremented multiprocess counter)."""
    return sum(s.value for s in select(samples, name, labels))


def accept_length(samples: Sequence[Sample]) -> float:
    """`sglang:spec_accept_length` of tensor-parallel rank 0 (the rank whose scheduler logs the metrics)."""
    return value(samples, ACCEPT_LENGTH, {"tp_rank": "0"})


def failure_counts(samples: Sequence[Sample]) -> dict[str, float]:
    """Bootstrap and transfer failure counts, absent counters as 0."""
    return {name: total(samples, name) for name in FAILURE_COUNTERS}


@dataclass(frozen=True)
class TransferEvidence:
    """What one release's metrics show about the prefill -> decode transfer, per pool role."""

    present: Mapping[str, tuple[str, ...]]
    """Metric names that must have a sample on every pod of the role once a request went through."""
    counted: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Metric names whose summed value must be at least the number of requests sent (histogram `_count`s)."""
    note: str = ""
    """What the release does not show, said in the test's report."""


TRANSFER_EVIDENCE: Final[Mapping[str, TransferEvidence]] = {
    "0.5.2": TransferEvidence(
        present={
            "prefill": ("sglang:num_prefill_inflight_queue_reqs", "sglang:num_prefill_prealloc_queue_reqs"),
            "decode": ("sglang:num_decode_transfer_queue_reqs", "sglang:num_decode_prealloc_queue_reqs"),
        },
        note="0.5.2 exports sglang:kv_transfer_latency_ms and sglang:kv_transfer_speed_gb_s but never sets them from a "
        "transfer (always 0.0), so only the PD queue gauges and the failure counters are checked; that KV really "
        "arrived is shown by decode producing the colocated server's tokens",
    ),
    "0.5.23": TransferEvidence(
        present={
            "prefill": ("sglang:num_prefill_inflight_queue_reqs", "sglang:kv_transfer_latency_ms_count"),
            "decode": ("sglang:num_decode_transfer_queue_reqs",),
        },
        counted={"prefill": ("sglang:kv_transfer_total_mb_count", "sglang:kv_transfer_latency_ms_count")},
    ),
}


def transfer_problems(version: str, role: str, samples: Sequence[Sample], requests: int) -> list[str]:
    """Why this pod's metrics fail to show a working transfer (empty when they show one)."""
    evidence = TRANSFER_EVIDENCE[version]
    have = names(samples)
    problems = [f"{name} has no sample" for name in evidence.present.get(role, ()) if name not in have]
    for name in evidence.counted.get(role, ()):
        counted = total(samples, name)
        if counted < requests:
            problems.append(f"{name} = {counted:g}, expected at least {requests} (one per request)")
    problems += [f"{name} = {count:g}" for name, count in failure_counts(samples).items() if count != 0]
    return problems


def avg_accept_length_from_server_info(info: Mapping[str, Any]) -> float | None:
    """The cumulative mean accept length of `/server_info` (or `/get_server_info`): the mean over DP ranks of
    `internal_states[i].avg_spec_accept_length`; None when no rank reports one (no speculative step ran yet)."""
    states = info.get("internal_states")
    if not isinstance(states, list):
        return None
    values = [
        float(s["avg_spec_accept_length"])
        for s in states
        if isinstance(s, Mapping) and isinstance(s.get("avg_spec_accept_length"), int | float)
    ]
    return sum(values) / len(values) if values else None
