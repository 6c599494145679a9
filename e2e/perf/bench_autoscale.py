"""Autoscaling under a compressed day of load: static sizing against an HPA and the operator's planner; asserts nothing.

Run: `.venv/bin/python -m e2e.perf.bench_autoscale --out /tmp/autoscale [--quick] [--accept-drop 0.55:1.2]
[--write-docs]`; `--render /tmp/autoscale/autoscale.json --out DIR [--write-docs]` prints the table and draws the plot
of a saved run again, without running.

The load: one day compressed into --day-seconds emulated seconds (`e2e.serving.load.arrivals.Daily`, a raised cosine
from its trough at 02:00 to its peak at 14:00, trough = peak / --swing, 6 by default) with one sudden burst: for
--burst-seconds from --burst-hour of the day (06:00) the rate jumps to --burst-factor (3) times the curve's rate
at that hour and stays there (`Burst`): 1.125 x the day's peak with the defaults. Requests are
open-loop Poisson (thinned from the curve, seeded: every arm gets the very same schedule) with fixed prompt and output
lengths, streamed through each service's router Service (`e2e.serving.load`, emulated time).

The services: the Llama-3.1-8B + EAGLE3 example (one H100 per pod: the emulator's profile for a pod without a GPU
nodeSelector) and the DeepSeek-R1 + NEXTN example (eight H200 per pod), every pool pod running the emulator's
capacity model (docs/serving-emulator.md) slowed by the time scale S, on a private serving-mode local cluster with the
operator. For each profile four arms get the same schedule, each its own service in a namespace of its own:

  static-peak  replicas sized for the schedule's highest rate (the burst included): P = ceil(peak / (u x one prefill
               server's capacity)), D likewise with one decode server's, u = --utilization; each server's capacity
               is the analytic one of the model the servers really run (`e2e.perf.bench_capacity.predict`);
  static-mean  the same rule at the schedule's mean rate;
  hpa          `spec.autoscaling.mode: External` and one autoscaling/v2 HorizontalPodAutoscaler per pool on its
               DisaggSpecPool scale target, with a Pods metric from custom.metrics.k8s.io (Prometheus scraping the
               pool pods, prometheus-adapter serving it): prefill on the waiting queue per pod
               (`sglang:num_queue_reqs`) and the prompt tokens prefilled per second per pod (the larger
               recommendation wins), decode on the running requests per pod (`sglang:num_running_reqs`), targets
               from the same capacity model (`hpa_metrics`, printed); needs the local plane's metrics pipeline
               (`LocalCluster.up(metrics=True)`) and is skipped, saying so, without it;
  planner      `spec.autoscaling.mode: Planner`: the operator's own planner with the SLA below.
The autoscaled arms start at the size the static rule gives for the rate at 00:00 and may use 1 to --max-replicas
servers per pool.

TIME SCALE. Every emulated server runs S (--time-scale) times slower than the GPU it models and the generator sends S
times slower, so every latency and rate here is reported in emulated (GPU) time. What the operator, the HPA and the
autoscalers see is wall-clock time: the planner is given S x the SLA targets (a TTFT target of 2000 ms at S = 8 is
`ttftMilliseconds: 16000`), and its scale-up lead and scale-down stabilization, the HPA's scale-down stabilization
and the model load of every new pod (`emulator.disaggspec.io/load-seconds`) are the emulated values below times S.
The operator's measuring round, which is the planner's control loop, runs every --health-interval (5 s) over
--health-window (60 s) wall seconds instead of its defaults (15 s over 300 s), which would span hours of a day
compressed into minutes. What is not scaled: the HPA's 15 s sync period, Prometheus' scrape interval, the kubelet's
probe periods, the preStop pause: in emulated time they are S times shorter than on a real cluster, so both
autoscalers react faster here than they would on GPUs.

Figures per profile x arm (emulated time): SLA attainment (the share of scheduled requests that succeeded within both
targets, `e2e.serving.load.sla`; MLPerf Inference Server constraints: Llama TTFT 2000 ms / ITL 100 ms, DeepSeek 2000
/ 80), goodput (requests meeting the SLA per second), failed requests, TTFT and ITL p50/p99, GPU-seconds (the sum over
time of the pool pods bound to a node and not yet gone, terminating ones included, times their GPUs, sampled from the
API server every wall second over the arrival window), good requests per GPU-hour, the replicas per pool and the P:D
ratio over time (time-weighted mean and range), and the emulator's loop lag (the share of the time the servers'
scheduler loops slept through steps that they woke late: a large share means the machine, not the model, set the
figures; pick a larger S), and how each arm came through the burst (`burst_recovery`: how long after its start the SLA
was met again, and the attainment on the rest of the day). It prints the tables, writes autoscale.json and autoscale.png
(per profile: the load curve, replicas per pool per arm, attainment per window per arm) under --out, and with
--write-docs the table into docs/performance.md between `<!-- autoscale:begin -->` and `<!-- autoscale:end -->`.

`--accept-drop AT:LENGTH`: at AT x the day the decode draft's mean accept length drops to LENGTH on every decode
server of every arm (the emulator's run-time option, `POST /emulator/options {"accept-length": ...}`, which changes
the capacity model's verify steps from the next one on), and every decode pod created afterwards gets it before it is
Ready (a new server of the same draft on the same traffic accepts as few). Decode capacity falls in proportion; the
planner's response (more decode servers) shows on the replicas panel.

--schedule: `per-profile` (default) runs a profile's four arms at once on the cluster (one generator process each, all
started at the same instant) and the profiles one after the other; `concurrent` runs all eight at once; `sequential`
one arm at a time. Which one ran is in the output.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import functools
import inspect
import json
import math
import multiprocessing
import tempfile
import threading
import time
import urllib.request
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, get_args

import yaml

from disaggspec import constants as c
from disaggspec.api.v1alpha1.router import RouterPolicy
from disaggspec.sglang.profiles import PROFILES
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.perf.bench_capacity import (
    BENCHES,
    POOLS,
    Bench,
    Prediction,
    Ratio,
    build,
    capacity_report,
    predict,
    server_model,
    servers,
)
from e2e.perf.bench_layouts import free_port_base
from e2e.serving.emulator.capacity import decode_batch
from e2e.serving.kubeapi import KubeApi
from e2e.serving.launch import EMULATOR_ANNOTATION_PREFIX
from e2e.serving.load.arrivals import Daily, RateCurve, default_daily_shape, mean_rate, poisson_arrivals
from e2e.serving.load.client import Bounds, Request, Result, RunReport, plan, run
from e2e.serving.load.lengths import length_model
from e2e.serving.load.sla import Sla, summary
from e2e.serving.routers import ensure_router_venv
from e2e.serving.servicetraffic import ServiceTarget, pod_ready
from e2e.support.kube import Cluster, CommandFailed, wait_for
from e2e.support.operator_process import OperatorProcess
from e2e.support.orphans import exit_on_signals, exit_with_parent
from e2e.support.serving import apply_service, pod_runner, served_model

REPO: Final = Path(__file__).resolve().parents[2]
DOCS: Final = REPO / "docs" / "performance.md"
CRDS: Final = REPO / "crds"
BEGIN: Final = "<!-- autoscale:begin -->"
END: Final = "<!-- autoscale:end -->"
ARMS: Final = ("static-peak", "static-mean", "hpa", "planner")
SCHEDULES: Final = ("per-profile", "concurrent", "sequential")
LOAD_SECONDS_KEY: Final = EMULATOR_ANNOTATION_PREFIX + "load-seconds"
GPU: Final = "nvidia.com/gpu"
POOL_GROUP: Final = "disaggspec.io"
POOL_VERSION: Final = "v1alpha1"
POOL_PLURAL: Final = "disaggspecpools"
GPUS_PER_NODE: Final = 8
HOURS: Final = 24


@dataclass(frozen=True)
class Profile:
    """One example of `bench_capacity.BENCHES` and the peak of its day (emulated requests/s)."""

    bench: Bench
    peak_rps: float
    quick_peak_rps: float


PROFILES_BY_NAME: Final = {
    p.bench.name: p
    for p in (
        # With 4096/256 tokens one prefill server (H100) serves 7.5 req/s and one decode server 27.6 (the servers'
        # own model): 5 prefill + 2 decode at the peak, 6 + 2 in the burst at 90% of capacity.
        Profile(BENCHES[0], peak_rps=30.0, quick_peak_rps=15.0),
        # One prefill server (8 x H200) 13 req/s, one decode server 23.2: 4 + 2 at the peak, 4 + 3 in the burst.
        Profile(BENCHES[1], peak_rps=40.0, quick_peak_rps=20.0),
    )
}


# ---- the schedule (pure) --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Burst:
    """`base`'s rate with a sudden burst (a `RateCurve`): for `seconds` from `start` the rate jumps to `factor` x the
    base rate at `start` and stays there (or follows the base curve, should that rise higher), then falls back."""

    base: RateCurve
    start: float
    seconds: float
    factor: float

    def __post_init__(self) -> None:
        if not (self.factor > 0 and self.seconds >= 0 and self.start >= 0):
            raise ValueError("a burst needs factor > 0, seconds >= 0, start >= 0")

    @property
    def duration(self) -> float:
        return self.base.duration

    def in_burst(self, t: float) -> bool:
        return self.start <= t < self.start + self.seconds

    @property
    def level(self) -> float:
        """The burst's rate: `factor` x the base rate when it starts."""
        return self.factor * self.base.rate(self.start)

    def rate(self, t: float) -> float:
        base = self.base.rate(t)
        return max(base, self.level) if self.in_burst(t) else base

    def peak(self) -> float:
        return max(self.base.peak(), self.level)

    def describe(self) -> str:
        return (
            f"{self.base.describe()}, x{self.factor:g} ({self.level:g}/s) for {self.seconds:g}s from {self.start:g}s"
            if self.seconds
            else self.base.describe()
        )


def day_curve(
    peak_rps: float, day_seconds: float, swing: float, burst_factor: float, burst_hour: float, burst_seconds: float
) -> Burst:
    """The compressed day: `Daily` with trough = peak / swing, and the burst at `burst_hour` of the day."""
    if swing < 1:
        raise ValueError(f"the swing (peak / trough) must be >= 1, not {swing}")
    daily = Daily(peak_rps, day_seconds, default_daily_shape(1.0 / swing))
    return Burst(daily, burst_hour / HOURS * day_seconds, burst_seconds, burst_factor)


def curve_points(curve: RateCurve, samples: int = 2000) -> list[tuple[float, float]]:
    """(t, rate) at the midpoints of `samples` equal steps: for plots and extremes."""
    step = curve.duration / samples
    return [((i + 0.5) * step, curve.rate((i + 0.5) * step)) for i in range(samples)]


def highest_rate(curve: RateCurve, samples: int = 20_000) -> float:
    return max(rate for _, rate in curve_points(curve, samples))


def servers_for(rate: float, per_server: float, utilization: float) -> int:
    """Servers of one pool for `rate` req/s when each serves `per_server` at `utilization` of it (at least 1)."""
    if per_server <= 0 or not 0 < utilization <= 1:
        raise ValueError("per-server capacity must be > 0 and utilization within (0, 1]")
    return max(1, math.ceil(rate / (per_server * utilization) - 1e-9))


def sizes(rate: float, prediction: Prediction, utilization: float) -> Ratio:
    """P and D each sized for `rate` on its own: every pool for its own demand."""
    return Ratio(
        servers_for(rate, prediction.prefill_rps, utilization), servers_for(rate, prediction.decode_rps, utilization)
    )


def ideal_share(
    curve: RateCurve,
    prediction: Prediction,
    utilization: float,
    gpus: Ratio,
    samples: int = 20_000,
    stabilization: float = 0.0,
) -> float:
    """The GPU-seconds of an ideal tracker over those of static-peak: each pool sized at every instant for the
    curve's rate (`sizes`, the same utilization), starting instantly, as before any accept-length drop. No autoscaler
    that keeps the static arms' utilization can use less, so it says how far below static-peak a goal can be met.
    `stabilization` > 0: a pool shrinks only to the largest size it needed over the last that many seconds (the
    scale-down stabilization window both autoscaled arms honour), which is the least an autoscaler with that window
    can hold, however well it foresees the load."""
    step = curve.duration / samples
    peak = sizes(highest_rate(curve, samples), prediction, utilization)
    needed = [sizes(curve.rate((i + 0.5) * step), prediction, utilization) for i in range(samples)]
    width = int(stabilization / step + 1e-9)
    prefill = _trailing_max([n.prefill for n in needed], width)
    decode = _trailing_max([n.decode for n in needed], width)
    held = sum(p * gpus.prefill + d * gpus.decode for p, d in zip(prefill, decode, strict=True)) * step
    return held / ((peak.prefill * gpus.prefill + peak.decode * gpus.decode) * curve.duration)


def _trailing_max(values: Sequence[int], width: int) -> list[int]:
    """Each value's maximum with the `width` values before it (a monotonic deque: linear time)."""
    out: list[int] = []
    window: deque[int] = deque()  # indices, their values decreasing
    for i, value in enumerate(values):
        while window and values[window[-1]] <= value:
            window.pop()
        window.append(i)
        if window[0] < i - width:
            window.popleft()
        out.append(values[window[0]])
    return out


def reactive_ceiling(
    curve: Burst, prediction: Prediction, utilization: float, model_load: float, ttft_seconds: float
) -> float:
    """The highest SLA attainment an autoscaler can reach through the burst without holding capacity for it in
    advance: prefill sized ideally (`sizes`) for the rate just before the burst, the burst's servers asked at its very
    first instant and serving `model_load` seconds later, with unlimited capacity from then on (every waiting request
    served at once) and unlimited decode throughout. Until then the old servers prefill at their full rate, first in,
    first out (a fluid queue); a request that waits longer than `ttft_seconds` misses. Returns 1 - the share of the
    day's arrivals that miss: any reactive autoscaler misses at least those (it reacts later, drains slower, and
    decode is short too), so a goal above it needs capacity held ahead of the burst."""
    if model_load <= 0 or curve.seconds <= 0:
        return 1.0
    start = curve.start
    capacity = sizes(curve.rate(max(start - 1e-6, 0.0)), prediction, utilization).prefill * prediction.prefill_rps
    dt = min(1e-3, model_load / 1000)
    backlog = missed = 0.0
    for k in range(int(model_load / dt)):
        t = start + k * dt
        arriving = curve.rate(t)
        # Served at the earlier of the queue's drain (FIFO, at the old servers' rate) and the new servers' start.
        if min(backlog / capacity, start + model_load - t) > ttft_seconds:
            missed += arriving * dt
        backlog = max(backlog + (arriving - capacity) * dt, 0.0)
    total = mean_rate(curve, 20_000) * curve.duration
    return 1.0 - missed / total if total > 0 else 1.0


def step_integral(samples: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """The integral over [start, end] of a step function sampled as (t, value): each value holds from its sample to
    the next one; before the first sample the first value holds (the state was already there when sampling began)."""
    if end <= start or not samples:
        return 0.0
    ordered = sorted(samples)
    total = 0.0
    for i, (t, value) in enumerate(ordered):
        lo = start if i == 0 else max(start, t)
        hi = min(end, ordered[i + 1][0]) if i + 1 < len(ordered) else end
        if hi > lo:
            total += value * (hi - lo)
    return total


def gpu_seconds(samples: Sequence[tuple[float, int]], start: float, end: float) -> float:
    """GPU-seconds held over [start, end] from (t, GPUs held) samples (`step_integral`)."""
    return step_integral([(t, float(g)) for t, g in samples], start, end)


def time_weighted_mean(samples: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    return step_integral(samples, start, end) / (end - start) if samples and end > start else None


def attainment(results: Sequence[Result], sla: Sla) -> float | None:
    """The share of `results` (scheduled requests) that succeeded and met every target."""
    return sum(sla.met(r) for r in results) / len(results) if results else None


def attainment_windows(results: Sequence[Result], sla: Sla, window: float, horizon: float) -> list[dict[str, Any]]:
    """Per `window` seconds of arrival time over [0, horizon): requests scheduled, their attainment (None when
    none), the offered rate and the failed requests."""
    count = max(1, math.ceil(horizon / window - 1e-9))
    buckets: list[list[Result]] = [[] for _ in range(count)]
    for r in results:
        if 0 <= r.scheduled < horizon:
            buckets[min(count - 1, int(r.scheduled // window))].append(r)
    return [
        {
            "start_s": round(i * window, 3),
            "requests": len(chunk),
            "offered_rps": round(len(chunk) / window, 3),
            "attainment": None if not chunk else round(sum(sla.met(r) for r in chunk) / len(chunk), 4),
            "failed": sum(not r.ok for r in chunk),
        }
        for i, chunk in enumerate(buckets)
    ]


def failure_reasons(results: Sequence[Result], limit: int = 5) -> dict[str, int]:
    """The most common causes of the failed requests: an SGLang abort's text after its "with exception" (the cause,
    without the request's ids), else the error's head."""
    causes: Counter[str] = Counter()
    for r in results:
        if not r.ok:
            cause = r.error.split(" with exception ", 1)[-1] if " with exception " in r.error else r.error
            causes[f"{r.kind}: {cause[:160]}"] += 1
    return dict(causes.most_common(limit))


@dataclass(frozen=True)
class Recovery:
    """How an arm came through the burst: `after_s`, the emulated seconds from the burst's start to the first of
    `hold` consecutive windows that met the SLA for at least `threshold` of their requests (0: it never fell below;
    None: it never recovered within the day); `outside`, the attainment of the requests outside [burst start,
    recovery) (None when it never recovered)."""

    after_s: float | None
    outside: float | None


def burst_recovery(
    windows: Sequence[Mapping[str, Any]], burst: Sequence[float], threshold: float = 0.95, hold: int = 3
) -> Recovery:
    """`windows` as `attainment_windows` gives them (equal widths, oldest first); `burst` (start, end) in the same
    time. A reactive autoscaler loses the first seconds of a sudden burst whatever it does (detection, model load);
    this says how long the loss lasted and how the arm did on the rest of the day."""
    if len(windows) < 2:
        return Recovery(None, None)
    width = windows[1]["start_s"] - windows[0]["start_s"]
    first = next((i for i, w in enumerate(windows) if w["start_s"] + width > burst[0]), len(windows))

    def met(window: Mapping[str, Any]) -> bool:
        return window["attainment"] is None or window["attainment"] >= threshold

    back = next((j for j in range(first, len(windows) - hold + 1) if all(met(w) for w in windows[j : j + hold])), None)
    if back is None:
        return Recovery(None, None)
    kept = [w for i, w in enumerate(windows) if (i < first or i >= back) and w["requests"]]
    total = sum(w["requests"] for w in kept)
    outside = sum(w["requests"] * w["attainment"] for w in kept) / total if total else None
    return Recovery(max(windows[back]["start_s"] - burst[0], 0.0), outside)


# ---- the cluster side -----------------------------------------------------------------------------------------------


ROUTER_POLICIES: Final = get_args(RouterPolicy)


@dataclass(frozen=True)
class Settings:
    day_seconds: float
    swing: float
    burst_factor: float
    burst_hour: float
    burst_seconds: float
    prompt: int
    output: int
    time_scale: float
    utilization: float
    max_replicas: int
    model_load: float
    """Emulated seconds a new pool server's model load takes."""
    lead: float
    """Planner scale-up lead, emulated seconds."""
    stabilization: float
    """Scale-down stabilization of the planner and the HPA, emulated seconds."""
    accept_drop: tuple[float, float] | None
    hpa_prefill_metric: str
    hpa_prefill_rate_metric: str
    hpa_decode_metric: str
    hpa_prefill_queue: float | None
    hpa_decode_running: float | None
    timeout: float
    """Per request and drain, emulated seconds."""
    seed: int
    ready_timeout: float
    health_interval: float = 5.0
    """The operator's measuring interval (wall seconds): the planner decides once per round."""
    health_window: float = 60.0
    """The operator's measuring window (wall seconds): what the planner's demand and trend are read from."""
    router_policy: RouterPolicy | None = None
    """Every arm's PD router `--policy` (spec.router.policy); None keeps the example's (round_robin)."""


@dataclass
class Arm:
    """One service of one profile under one sizing policy."""

    profile: Profile
    arm: str
    namespace: str
    obj: dict[str, Any] = field(default_factory=dict)
    initial: Ratio = field(default_factory=lambda: Ratio(1, 1))
    notes: list[str] = field(default_factory=list)
    skipped: str = ""

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def label(self) -> str:
        return f"{self.profile.bench.name}/{self.arm}"


def metrics_option_exists() -> bool:
    """Whether the local plane can start the metrics pipeline (`LocalCluster.up(metrics=True)`)."""
    return "metrics" in inspect.signature(LocalCluster.up).parameters


def autoscaling_in_crds() -> bool:
    """Whether this tree's CRDs have spec.autoscaling and the DisaggSpecPool scale target."""
    service = (CRDS / "disaggspecservices.disaggspec.io.yaml").read_text()
    return "autoscaling:" in service and (CRDS / f"{POOL_PLURAL}.{POOL_GROUP}.yaml").exists()


def service_object(profile: Profile, arm: str, ratio: Ratio, s: Settings) -> dict[str, Any]:
    """The example at `ratio`, time-scaled, with the emulated model load; autoscaled arms get spec.autoscaling."""
    obj = build(profile.bench, ratio, s.time_scale)
    if s.router_policy:
        obj["spec"].setdefault("router", {})["policy"] = s.router_policy
    for role in POOLS:
        annotations = obj["spec"][role]["podAnnotations"]
        annotations[LOAD_SECONDS_KEY] = f"{s.model_load * s.time_scale:g}"
    limits = {"minReplicas": 1, "maxReplicas": s.max_replicas}
    if arm == "hpa":
        obj["spec"]["autoscaling"] = {"mode": "External", "prefill": dict(limits), "decode": dict(limits)}
    elif arm == "planner":
        obj["spec"]["autoscaling"] = {
            "mode": "Planner",
            "prefill": dict(limits),
            "decode": dict(limits),
            "planner": {
                # wall-clock targets: the servers run S times slower than the GPUs they model
                "ttftMilliseconds": round(profile.bench.ttft_ms * s.time_scale),
                "itlMilliseconds": round(profile.bench.itl_ms * s.time_scale),
                "prefillDecodeRatio": {"min": 0.25, "max": 4},
                "scaleUpLeadSeconds": round(s.lead * s.time_scale),
                "scaleDownStabilizationSeconds": round(s.stabilization * s.time_scale),
            },
        }
    return obj


def gpus_per_pod(obj: Mapping[str, Any], role: str) -> int:
    spec = obj["spec"][role]
    per = int(((spec.get("resources") or {}).get("limits") or {}).get(GPU, 1))
    return per * int(spec.get("nodesPerInstance", 1))


def hpa_metrics(
    bench: Bench, prediction: Prediction, pools: Mapping[str, list[dict[str, Any]]], s: Settings
) -> dict[str, list[tuple[str, float]]]:
    """Per pool, the HPA's Pods metrics and their per-pod targets, from the servers' own model (the HPA takes the
    largest recommendation of a pool's metrics):
      prefill: the waiting queue (`sglang:num_queue_reqs`) that one server clears in a quarter of the TTFT target at
        `utilization` of its capacity, and the prompt tokens it prefills per second (`sglang:prompt_tokens_total`'s
        rate) at `utilization` of its capacity: a queue is empty under capacity, so alone it would scale a busy pool
        down to one; the rate is over wall-clock time, so its target is divided by S;
      decode: the running requests (`sglang:num_running_reqs`), `utilization` x what one server runs at saturation
        (`capacity.decode_batch` with its own limits)."""
    queue = s.hpa_prefill_queue or max(1.0, round(prediction.prefill_rps * s.utilization * bench.ttft_ms / 1000 / 4, 1))
    prefill = [(s.hpa_prefill_metric, queue)]
    if s.hpa_prefill_rate_metric:
        tokens = prediction.prefill_rps * s.utilization * s.prompt / s.time_scale
        prefill.append((s.hpa_prefill_rate_metric, round(tokens)))
    decode, ranks = server_model(pools["decode"][0])
    running = s.hpa_decode_running or max(
        1.0, round(s.utilization * ranks * decode_batch(decode.limits, s.prompt, s.output))
    )
    return {"prefill": prefill, "decode": [(s.hpa_decode_metric, running)]}


def hpa_objects(arm: Arm, s: Settings, metrics: Mapping[str, Sequence[tuple[str, float]]]) -> list[dict[str, Any]]:
    """One autoscaling/v2 HPA per pool on its DisaggSpecPool with `metrics` (Pods metrics, average per pod);
    scale-down stabilized like the planner (wall seconds), scale-up at once (the HPA's default policies)."""
    return [
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": f"{arm.name}-{role}", "namespace": arm.namespace},
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": f"{POOL_GROUP}/{POOL_VERSION}",
                    "kind": "DisaggSpecPool",
                    "name": f"{arm.name}-{role}",
                },
                "minReplicas": 1,
                "maxReplicas": s.max_replicas,
                "metrics": [
                    {
                        "type": "Pods",
                        "pods": {
                            "metric": {"name": metric},
                            "target": {"type": "AverageValue", "averageValue": f"{target:g}"},
                        },
                    }
                    for metric, target in metrics[role]
                ],
                "behavior": {
                    "scaleDown": {"stabilizationWindowSeconds": round(s.stabilization * s.time_scale)},
                    "scaleUp": {"stabilizationWindowSeconds": 0},
                },
            },
        }
        for role in POOLS
    ]


def _post_json(url: str, body: Mapping[str, Any], timeout: float = 5.0) -> dict[str, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with opener.open(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def _http_url(pod: Mapping[str, Any], path: str) -> str:
    port = 30000
    for p in pod["spec"]["containers"][0].get("ports") or []:
        if p.get("name") == "http":
            port = int(p["containerPort"])
    return f"http://{pod['status']['podIP']}:{port}{path}"


@dataclass
class Sample:
    """One listing of every pool pod of the cluster, per namespace."""

    wall: float
    gpus: dict[str, int]
    pods: dict[str, dict[str, int]]
    """namespace -> role -> pods holding GPUs (bound to a node and not gone; terminating ones included)."""
    ready: dict[str, dict[str, int]]
    """namespace -> role -> ready servers (not terminating)."""


class ClusterSampler:
    """A thread: every `interval` wall seconds one listing of every pool pod (GPUs held and pods per role per
    namespace); every `lag_every` listings each ready pool server's `GET /emulator/capacity` (its loop's cumulative
    lag and busy seconds, kept per pod, so a pod that is gone keeps its last reading); once `accept_length` is set,
    every decode pod with an IP that has not had it yet gets `POST /emulator/options`."""

    def __init__(self, api: KubeApi, namespaces: Sequence[str], interval: float = 1.0, lag_every: int = 20) -> None:
        self.api = api
        self.namespaces = set(namespaces)
        self.interval = interval
        self.lag_every = lag_every
        self.samples: list[Sample] = []
        self.lag: dict[str, tuple[str, float, float]] = {}
        """pod uid -> (namespace, lag_seconds, busy_seconds), the latest reading."""
        self.accept_length: float | None = None
        self.accept_set: dict[str, tuple[str, float]] = {}
        """pod uid -> (namespace, wall time its accept length was set)."""
        self.accept_errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> ClusterSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _loop(self) -> None:
        ticks = 0
        while not self._stop.wait(self.interval):
            try:
                pods = self.api.request(
                    "GET", "/api/v1/pods", query={"labelSelector": f"{c.LABEL_ROLE} in (prefill,decode)"}
                )["items"]
            except Exception:  # a failed listing is a missing sample
                continue
            pods = [p for p in pods if p["metadata"]["namespace"] in self.namespaces]
            self.samples.append(self.tally(time.time(), pods))
            if self.accept_length is not None:
                self._set_accept(pods)
            ticks += 1
            if ticks % self.lag_every == 0:
                self.read_lag(pods)

    @staticmethod
    def tally(wall: float, pods: Sequence[Mapping[str, Any]]) -> Sample:
        gpus: Counter[str] = Counter()
        held: dict[str, Counter[str]] = defaultdict(Counter)
        ready: dict[str, Counter[str]] = defaultdict(Counter)
        for pod in pods:
            ns = pod["metadata"]["namespace"]
            role = pod["metadata"]["labels"].get(c.LABEL_ROLE, "")
            phase = (pod.get("status") or {}).get("phase")
            if pod["spec"].get("nodeName") and phase in ("Pending", "Running"):
                gpus[ns] += sum(
                    int(((ctr.get("resources") or {}).get("limits") or {}).get(GPU, 0))
                    for ctr in pod["spec"]["containers"]
                )
                if pod["metadata"]["labels"].get(c.LWS_LABEL_WORKER_INDEX, "0") == "0":
                    held[ns][role] += 1
            if pod_ready(pod) and pod["metadata"]["labels"].get(c.LWS_LABEL_WORKER_INDEX, "0") == "0":
                ready[ns][role] += 1
        return Sample(wall, dict(gpus), {k: dict(v) for k, v in held.items()}, {k: dict(v) for k, v in ready.items()})

    def read_lag(self, pods: Sequence[Mapping[str, Any]]) -> None:
        for pod in pods:
            if not pod_ready(pod):
                continue
            try:
                report = capacity_report(dict(pod))
            except Exception:  # a pod going away: keep its last reading
                continue
            self.lag[pod["metadata"]["uid"]] = (
                pod["metadata"]["namespace"],
                float(report.get("lag_seconds") or 0.0),
                float(report.get("busy_seconds") or 0.0),
            )

    def lag_share(self, namespace: str) -> float | None:
        """Late wake-ups over busy time of every pool server of `namespace` read so far (gone ones included)."""
        readings = [(lag, busy) for ns, lag, busy in self.lag.values() if ns == namespace]
        busy = sum(b for _, b in readings)
        return sum(lag for lag, _ in readings) / busy if busy > 0 else None

    def _set_accept(self, pods: Sequence[Mapping[str, Any]]) -> None:
        for pod in pods:
            uid = pod["metadata"]["uid"]
            if (
                uid in self.accept_set
                or pod["metadata"]["labels"].get(c.LABEL_ROLE) != "decode"
                or pod["metadata"].get("deletionTimestamp")
                or not (pod.get("status") or {}).get("podIP")
            ):
                continue
            try:
                _post_json(_http_url(pod, "/emulator/options"), {"accept-length": f"{self.accept_length:g}"}, 2.0)
            except Exception as error:  # not listening yet (model loading): the next tick retries
                self.accept_errors[type(error).__name__] += 1
                continue
            self.accept_set[uid] = (pod["metadata"]["namespace"], time.time())


def drive_arm(
    kubeconfig: str, namespace: str, name: str, model: str, requests: list[Request], bounds: Bounds, seed: int,
    scale: float, start_wall: float,
) -> RunReport:  # fmt: skip
    """One arm's open-loop load (in a process of its own, so that the generators do not share one GIL), starting at
    wall time `start_wall` like every other arm's. It ends with the benchmark, however that ends."""
    exit_with_parent()
    target = ServiceTarget(KubeApi(Path(kubeconfig), timeout=5.0), namespace, f"{name}-router", refresh_interval=1.0)
    time.sleep(max(0.0, start_wall - time.time()))
    return asyncio.run(run(requests, target, model=model, bounds=bounds, seed=seed, time_scale=scale))


def _wait_pools(cluster: Cluster, arm: Arm, want: Ratio, timeout: float) -> dict[str, list[dict[str, Any]]]:
    target = {"prefill": want.prefill, "decode": want.decode}
    found: dict[str, list[dict[str, Any]]] = {}

    def ready() -> bool:
        found.update({role: servers(cluster, arm.namespace, arm.name, role) for role in POOLS})
        return all(len(found[role]) == target[role] for role in POOLS)

    wait_for(f"{arm.label}: {want} pool servers Ready", ready, timeout, 1.0)
    return found


def _scale_pool(cluster: Cluster, arm: Arm, role: str, replicas: int) -> None:
    cluster.kubectl(
        "scale", f"{POOL_PLURAL}.{POOL_GROUP}/{arm.name}-{role}", "-n", arm.namespace, f"--replicas={replicas}"
    )


def _pool_targets_exist(cluster: Cluster, arm: Arm) -> bool:
    got = cluster.kubectl("get", f"{POOL_PLURAL}.{POOL_GROUP}", "-n", arm.namespace, "-o", "name", check=False)
    return got.returncode == 0 and all(f"/{arm.name}-{role}" in got.stdout for role in POOLS)


def _skip(cluster: Cluster, arm: Arm, why: str, log: Callable[[str], None]) -> None:
    arm.skipped = why
    log(f"{arm.label}: SKIPPED: {why}")
    cluster.kubectl("delete", "namespace", arm.namespace, "--wait=false", check=False)


def prepare(
    cluster: Cluster, by_profile: Mapping[str, list[Arm]], curves: Mapping[str, Burst], s: Settings,
    log: Callable[[str], None],
) -> dict[str, Prediction]:  # fmt: skip
    """Apply every arm's service at 1:1 (every profile at once: their models load together), then per profile
    predict one server's capacity from the servers' own model and size each arm (static: apply the replicas;
    autoscaled: scale its DisaggSpecPools to the start size), then wait until every arm runs its starting size and
    create the HPAs. The predictions per profile."""
    for arm in (a for arms in by_profile.values() for a in arms):
        arm.obj = service_object(arm.profile, arm.arm, Ratio(1, 1), s)
        cluster.kubectl("create", "namespace", arm.namespace)
        try:
            arm.obj = apply_service(cluster, arm.namespace, arm.obj)
        except CommandFailed as error:
            if arm.arm.startswith("static"):
                raise
            _skip(cluster, arm, f"the service with spec.autoscaling was refused: {str(error)[:300]}", log)
    predictions: dict[str, Prediction] = {}
    for name, arms in by_profile.items():
        predictions[name] = _size(cluster, arms, curves[name], s, log)
    for name, arms in by_profile.items():
        for arm in arms:
            if arm.skipped:
                continue
            pools = _wait_pools(cluster, arm, arm.initial, s.ready_timeout)
            if arm.arm == "hpa":
                _start_hpa(cluster, arm, predictions[name], pools, s, log)
            if not arm.skipped:
                log(f"{arm.label}: starts at P:D {arm.initial} ({'; '.join(arm.notes) or 'no autoscaler'})")
    return predictions


def _size(cluster: Cluster, arms: list[Arm], curve: Burst, s: Settings, log: Callable[[str], None]) -> Prediction:
    """One profile: predict from its first running arm's servers, then set every arm's starting size."""
    first = next(a for a in arms if not a.skipped)
    pools = _wait_pools(cluster, first, Ratio(1, 1), s.ready_timeout)
    prediction = predict(pools, Ratio(1, 1), s.prompt, s.output)
    peak = highest_rate(curve)
    mean = mean_rate(curve, 20_000)
    start = curve.rate(0.0)
    log(
        f"{first.profile.bench.name}: one prefill server {prediction.prefill_rps:.1f} req/s, one decode server "
        f"{prediction.decode_rps:.1f} req/s ({prediction.servers['prefill']} | {prediction.servers['decode']}); "
        f"schedule: highest {peak:.1f}, mean {mean:.1f}, at 00:00 {start:.1f} req/s"
    )
    for arm in arms:
        if arm.skipped:
            continue
        if arm.arm == "static-peak":
            want = sizes(peak, prediction, s.utilization)
        elif arm.arm == "static-mean":
            want = sizes(mean, prediction, s.utilization)
        else:
            want = sizes(start, prediction, s.utilization)
            want = Ratio(min(want.prefill, s.max_replicas), min(want.decode, s.max_replicas))
        arm.initial = want
        if arm.arm.startswith("static"):
            arm.obj = apply_service(cluster, arm.namespace, service_object(arm.profile, arm.arm, want, s))
            continue
        if not _wait_or_false(functools.partial(_pool_targets_exist, cluster, arm), 60):
            why = "the operator created no DisaggSpecPool scale targets within 60 s (spec.autoscaling not implemented)"
            _skip(cluster, arm, why, log)
            continue
        for role, replicas in (("prefill", want.prefill), ("decode", want.decode)):
            if replicas != 1:
                _scale_pool(cluster, arm, role, replicas)
    return prediction


def _start_hpa(
    cluster: Cluster, arm: Arm, prediction: Prediction, pools: Mapping[str, list[dict[str, Any]]], s: Settings,
    log: Callable[[str], None],
) -> None:  # fmt: skip
    """Wait (bounded) until custom.metrics.k8s.io serves the HPA's metrics, then create one HPA per pool."""
    names = [m for m in (s.hpa_prefill_metric, s.hpa_prefill_rate_metric, s.hpa_decode_metric) if m]
    why = ""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and (why := hpa_metrics_served(cluster, names)):
        time.sleep(5)
    if why:
        _skip(cluster, arm, f"no per-pod metrics for the HPA after 300 s: {why}", log)
        return
    metrics = hpa_metrics(arm.profile.bench, prediction, pools, s)
    arm.notes.append(
        "HPA targets per pod: "
        + "; ".join(f"{role} " + ", ".join(f"{m} {t:g}" for m, t in metrics[role]) for role in POOLS)
    )
    for hpa in hpa_objects(arm, s, metrics):
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(hpa))


def _wait_or_false(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(1.0)
    return False


def hpa_metrics_served(cluster: Cluster, names: Sequence[str]) -> str:
    """'' when custom.metrics.k8s.io lists every metric in `names` for pods, else why not."""
    got = cluster.kubectl("get", "--raw", "/apis/custom.metrics.k8s.io/v1beta1", check=False)
    if got.returncode != 0:
        return f"custom.metrics.k8s.io is not served: {got.stderr.strip()[:200]}"
    listed = {str(r.get("name", "")) for r in json.loads(got.stdout).get("resources", [])}
    missing = [n for n in names if f"pods/{n}" not in listed]
    if missing:
        return f"custom.metrics.k8s.io does not list {missing} for pods (it lists {sorted(listed)[:12]})"
    return ""


@dataclass
class Group:
    """Arms measured at once."""

    arms: list[Arm]


def run_group(
    cluster: Cluster, kubeconfig: Path, group: Group, s: Settings, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Prepare the group's arms, send every arm its profile's schedule at the same instant, sample the pods, apply
    the accept-length drop when due; the figures of every arm."""
    by_profile: dict[str, list[Arm]] = defaultdict(list)
    for arm in group.arms:
        by_profile[arm.profile.bench.name].append(arm)
    curves: dict[str, Burst] = {}
    requests: dict[str, list[Request]] = {}
    for name, arms in by_profile.items():
        peak = arms[0].profile.peak_rps
        curve = day_curve(peak, s.day_seconds, s.swing, s.burst_factor, s.burst_hour, s.burst_seconds)
        curves[name] = curve
        limit = int(mean_rate(curve, 20_000) * s.day_seconds * 2) + 50
        requests[name] = plan(
            poisson_arrivals(curve, s.seed, limit),
            length_model(f"fixed:{s.prompt}", f"fixed:{s.output}", None),
            s.seed,
        )
    predictions = prepare(cluster, by_profile, curves, s, log)
    arms = [a for a in group.arms if not a.skipped]
    namespaces = [a.namespace for a in arms]
    api = KubeApi(kubeconfig)
    sampler = ClusterSampler(api, namespaces).start()
    scale = s.time_scale
    start_wall = time.time() + 5.0
    log(
        f"load: {', '.join(f'{n}: {len(r)} requests' for n, r in requests.items())} over {s.day_seconds:g} emulated "
        f"s at time scale {scale:g} (about {s.day_seconds * scale / 60:.0f} wall minutes); "
        f"arms {[a.label for a in arms]}"
    )
    context = multiprocessing.get_context("spawn")
    reports: dict[str, RunReport] = {}
    errors: dict[str, str] = {}
    drop_wall = None
    from e2e.perf import bench_autoscale as module  # picklable by its importable name, also under `python -m`

    # A Pool, not a ProcessPoolExecutor: leaving its block on an error or a signal terminates the generators, where
    # the executor's shutdown waited for their whole schedule.
    with context.Pool(processes=max(1, len(arms))) as pool:
        futures = {}
        for arm in arms:
            name = arm.profile.bench.name
            bounds = Bounds(
                max_requests=len(requests[name]) + 1, max_concurrency=4096, duration=s.day_seconds,
                timeout=s.timeout, drain=s.timeout,
            )  # fmt: skip
            futures[arm.label] = pool.apply_async(module.drive_arm, (
                str(kubeconfig), arm.namespace, arm.name, served_model(arm.obj), requests[name], bounds, s.seed,
                scale, start_wall,
            ))  # fmt: skip
        if s.accept_drop is not None:
            at, length = s.accept_drop
            drop_wall = start_wall + at * s.day_seconds * scale
            while time.time() < drop_wall and not all(f.ready() for f in futures.values()):
                time.sleep(0.5)
            sampler.accept_length = length
            log(f"accept length of every decode server -> {length:g} at {at * s.day_seconds:.0f} emulated s")
        # A Pool replaces a worker that dies and its result never comes: bounded by the schedule, its requests'
        # timeout and drain, and a margin.
        deadline = start_wall + (s.day_seconds + 2 * s.timeout) * scale + 300.0
        for label, future in futures.items():
            try:
                reports[label] = future.get(timeout=max(deadline - time.time(), 1.0))
            except Exception as error:  # one arm's generator failing keeps the others' figures
                errors[label] = f"{type(error).__name__}: {error}"
                log(f"{label}: the load generator failed: {errors[label]}")
    sampler.read_lag([p for p in _all_pool_pods(cluster) if p["metadata"]["namespace"] in namespaces])
    sampler.stop()
    rows = []
    for arm in group.arms:
        if arm.skipped:
            rows.append(_skipped_row(arm))
            continue
        name = arm.profile.bench.name
        if arm.label not in reports:
            rows.append(_skipped_row(arm, f"load generator failed: {errors.get(arm.label, '?')}"))
            continue
        rows.append(
            figures(arm, reports[arm.label], sampler, start_wall, s, curves[name], predictions[name], drop_wall)
        )
    for arm, row in zip(group.arms, rows, strict=True):
        if not row.get("skipped"):
            row["scalings"] = scaling_events(_events(cluster, arm.namespace), start_wall, scale)
    # everything the group created goes: the next group starts on an idle cluster
    for arm in group.arms:
        cluster.kubectl("delete", "namespace", arm.namespace, "--wait=false", check=False)
    for arm in group.arms:
        _wait_or_false(functools.partial(_namespace_empty, cluster, arm.namespace), 300)
    return rows


SCALING_REASONS: Final = ("PoolScaled", "SuccessfulRescale")
"""The planner's decisions (the operator's Event) and the HorizontalPodAutoscaler controller's rescales."""


def _events(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    got = cluster.kubectl("get", "events", "-n", namespace, "-o", "json", check=False)
    try:
        items: list[dict[str, Any]] = json.loads(got.stdout or "{}").get("items", [])
    except ValueError:
        return []
    return items


def scaling_events(events: Sequence[Mapping[str, Any]], start_wall: float, scale: float) -> list[list[Any]]:
    """[emulated seconds, reason, message] of each scaling Event, oldest first (its latest occurrence; Kubernetes
    stamps Events to the second, 1/scale emulated s)."""
    found = []
    for event in events:
        if event.get("reason") not in SCALING_REASONS:
            continue
        stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
        if not isinstance(stamp, str):
            continue
        wall = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        found.append([round((wall - start_wall) / scale, 1), event["reason"], str(event.get("message", ""))])
    return sorted(found, key=lambda row: row[0])


def _all_pool_pods(cluster: Cluster) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = json.loads(
        cluster.kubectl("get", "pods", "-A", "-l", f"{c.LABEL_ROLE} in (prefill,decode)", "-o", "json").stdout
    )["items"]
    return pods


def _namespace_empty(cluster: Cluster, namespace: str) -> bool:
    got = cluster.kubectl("get", "pods", "-n", namespace, "-o", "name", check=False)
    return not got.stdout.strip()


def _skipped_row(arm: Arm, why: str = "") -> dict[str, Any]:
    return {"profile": arm.profile.bench.name, "arm": arm.arm, "skipped": why or arm.skipped}


def figures(
    arm: Arm,
    report: RunReport,
    sampler: ClusterSampler,
    start_wall: float,
    s: Settings,
    curve: Burst,
    prediction: Prediction,
    drop_wall: float | None,
) -> dict[str, Any]:
    """One arm's figures (see the module docstring); times in emulated seconds from the start of the load."""
    bench = arm.profile.bench
    sla = Sla(ttft_ms=bench.ttft_ms, itl_ms=bench.itl_ms)
    gpus = Ratio(gpus_per_pod(arm.obj, "prefill"), gpus_per_pod(arm.obj, "decode"))
    whole = summary(report, sla)
    horizon = s.day_seconds
    scale = s.time_scale
    series: list[tuple[float, int, int, int, int, int]] = []
    for sample in sampler.samples:
        t = (sample.wall - start_wall) / scale
        held = sample.pods.get(arm.namespace, {})
        ready = sample.ready.get(arm.namespace, {})
        series.append(
            (
                round(t, 3),
                int(sample.gpus.get(arm.namespace, 0)),
                int(held.get("prefill", 0)),
                int(held.get("decode", 0)),
                int(ready.get("prefill", 0)),
                int(ready.get("decode", 0)),
            )
        )
    window = [x for x in series if 0 <= x[0] <= horizon]
    gpu_s = gpu_seconds([(x[0], x[1]) for x in series], 0.0, horizon)
    ratio = [(x[0], x[2] / x[3]) for x in series if x[3] > 0]
    good = whole["requests"]["met_sla"]
    return {
        "profile": bench.name,
        "arm": arm.arm,
        "skipped": "",
        "sla": {"ttft_ms": bench.ttft_ms, "itl_ms": bench.itl_ms},
        "initial": str(arm.initial),
        "notes": arm.notes,
        "requests": whole["requests"],
        "failures": whole["failures"],
        "errors": whole["errors"],
        "failure_reasons": failure_reasons(report.results),
        "attainment": whole["sla_attainment"],
        "goodput_rps": whole["goodput_rps"],
        "offered_rps": whole["offered_rps"],
        "ttft_ms": whole["ttft_ms"],
        "itl_ms": whole["itl_ms"],
        "gpu_seconds": round(gpu_s, 1),
        "good_per_gpu_hour": round(good / gpu_s * 3600, 1) if gpu_s else None,
        "prefill_range": [min((x[2] for x in window), default=0), max((x[2] for x in window), default=0)],
        "decode_range": [min((x[3] for x in window), default=0), max((x[3] for x in window), default=0)],
        "pd_ratio_mean": _round(time_weighted_mean(ratio, 0.0, horizon), 3),
        "pd_ratio_range": [
            round(min((r for _, r in ratio), default=0), 3),
            round(max((r for _, r in ratio), default=0), 3),
        ],
        "prediction": dataclasses.asdict(prediction),
        "ideal_share": round(ideal_share(curve, prediction, s.utilization, gpus), 3),
        # The bounds the day's time constants set on any autoscaler (see `ideal_share` and `reactive_ceiling`).
        "stabilized_share": round(
            ideal_share(curve, prediction, s.utilization, gpus, stabilization=s.stabilization), 3
        ),
        "reactive_ceiling": round(
            reactive_ceiling(curve, prediction, s.utilization, s.model_load, bench.ttft_ms / 1000), 4
        ),
        "time_scale": scale,
        "accept_drop_emulated_s": None if drop_wall is None else round((drop_wall - start_wall) / scale, 1),
        "accept_set_pods": sum(1 for ns, _ in sampler.accept_set.values() if ns == arm.namespace),
        "lag_share": _round(sampler.lag_share(arm.namespace), 4),
        "generator_cpu_s": round(report.cpu_seconds, 1),
        "windows": attainment_windows(report.results, sla, s.day_seconds / 48, horizon),
        "series": series,
        "curve": [(round(t, 2), round(r, 3)) for t, r in curve_points(curve, 240)],
        "burst_emulated_s": [curve.start, curve.start + curve.seconds],
    }


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


# ---- output ---------------------------------------------------------------------------------------------------------

HEAD: Final = (
    "| profile | arm | SLA attainment | goodput req/s | failed / requests | TTFT p50 / p99 ms | ITL p50 / p99 ms "
    "| GPU-s | GPU-s / static-peak | good req per GPU-h | prefill min-max | decode min-max | P:D mean (range) "
    "| lag share |"
)


def _ms(block: Mapping[str, Any], key: str) -> str:
    value = block.get(key)
    return "-" if value is None else f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
    lines = [HEAD, "|" + " --- |" * (HEAD.count(" | ") + 1)]
    peaks = {r["profile"]: r["gpu_seconds"] for r in rows if r.get("arm") == "static-peak" and not r.get("skipped")}
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['profile']} | {r['arm']} | skipped: {r['skipped']} |" + " |" * (HEAD.count(" | ") - 2))
            continue
        base = peaks.get(r["profile"])
        rel = f"{r['gpu_seconds'] / base:.2f}" if base else "-"
        share = "-" if r.get("lag_share") is None else f"{r['lag_share']:.1%}"
        lines.append(
            f"| {r['profile']} | {r['arm']} | {r['attainment']:.1%} | {r['goodput_rps']:g} "
            f"| {r['requests']['failed']} / {r['requests']['scheduled']} "
            f"| {_ms(r['ttft_ms'], 'p50')} / {_ms(r['ttft_ms'], 'p99')} "
            f"| {_ms(r['itl_ms'], 'p50')} / {_ms(r['itl_ms'], 'p99')} "
            f"| {r['gpu_seconds']:.0f} | {rel} | {r['good_per_gpu_hour']} "
            f"| {r['prefill_range'][0]}-{r['prefill_range'][1]} | {r['decode_range'][0]}-{r['decode_range'][1]} "
            f"| {r['pd_ratio_mean']} ({r['pd_ratio_range'][0]}-{r['pd_ratio_range'][1]}) | {share} |"
        )
    lines += ["", *burst_table(rows)]
    ideal = {r["profile"]: r["ideal_share"] for r in rows if r.get("ideal_share") is not None}
    if ideal:
        lines.append("")
        lines.append(
            "An ideal tracker (each pool sized at every instant for the schedule's rate at the static arms' "
            "utilization, no model load, no accept-length drop) would hold "
            + ", ".join(f"{share:.2f} ({profile})" for profile, share in sorted(ideal.items()))
            + " of static-peak's GPU-seconds: no autoscaler at that utilization can use less."
        )
    # Every arm of a profile carries the same bounds: one row per profile says them.
    bounds = {
        r["profile"]: r for r in rows if r.get("stabilized_share") is not None and r.get("reactive_ceiling") is not None
    }
    if bounds:
        lines.append("")
        lines.append(
            "What the day's time constants allow any autoscaler (the same model, before any accept-length drop): "
            + "; ".join(
                f"{profile}: at least {r['stabilized_share']:.2f} of static-peak's GPU-seconds with this scale-down "
                f"stabilization (the ideal tracker shrinking only to the most it needed within the window), at most "
                f"{r['reactive_ceiling']:.1%} attainment without capacity held ahead of the burst (its servers asked "
                "at its first instant, up a model load later, prefill's queue of the trough-sized pool meanwhile)"
                for profile, r in sorted(bounds.items())
            )
            + "."
        )
    return "\n".join(lines)


def burst_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Per arm: how long after the burst's start its attainment came back (`burst_recovery`), and its attainment on
    the rest of the day."""
    lines = [
        "| profile | arm | burst: SLA met again after (emulated s) | attainment on the rest of the day |",
        "| --- | --- | --- | --- |",
    ]
    for r in rows:
        if r.get("skipped") or not r.get("windows"):
            continue
        found = burst_recovery(r["windows"], r["burst_emulated_s"])
        after = "never (within the day)" if found.after_s is None else f"{found.after_s:.0f}"
        outside = "-" if found.outside is None else f"{found.outside:.1%}"
        lines.append(f"| {r['profile']} | {r['arm']} | {after} | {outside} |")
    return lines


def header(s: Settings, schedule: str, profiles: Sequence[Profile]) -> str:
    drop = (
        f" At {s.accept_drop[0]:.0%} of the day every decode server's accept length drops to {s.accept_drop[1]:g}."
        if s.accept_drop
        else ""
    )
    peaks = ", ".join(f"{p.bench.name} peak {p.peak_rps:g} req/s" for p in profiles)
    routing = f"the PD router's policy {s.router_policy}; " if s.router_policy else ""
    return (
        f"One day in {s.day_seconds:g} emulated s (trough = peak / {s.swing:g}; {peaks}) with a x{s.burst_factor:g} "
        f"burst of {s.burst_seconds:g} s at {s.burst_hour:g}:00; prompt {s.prompt} / output {s.output} tokens, "
        f"open-loop Poisson, the same schedule for every arm; arms run {schedule}; time scale {s.time_scale:g} "
        f"(the planner's targets are {s.time_scale:g} x the SLA in wall-clock ms); static sizing at "
        f"{s.utilization:.0%} of one server's modelled capacity; autoscaled pools 1-{s.max_replicas}, new servers "
        f"load for {s.model_load:g} s, scale-down stabilization {s.stabilization:g} s, planner lead {s.lead:g} s "
        f"(emulated); the operator measures (and the planner decides) every {s.health_interval:g} s over "
        f"{s.health_window:g} s (wall); {routing}SLA per profile as in the capacity table (TTFT/ITL ms: "
        + ", ".join(f"{p.bench.name} {p.bench.ttft_ms:g}/{p.bench.itl_ms:g}" for p in profiles)
        + f"); times in emulated (GPU) seconds.{drop}"
    )


def plot_runs(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Per profile (columns): the load curve and the offered rate per window; replicas per pool per arm over time
    (solid prefill, dashed decode); SLA attainment per window per arm. The burst is shaded, the accept drop dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in rows if not r.get("skipped")]
    profiles = sorted({r["profile"] for r in measured})
    if not profiles:
        return
    figure, axes = plt.subplots(
        3, len(profiles), sharex="col", figsize=(8 * len(profiles), 10), constrained_layout=True, squeeze=False
    )
    colors = {arm: f"C{i}" for i, arm in enumerate(ARMS)}
    for col, profile in enumerate(profiles):
        mine = [r for r in measured if r["profile"] == profile]
        load, replicas, attain = axes[0][col], axes[1][col], axes[2][col]
        first = mine[0]
        load.plot([t for t, _ in first["curve"]], [r for _, r in first["curve"]], "k-", linewidth=1, label="rate")
        load.plot(
            [w["start_s"] for w in first["windows"]],
            [w["offered_rps"] for w in first["windows"]],
            "k.",
            markersize=4,
            label="offered per window",
        )
        load.set_ylabel("requests / s")
        load.set_title(f"{profile}: the day's load (emulated)")
        for r in mine:
            color = colors.get(r["arm"], "C9")
            ts = [x[0] for x in r["series"]]
            replicas.step(ts, [x[2] for x in r["series"]], where="post", color=color, label=f"{r['arm']} prefill")
            replicas.step(
                ts, [x[3] for x in r["series"]], where="post", color=color, linestyle="--", label=f"{r['arm']} decode"
            )
            attain.plot(
                [w["start_s"] for w in r["windows"]],
                [w["attainment"] if w["attainment"] is not None else float("nan") for w in r["windows"]],
                "o-",
                markersize=3,
                color=color,
                label=r["arm"],
            )
        replicas.set_ylabel("pool pods (solid prefill, dashed decode)")
        replicas.legend(loc="upper left", fontsize="x-small", ncol=2)
        attain.set_ylabel("SLA attainment per window")
        attain.set_ylim(-0.02, 1.05)
        attain.legend(loc="lower left", fontsize="small", ncol=2)
        attain.set_xlabel("emulated seconds since the load started")
        for axis in (load, replicas, attain):
            start, end = first["burst_emulated_s"]
            if end > start:
                axis.axvspan(start, end, color="C3", alpha=0.08)
            if first.get("accept_drop_emulated_s") is not None:
                axis.axvline(first["accept_drop_emulated_s"], color="k", linestyle=":", linewidth=1)
            axis.set_xlim(0, max(t for t, _ in first["curve"]) * 1.005)
        load.legend(loc="upper left", fontsize="small")
        load.set_ylim(bottom=0)
        replicas.set_ylim(bottom=0)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def write_docs(text: str, path: Path = DOCS) -> None:
    doc = path.read_text()
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} block")
    path.write_text(doc[: start + len(BEGIN)] + "\n" + text.strip() + "\n" + doc[end:])


def publish(rows: list[dict[str, Any]], text_head: str, out: Path, docs: bool, extra: Mapping[str, Any]) -> None:
    text = text_head + "\n\n" + markdown(rows)
    print("\n" + text, flush=True)
    (out / "autoscale.json").write_text(json.dumps({**extra, "rows": rows}, indent=1) + "\n")
    plot_runs(rows, out / "autoscale.png")
    print(f"wrote {out}/autoscale.json and autoscale.png", flush=True)
    if docs:
        write_docs(text)
        print(f"wrote the table into {DOCS}", flush=True)


def render(saved: Path, out: Path, docs: bool) -> None:
    """The table and the plot of a saved autoscale.json again (no run): after a change to the figures or the
    plot, or to write a run into the docs."""
    data = json.loads(saved.read_text())
    rows = data.pop("rows")
    out.mkdir(parents=True, exist_ok=True)
    publish(rows, saved_header(data), out, docs, data)


def saved_header(data: Mapping[str, Any]) -> str:
    """The header of a saved run: as saved, or (a run saved before the header was) made again from its settings."""
    if data.get("head"):
        return str(data["head"])
    kept = dict(data["settings"])
    kept["accept_drop"] = tuple(kept["accept_drop"]) if kept.get("accept_drop") else None
    profiles = [dataclasses.replace(PROFILES_BY_NAME[p["name"]], peak_rps=p["peak_rps"]) for p in data["profiles"]]
    return header(Settings(**kept), data["schedule"], profiles)


# ---- the command ----------------------------------------------------------------------------------------------------


def _accept_drop(text: str) -> tuple[float, float]:
    at, _, length = text.partition(":")
    try:
        value = (float(at), float(length))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"--accept-drop AT:LENGTH, e.g. 0.55:1.2, not {text!r}") from error
    if not (0 < value[0] < 1 and value[1] >= 1):
        raise argparse.ArgumentTypeError("--accept-drop: AT within (0, 1) of the day, LENGTH >= 1")
    return value


def groups_for(arms: Sequence[Arm], schedule: str) -> list[Group]:
    if schedule == "concurrent":
        return [Group(list(arms))]
    if schedule == "sequential":
        return [Group([a]) for a in arms]
    by: dict[str, list[Arm]] = defaultdict(list)
    for a in arms:
        by[a.profile.bench.name].append(a)
    return [Group(v) for v in by.values()]


def nodes_needed(groups: Sequence[Group], max_replicas: int) -> int:
    """H200 nodes of 8 GPUs for the largest group: every arm at up to `max_replicas` servers per pool."""
    most = 0
    for group in groups:
        gpus = 0
        for arm in group.arms:
            obj = build(arm.profile.bench, Ratio(1, 1), 1.0)
            gpus += sum(max_replicas * gpus_per_pod(obj, role) for role in POOLS)
        most = max(most, gpus)
    return max(4, math.ceil(most / GPUS_PER_NODE) + 2)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    names = list(PROFILES_BY_NAME)
    parser.add_argument("--out", type=Path, default=Path("autoscale-report"))
    parser.add_argument("--quick", action="store_true", help="the Llama profile, a short day (a smoke run)")
    parser.add_argument("--profiles", nargs="+", choices=names, help=f"default: all ({', '.join(names)}); quick llama")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--schedule", choices=SCHEDULES, default="per-profile")
    parser.add_argument("--day-seconds", type=float, help="emulated seconds of the day (default 600; quick 120)")
    parser.add_argument("--swing", type=float, default=6.0, help="peak / trough of the day")
    parser.add_argument("--burst-factor", type=float, default=3.0)
    parser.add_argument("--burst-hour", type=float, default=6.0, help="hour of the day the burst starts")
    parser.add_argument("--burst-seconds", type=float, help="emulated (default 120; quick 20)")
    parser.add_argument("--peak", action="append", default=[], metavar="PROFILE=RPS",
                        help="the day's peak rate of a profile, emulated req/s (see PROFILES_BY_NAME)")  # fmt: skip
    parser.add_argument("--prompt-tokens", type=int, default=4096)
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument("--time-scale", type=float, help="wall seconds per emulated second (default 8)")
    parser.add_argument("--utilization", type=float, default=0.9, help="static sizing: load / modelled capacity")
    parser.add_argument("--max-replicas", type=int, default=8, help="autoscaled pools: most servers each")
    parser.add_argument("--model-load", type=float, help="emulated seconds a new server loads (default 20; quick 5)")
    parser.add_argument("--lead", type=float, help="planner scale-up lead, emulated s (default: model load + 5)")
    parser.add_argument(
        "--stabilization", type=float, help="scale-down stabilization, emulated s (default 60; quick 20)"
    )
    parser.add_argument("--accept-drop", type=_accept_drop, metavar="AT:LENGTH")
    parser.add_argument("--hpa-prefill-metric", default="sglang_num_queue_reqs")
    parser.add_argument("--hpa-prefill-rate-metric", default="sglang_prompt_tokens_per_second",
                        help="the prefill HPA's second metric ('' for none)")  # fmt: skip
    parser.add_argument("--hpa-decode-metric", default="sglang_num_running_reqs")
    parser.add_argument("--hpa-prefill-queue", type=float, help="HPA target per prefill pod (default: from the model)")
    parser.add_argument("--hpa-decode-running", type=float, help="HPA target per decode pod (default: from the model)")
    parser.add_argument("--timeout", type=float, default=120.0, help="per request and drain, emulated seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--router-policy",
        choices=ROUTER_POLICIES,
        help="every arm's PD router --policy (spec.router.policy; default: the example's, round_robin)",
    )
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="wall seconds")
    parser.add_argument("--port-base", type=int, default=20179)
    parser.add_argument("--health-interval", type=float, default=5.0, help="operator's measuring interval, wall s")
    parser.add_argument("--health-window", type=float, default=60.0, help="operator's measuring window, wall s")
    parser.add_argument("--write-docs", action="store_true", help=f"write the table into {DOCS.relative_to(REPO)}")
    parser.add_argument("--render", type=Path, metavar="JSON", help="no run: the table and plot of a saved JSON")
    args = parser.parse_args(argv)
    if args.render:
        render(args.render, args.out, args.write_docs)
        return
    quick = args.quick
    chosen = args.profiles or (["llama-eagle3"] if quick else names)
    peaks = {k: float(v) for k, _, v in (item.partition("=") for item in args.peak)}
    profiles = [
        dataclasses.replace(
            PROFILES_BY_NAME[n],
            peak_rps=peaks.get(n, PROFILES_BY_NAME[n].quick_peak_rps if quick else PROFILES_BY_NAME[n].peak_rps),
        )
        for n in chosen
    ]
    model_load = args.model_load if args.model_load is not None else (5.0 if quick else 20.0)
    settings = Settings(
        day_seconds=args.day_seconds or (120.0 if quick else 600.0),
        swing=args.swing,
        burst_factor=args.burst_factor,
        burst_hour=args.burst_hour,
        burst_seconds=args.burst_seconds if args.burst_seconds is not None else (20.0 if quick else 120.0),
        prompt=args.prompt_tokens,
        output=args.output_tokens,
        time_scale=args.time_scale or 8.0,
        utilization=args.utilization,
        max_replicas=args.max_replicas,
        model_load=model_load,
        lead=args.lead if args.lead is not None else model_load + 5.0,
        stabilization=args.stabilization if args.stabilization is not None else (20.0 if quick else 60.0),
        accept_drop=args.accept_drop,
        hpa_prefill_metric=args.hpa_prefill_metric,
        hpa_prefill_rate_metric=args.hpa_prefill_rate_metric,
        hpa_decode_metric=args.hpa_decode_metric,
        hpa_prefill_queue=args.hpa_prefill_queue,
        hpa_decode_running=args.hpa_decode_running,
        timeout=args.timeout,
        seed=args.seed,
        ready_timeout=args.ready_timeout,
        health_interval=args.health_interval,
        health_window=args.health_window,
        router_policy=args.router_policy,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    exit_on_signals()  # stopped, it still stops the operator, the generators and the local cluster
    started = time.monotonic()

    def log(text: str) -> None:
        print(f"[{time.monotonic() - started:7.0f}s] {text}", flush=True)

    arms: list[Arm] = []
    for profile in profiles:
        for arm in args.arms:
            arms.append(Arm(profile, arm, f"as-{profile.bench.name}-{arm}"))
    autoscaled = [a for a in arms if a.arm in ("hpa", "planner")]
    if autoscaled and not autoscaling_in_crds():
        for a in autoscaled:
            a.skipped = "this tree's CRDs have no spec.autoscaling / DisaggSpecPool yet"
    metrics = any(a.arm == "hpa" and not a.skipped for a in arms)
    if metrics and not metrics_option_exists():
        for a in arms:
            if a.arm == "hpa":
                a.skipped = (
                    "the local plane has no metrics pipeline yet (LocalCluster.up(metrics=True): Prometheus and "
                    "prometheus-adapter serving custom.metrics.k8s.io)"
                )
        metrics = False
    for a in arms:
        if a.skipped:
            log(f"{a.label}: SKIPPED: {a.skipped}")
    live = [a for a in arms if not a.skipped]
    groups = groups_for(live, args.schedule)
    for release in PROFILES.values():
        ensure_router_venv(release.router)
    work = Path(tempfile.mkdtemp(prefix="disaggspec-bench-autoscale-"))
    local = LocalCluster(work / "cluster")
    up: dict[str, Any] = {"metrics": True} if metrics else {}
    nodes = nodes_needed(groups, settings.max_replicas)
    state = local.up(
        port_base=free_port_base(args.port_base), nodes=NodeShape(count=nodes), timeout=240, serving=True, **up
    )
    cluster = Cluster(state.kubeconfig, local=True)
    log(f"work dir {work}; out {args.out}; {nodes} nodes; schedule {args.schedule}; metrics pipeline {bool(metrics)}")
    rows: list[dict[str, Any]] = [_skipped_row(a) for a in arms if a.skipped]
    operator: OperatorProcess | None = None
    head = header(settings, args.schedule, profiles)
    extra = {"settings": dataclasses.asdict(settings), "schedule": args.schedule, "head": head, "profiles": [
        {"name": p.bench.name, "peak_rps": p.peak_rps} for p in profiles]}  # fmt: skip
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRDS))
        wait_for("the CRD to be served", lambda: cluster.kubectl("get", "dss", "-A", check=False).returncode == 0)
        # The measuring round is the planner's control loop: its defaults (every 15 s over 300 s, wall) would span
        # hours of a day compressed into minutes, so the benchmark runs it faster (and says so in the header).
        health = {
            "DISAGGSPEC_HEALTH_INTERVAL_SECONDS": f"{settings.health_interval:g}",
            "DISAGGSPEC_HEALTH_WINDOW_SECONDS": f"{settings.health_window:g}",
        }
        operator = OperatorProcess(state.kubeconfig, work / "operator.log", extra_env=health).start()
        with pod_runner(state.directory, state.kubeconfig):
            if metrics:
                why = hpa_metrics_served(cluster, [settings.hpa_prefill_metric, settings.hpa_decode_metric])
                if why:
                    log(f"hpa arms: the metrics are not served yet ({why}); checked again once the pods run")
            for group in groups:
                rows += run_group(cluster, state.kubeconfig, group, settings, log)
                rows.sort(key=lambda r: (r["profile"], ARMS.index(r["arm"])))
                extra["wall_s"] = round(time.monotonic() - started, 1)
                publish(rows, head, args.out, False, extra)
    finally:
        if operator is not None:
            operator.stop()
        local.down()
    extra["wall_s"] = round(time.monotonic() - started, 1)
    publish(rows, head, args.out, args.write_docs, extra)
    log(f"done in {extra['wall_s']:.0f} s wall")


if __name__ == "__main__":
    main()
