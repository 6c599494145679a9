"""Capacity per P:D ratio of the emulated SGLang servers: the highest open-loop rate meeting the SLA; asserts nothing.

Run: `.venv/bin/python -m e2e.perf.bench_capacity --out /tmp/capacity [--quick] [--write-docs]`.

One private local cluster in serving mode (the operator, the pod runner: the real pinned router per release, the
SGLang emulator per pool pod with its capacity model, docs/serving-emulator.md) runs each example (--examples:
examples/llama-3.1-8b-eagle3.yaml, and examples/deepseek-r1-mtp.yaml) at each P:D ratio (--ratios, pool replicas),
one service at a time, every pool pod annotated `emulator.disaggspec.io/time-scale=S`: every emulated step and KV
transfer takes S times longer in wall-clock time, so that this small machine keeps up. For each ratio it
  1. reads the capacity model every pool server really runs (its pod's SGLang arguments and annotations, through the
     emulator's own `Engine`: profile, scheduler limits, DP ranks) and predicts the system's requests/s analytically:
     min(P x prefill_capacity, D x decode_capacity) (`e2e.serving.emulator.capacity`);
  2. sweeps open-loop Poisson rates (emulated requests/s, by default fractions of that prediction; --rates to set
     them) through the real router with fixed prompt and output lengths, the generator running S times slower and
     reporting in emulated time (`e2e.serving.load`, `--time-scale`);
  3. after each rate reads every pool server's `GET /emulator/capacity`: the wall-clock seconds its scheduler loops
     woke late (`lag_seconds`) against the seconds they slept through steps (`busy_seconds`). When the lag exceeds
     --max-lag-share of the busy time the machine, not the model, set the figures: the service is re-created at twice
     the scale and the rate measured again (up to --max-time-scale).
It prints per ratio the capacity at the SLA (the highest swept rate whose SLA attainment is >= --attainment, 95%
by default), the output tokens/s at that rate, both per GPU, failures, the prediction, the lag share and the
generator's CPU per request; writes each run's summary.json, timeline.csv and plot.png, one PNG per example
(attainment and goodput against the offered rate per ratio) and capacity.json under --out; `--write-docs` puts the
table into docs/performance.md between `<!-- capacity-table:begin -->` and `<!-- capacity-table:end -->` (after
every ratio, replacing only the rows of the (example, ratio) pairs measured); `--render DIR/capacity.json ...`
prints and publishes saved runs without a cluster.

Default SLA targets are MLPerf Inference's Server-scenario latency constraints (mlcommons/inference
loadgen/mlperf.conf: `llama3_1-8b.Server.ttft_latency = 2000`, `tpot_latency = 100`; `deepseek-r1.Server.ttft_latency
= 2000`, `tpot_latency = 80`; milliseconds), judged per request as SGLang's goodput does (`e2e.serving.load.sla`).
The figures are the capacity model's (profiles.py: its efficiencies are labelled assumptions), not measurements of
GPUs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from disaggspec import constants as c
from disaggspec.render.rdma import server_command
from disaggspec.sglang.args import LAUNCH as SGLANG_LAUNCH
from disaggspec.sglang.profiles import PROFILES
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.perf.bench_layouts import free_port_base
from e2e.serving.emulator import capacity, pd
from e2e.serving.emulator.engine import Engine
from e2e.serving.emulator.facts import facts_for
from e2e.serving.emulator.options import parse_options
from e2e.serving.emulator.sglang_args import server_config
from e2e.serving.launch import EMULATOR_ANNOTATION_PREFIX, emulator_options
from e2e.serving.load.arrivals import Constant, poisson_arrivals
from e2e.serving.load.client import Bounds, plan, run
from e2e.serving.load.lengths import length_model
from e2e.serving.load.plot import plot
from e2e.serving.load.sla import Sla, summary, timeline, write_timeline
from e2e.serving.routers import ensure_router_venv
from e2e.support.kube import Cluster, CommandFailed, wait_for
from e2e.support.operator_process import OperatorProcess
from e2e.support.serving import apply_service, pod_runner, ready_pods, router_url, served_model
from e2e.support.workloads import LWS_WORKER_INDEX, ROLES, example, get, load

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds"
DOCS = REPO / "docs" / "performance.md"
BEGIN: Final = "<!-- capacity-table:begin -->"
END: Final = "<!-- capacity-table:end -->"
POOLS: Final = ("prefill", "decode")
SERVER_PORT: Final = 30000
TIME_SCALE_KEY: Final = EMULATOR_ANNOTATION_PREFIX + "time-scale"
NODES: Final = 5
"""H200 nodes of 8 GPUs: the DeepSeek example's 1:3 ratio takes four whole nodes, the Llama pods one GPU each."""


@dataclass(frozen=True)
class Bench:
    """One example and its default SLA (MLPerf Inference Server-scenario constraints, see the module docstring)."""

    name: str
    fragment: str
    ttft_ms: float
    itl_ms: float
    time_scale: float
    """Starting wall-clock seconds per emulated second (raised when the machine lags)."""


BENCHES: Final = (
    Bench("llama-eagle3", "llama-3.1-8b-eagle3", ttft_ms=2000, itl_ms=100, time_scale=4.0),
    Bench("deepseek-mtp", "deepseek-r1-mtp", ttft_ms=2000, itl_ms=80, time_scale=4.0),
)
FULL_FRACTIONS: Final = (0.6, 0.85, 1.0, 1.15)
QUICK_FRACTIONS: Final = (0.75, 1.0, 1.25)
"""Swept rates as fractions of the predicted system capacity."""


@dataclass(frozen=True)
class Ratio:
    prefill: int
    decode: int

    @classmethod
    def parse(cls, text: str) -> Ratio:
        match = re.fullmatch(r"(\d+):(\d+)", text.strip())
        if not match or min(int(match[1]), int(match[2])) < 1:
            raise argparse.ArgumentTypeError(f"a P:D ratio is two counts >= 1 like 1:2, not {text!r}")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.prefill}:{self.decode}"


@dataclass(frozen=True)
class Prediction:
    """The analytic capacity of the model the pool servers run (requests/s, emulated time)."""

    prefill_rps: float
    """One prefill server (all its DP ranks)."""
    decode_rps: float
    """One decode server (all its DP ranks)."""
    system_rps: float
    """min(P x prefill_rps, D x decode_rps)."""
    bound: str
    """Which pool limits the system: prefill or decode."""
    servers: dict[str, str]
    """Per pool: profile and scheduler limits, one line each."""


@dataclass
class Point:
    """One rate of one ratio."""

    rate: float
    time_scale: float
    figures: dict[str, Any]
    lag_s: float
    busy_s: float
    wall_s: float

    @property
    def lag_share(self) -> float:
        return self.lag_s / self.busy_s if self.busy_s > 0 else 0.0


@dataclass
class RatioResult:
    bench: str
    sla: str
    """TTFT/ITL targets, ms."""
    ratio: str
    gpus: int
    prediction: Prediction | None = None
    points: list[Point] = field(default_factory=list)
    error: str = ""


# ---- the service and its servers -----------------------------------------------------------------------------------


def build(bench: Bench, ratio: Ratio, scale: float) -> dict[str, Any]:
    """The example at `ratio` (pool replicas), every pool pod annotated with the time scale."""
    obj = load(example(bench.fragment))
    for role, replicas in (("prefill", ratio.prefill), ("decode", ratio.decode)):
        spec = obj["spec"][role]
        spec["replicas"] = replicas
        spec["podAnnotations"] = {**(spec.get("podAnnotations") or {}), TIME_SCALE_KEY: f"{scale:g}"}
    return obj


def gpus(obj: dict[str, Any]) -> int:
    """GPUs the pools take: replicas x GPUs per pod x nodes per server."""
    total = 0
    for role in POOLS:
        spec = obj["spec"][role]
        per_pod = int(((spec.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 1))
        total += int(spec.get("replicas", 1)) * per_pod * int(spec.get("nodesPerInstance", 1))
    return total


def servers(cluster: Cluster, namespace: str, name: str, role: str) -> list[dict[str, Any]]:
    """The Ready pods of `role` that serve SGLang's API (group leaders in multi-node pools)."""
    return [
        p
        for p in ready_pods(cluster, namespace, name, role)
        if p["metadata"]["labels"].get(LWS_WORKER_INDEX, "0") == "0"
    ]


def _http_port(pod: dict[str, Any]) -> int:
    for port in pod["spec"]["containers"][0].get("ports") or []:
        if port.get("name") == "http":
            return int(port["containerPort"])
    return SERVER_PORT


def capacity_report(pod: dict[str, Any]) -> dict[str, Any]:
    """The server's `GET /emulator/capacity` (docs/serving-emulator.md)."""
    url = f"http://{pod['status']['podIP']}:{_http_port(pod)}/emulator/capacity"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=5) as response:
        report: dict[str, Any] = json.loads(response.read())
    return report


def lag_and_busy(pods: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """Sum over the pool servers of their scheduler loops' `lag_seconds` and `busy_seconds` (wall-clock)."""
    lag = busy = 0.0
    for pod in pods:
        report = capacity_report(pod)
        lag += float(report.get("lag_seconds") or 0.0)
        busy += float(report.get("busy_seconds") or 0.0)
    return lag, busy


def server_model(pod: dict[str, Any]) -> tuple[capacity.Server, int]:
    """The capacity model the emulator runs for this pod (its first DP rank) and its DP ranks: the pod's SGLang
    arguments and `emulator.disaggspec.io/*` annotations through the emulator's own `Engine`, as the pod runner
    starts it (e2e/serving/launch.py), without serving anything."""
    version = str(pod["metadata"]["labels"][c.LABEL_VERSION])
    for container in pod["spec"]["containers"]:
        command = server_command([*(container.get("command") or []), *(container.get("args") or [])])
        if command[: len(SGLANG_LAUNCH)] == list(SGLANG_LAUNCH):
            break
    else:
        raise ValueError(f"pod {pod['metadata']['name']} runs no SGLang server")
    cfg = server_config(version, command[len(SGLANG_LAUNCH) :])  # type: ignore[arg-type]
    options = parse_options(emulator_options(pod)[1::2]).with_defaults_for(
        dtype=cfg.dtype,
        speculative=cfg.speculative_algorithm is not None,
        num_draft_tokens=cfg.speculative_num_draft_tokens,
    )
    engine = Engine(
        cfg,
        options,
        facts_for(version),
        bind=str(pod["status"]["podIP"]),
        pod_name=str(pod["metadata"]["name"]),
        timeouts=pd.Timeouts.from_env(),
    )
    if engine.scheduler is None:
        raise ValueError(f"pod {pod['metadata']['name']}: the emulator runs no capacity model (no profile, or off)")
    return engine.scheduler.servers[0], len(engine.scheduler.servers)


def predict(pools: dict[str, list[dict[str, Any]]], ratio: Ratio, prompt: int, output: int) -> Prediction:
    """The analytic capacity of the servers' own model (`capacity.prefill_capacity` / `decode_capacity` with the
    sizing the emulator chose)."""
    prefill, prefill_ranks = server_model(pools["prefill"][0])
    decode, decode_ranks = server_model(pools["decode"][0])
    p = prefill_ranks * capacity.prefill_capacity(prefill.profile, prefill.limits, prompt)
    d = decode_ranks * capacity.decode_capacity(decode.profile, decode.limits, prompt, output)
    system = min(ratio.prefill * p, ratio.decode * d)

    def line(server: capacity.Server, ranks: int) -> str:
        lim, prof, spec = server.limits, server.profile, server.profile.speculative
        drafts = f", {spec.algorithm} accept {spec.accept_length:g}" if spec is not None else ""
        return (
            f"{prof.gpu.name} x {prof.model.name} tp {prof.tp}{drafts}; {ranks} DP rank(s) of "
            f"{lim.max_total_num_tokens} KV tokens, {lim.max_running_requests} running requests, chunk "
            f"{lim.chunked_prefill_size}"
        )

    return Prediction(
        prefill_rps=p,
        decode_rps=d,
        system_rps=system,
        bound="prefill" if ratio.prefill * p <= ratio.decode * d else "decode",
        servers={"prefill": line(prefill, prefill_ranks), "decode": line(decode, decode_ranks)},
    )


# ---- one service, one rate ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadShape:
    seconds: float
    prompt: int
    output: int
    timeout: float
    max_concurrency: int
    seed: int


def drive(url: str, model: str, rate: float, shape: LoadShape, sla: Sla, scale: float, out: Path) -> dict[str, Any]:
    """One open-loop Poisson run at `rate` emulated requests/s, sent `scale` times slower; its summary (emulated time)
    with summary.json, timeline.csv and plot.png written into `out`."""
    curve = Constant(rate, shape.seconds)
    cap = max(1, int(rate * shape.seconds * 3) + 20)  # far above the Poisson count: never the cap
    requests = plan(
        poisson_arrivals(curve, shape.seed, cap + 1),
        length_model(f"fixed:{shape.prompt}", f"fixed:{shape.output}", None),
        shape.seed,
    )
    bounds = Bounds(
        max_requests=cap,
        max_concurrency=shape.max_concurrency,
        duration=shape.seconds,
        timeout=shape.timeout,
        drain=shape.timeout,
    )
    report = asyncio.run(
        run(requests, url, model=model, bounds=bounds, window=shape.seconds, seed=shape.seed, time_scale=scale)
    )
    context = {"url": url, "model": model, "shape": curve.describe(), "lengths": f"{shape.prompt}/{shape.output}"}
    figures = summary(report, sla, context)
    rows = timeline(report, sla)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(figures, indent=2) + "\n")
    write_timeline(rows, out / "timeline.csv")
    plot(rows, sla, out / "plot.png", title=f"{curve.describe()} (emulated, x{scale:g} slower)", time_scale=scale)
    return figures


def _pool_pods_left(cluster: Cluster, namespace: str, name: str) -> int:
    selector = f"disaggspec.io/service={name},disaggspec.io/role in ({','.join(ROLES)})"
    return len(get(cluster, namespace, "pods", "-l", selector)["items"])


class Service:
    """One example at one ratio and time scale, applied in a namespace of its own; deleted on exit."""

    def __init__(self, cluster: Cluster, bench: Bench, ratio: Ratio, scale: float, ready_timeout: int) -> None:
        self.cluster = cluster
        self.obj = build(bench, ratio, scale)
        self.name = str(self.obj["metadata"]["name"])
        self.namespace = f"cap-{bench.name}-{ratio.prefill}p{ratio.decode}d-x{scale:g}".replace(".", "-")
        self.ratio = ratio
        self.ready_timeout = ready_timeout

    def __enter__(self) -> Service:
        self.cluster.kubectl("create", "namespace", self.namespace)
        self.obj = apply_service(self.cluster, self.namespace, self.obj)
        ready = self.cluster.kubectl(
            "wait", "-n", self.namespace, "--for=condition=Ready", f"dss/{self.name}",
            f"--timeout={self.ready_timeout}s", check=False, timeout=self.ready_timeout + 30,
        )  # fmt: skip
        if ready.returncode != 0:
            self.__exit__()
            raise RuntimeError(f"not Ready within {self.ready_timeout} s: {ready.stderr.strip()[:200]}")
        want = {"prefill": self.ratio.prefill, "decode": self.ratio.decode}
        wait_for(
            "every pool server Ready",
            lambda: all(len(self.pools()[role]) == want[role] for role in POOLS),
            self.ready_timeout,
            0.5,
        )
        return self

    def __exit__(self, *_: object) -> None:
        self.cluster.kubectl(
            "delete", "dss", self.name, "-n", self.namespace, "--ignore-not-found", "--timeout=120s",
            check=False, timeout=150,
        )  # fmt: skip
        wait_for(
            f"the pods of {self.namespace}/{self.name} to go",
            lambda: _pool_pods_left(self.cluster, self.namespace, self.name) == 0,
            180,
            0.5,
        )

    def pools(self) -> dict[str, list[dict[str, Any]]]:
        return {role: servers(self.cluster, self.namespace, self.name, role) for role in POOLS}

    def url(self) -> str:
        return router_url(self.cluster, self.namespace, self.obj)


# ---- the sweep ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    shape: LoadShape
    fractions: tuple[float, ...]
    rates: tuple[float, ...] | None
    attainment: float
    max_lag_share: float
    max_time_scale: float
    ready_timeout: int
    out: Path


def measure_ratio(cluster: Cluster, bench: Bench, sla: Sla, ratio: Ratio, settings: Settings) -> RatioResult:
    """Every rate of one ratio, raising the time scale when the machine lags; the figures."""
    shape = settings.shape
    result = RatioResult(
        bench.name, f"{sla.ttft_ms:g}/{sla.itl_ms:g}", str(ratio), gpus(build(bench, ratio, bench.time_scale))
    )
    scale = bench.time_scale
    pending: list[float] | None = None
    while True:
        try:
            with Service(cluster, bench, ratio, scale, settings.ready_timeout) as service:
                pools = service.pools()
                if result.prediction is None:
                    result.prediction = predict(pools, ratio, shape.prompt, shape.output)
                    for role, text in result.prediction.servers.items():
                        print(f"  {role}: {text}", flush=True)
                    base = result.prediction.system_rps
                    rates = settings.rates or tuple(round(base * f, 1) for f in settings.fractions)
                    pending = sorted(set(rates))
                    print(
                        f"  predicted {base:.1f} req/s ({result.prediction.bound}-bound: prefill "
                        f"{result.prediction.prefill_rps:.1f}, decode {result.prediction.decode_rps:.1f} per server); "
                        f"rates {pending}",
                        flush=True,
                    )
                url, model = service.url(), served_model(service.obj)
                all_pods = [p for role in POOLS for p in pools[role]]
                assert pending is not None
                while pending:
                    rate = pending[0]
                    lag0, busy0 = lag_and_busy(all_pods)
                    t0 = time.monotonic()
                    out = settings.out / bench.name / f"{ratio.prefill}p{ratio.decode}d" / f"rate-{rate:g}-x{scale:g}"
                    figures = drive(url, model, rate, shape, sla, scale, out)
                    lag1, busy1 = lag_and_busy(all_pods)
                    point = Point(rate, scale, figures, lag1 - lag0, busy1 - busy0, time.monotonic() - t0)
                    print("  " + point_line(point), flush=True)
                    if point.lag_share > settings.max_lag_share and scale * 2 <= settings.max_time_scale:
                        print(
                            f"  lag {point.lag_share:.1%} of busy time > {settings.max_lag_share:.0%}: the machine "
                            f"fell behind; re-creating the service at time scale {scale * 2:g}",
                            flush=True,
                        )
                        scale *= 2
                        break
                    result.points.append(point)
                    pending.pop(0)
                if not pending:
                    return result
        except (CommandFailed, AssertionError, RuntimeError, OSError, ValueError, KeyError) as error:
            result.error = f"{type(error).__name__}: {str(error).strip()[:300]}"
            print(f"  error: {result.error}", flush=True)
            return result


def point_line(p: Point) -> str:
    f = p.figures
    req = f["requests"]
    return (
        f"rate {p.rate:>6g}/s x{p.time_scale:g}: offered {f['offered_rps']}/s, attainment "
        f"{f['sla_attainment']}, goodput {f['goodput_rps']} req/s {f['goodput_output_tokens_per_s']} tok/s, "
        f"failed {req['failed']}/{req['scheduled']} {f['failures'] or ''}, TTFT p50/p99 {f['ttft_ms']['p50']}/"
        f"{f['ttft_ms']['p99']} ms, ITL p50/p99 {f['itl_ms']['p50']}/{f['itl_ms']['p99']} ms, lag "
        f"{p.lag_s:.1f}/{p.busy_s:.1f} s ({p.lag_share:.1%}), client lag p99 {f['schedule_lag_ms']['p99']} ms, "
        f"generator {f['generator']['cpu_ms_per_request']} ms/req, wall {p.wall_s:.0f} s"
    )


# ---- the table ------------------------------------------------------------------------------------------------------


def capacity_point(result: RatioResult, attainment: float) -> Point | None:
    """The highest swept rate whose SLA attainment reached `attainment` (None: none did)."""
    passing = [p for p in result.points if (p.figures["sla_attainment"] or 0) >= attainment]
    return max(passing, key=lambda p: p.rate) if passing else None


def sustained_tokens(point: Point) -> float:
    """Output tokens/s the servers sustained at this rate: the successful requests' output tokens over the arrival
    window (the summary's figure divides by the whole run, whose tail after the last arrival only drains)."""
    f = point.figures
    tokens = f["output_tokens_per_s"] * f["elapsed_s"]
    return round(tokens / f["window_s"], 1) if f["window_s"] else 0.0


def table_rows(results: Sequence[RatioResult], attainment: float) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        best = capacity_point(r, attainment)
        below = [p for p in r.points if best is not None and p.rate <= best.rate]
        pred = r.prediction
        shares = [p.lag_share for p in r.points]
        cost = [
            p.figures["generator"]["cpu_ms_per_request"]
            for p in r.points
            if p.figures["generator"]["cpu_ms_per_request"]
        ]
        rows.append(
            {
                "example": r.bench,
                "sla": r.sla,
                "ratio": r.ratio,
                "gpus": r.gpus,
                "time_scale": max((p.time_scale for p in r.points), default=None),
                "rates": [p.rate for p in r.points],
                "window_s": r.points[0].figures["window_s"] if r.points else None,
                "nominal_rps": None if best is None else best.rate,
                "capacity_rps": None if best is None else best.figures["offered_rps"],
                "goodput_rps": None if best is None else best.figures["goodput_rps"],
                "output_tokens_per_s": None if best is None else sustained_tokens(best),
                "output_tokens_per_s_per_gpu": None if best is None else round(sustained_tokens(best) / r.gpus, 1),
                "rps_per_gpu": None if best is None else round(best.figures["offered_rps"] / r.gpus, 2),
                "attainment": None if best is None else best.figures["sla_attainment"],
                "failed_below_saturation": sum(p.figures["requests"]["failed"] for p in below),
                "failed_total": sum(p.figures["requests"]["failed"] for p in r.points),
                "predicted_rps": None if pred is None else round(pred.system_rps, 1),
                "bound": None if pred is None else pred.bound,
                "max_lag_share": round(max(shares), 4) if shares else None,
                "generator_ms_per_request": round(sum(cost) / len(cost), 2) if cost else None,
                "error": r.error,
            }
        )
    return rows


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


TABLE_HEAD: Final = (
    "| example | SLA TTFT/ITL ms | P:D | GPUs | s per rate | time scale | capacity at SLA, req/s | output tok/s "
    "| per GPU: req/s, tok/s | predicted req/s (bound) | measured / predicted | failed below / all "
    "| lag share max | generator ms/req |"
)


def markdown(rows: Sequence[dict[str, Any]], header: str) -> str:
    lines = [header, "", TABLE_HEAD, "|" + " --- |" * TABLE_HEAD.count(" | ") + " --- |"]
    for r in rows:
        ratio = f"{r['capacity_rps'] / r['predicted_rps']:.2f}" if r["capacity_rps"] and r["predicted_rps"] else "-"
        share = "-" if r["max_lag_share"] is None else f"{r['max_lag_share']:.1%}"
        lines.append(
            f"| {r['example']} | {r['sla']} | {r['ratio']} | {r['gpus']} | {_cell(r['window_s'])} "
            f"| {_cell(r['time_scale'])} "
            f"| {_cell(r['capacity_rps'])} "
            f"| {_cell(r['output_tokens_per_s'])} "
            f"| {_cell(r['rps_per_gpu'])}, {_cell(r['output_tokens_per_s_per_gpu'])} "
            f"| {_cell(r['predicted_rps'])} ({r['bound'] or '-'}) | {ratio} | {r['failed_below_saturation']} / "
            f"{r['failed_total']} | {share} | {_cell(r['generator_ms_per_request'])} |"
        )
    return "\n".join(lines)


def write_docs(text: str, measured: Sequence[tuple[str, str]], path: Path = DOCS) -> None:
    """Replace the marked block of docs/performance.md with `text`, keeping the table rows of the (example, P:D
    ratio) pairs this run did not measure."""
    doc = path.read_text()
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} block")
    kept_rows: list[str] = []
    for line in doc[start + len(BEGIN) : end].splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        is_row = line.startswith("| ") and len(cells) > 4 and cells[1] not in ("---", "example")
        if is_row and (cells[1], cells[3]) not in measured:  # cells: example, SLA, P:D
            kept_rows.append(line)
    lines = text.strip().splitlines()
    first = min(i for i, line in enumerate(lines) if line.startswith("| ---")) + 1
    table_end = max(i for i, line in enumerate(lines) if line.startswith("|")) + 1

    def order(row: str) -> tuple[str, int, int]:
        cells = [cell.strip() for cell in row.split("|")]
        prefill, _, decode = cells[3].partition(":")
        return cells[1], int(prefill), int(decode)

    rows = sorted([*lines[first:table_end], *kept_rows], key=order)
    lines = lines[:first] + rows + lines[table_end:]
    path.write_text(doc[: start + len(BEGIN)] + "\n" + "\n".join(lines) + "\n" + doc[end:])


def plot_sweeps(results: Sequence[RatioResult], bench: str, attainment: float, path: Path) -> None:
    """SLA attainment and goodput (output tokens/s) against the offered rate, one line per ratio; the predictions as
    dotted verticals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 7), constrained_layout=True)
    for i, r in enumerate(x for x in results if x.bench == bench and x.points):
        color = f"C{i}"
        rates = [p.figures["offered_rps"] for p in r.points]
        top.plot(rates, [p.figures["sla_attainment"] for p in r.points], "o-", color=color, label=f"P:D {r.ratio}")
        bottom.plot(rates, [p.figures["goodput_output_tokens_per_s"] for p in r.points], "o-", color=color)
        if r.prediction is not None:
            for axis in (top, bottom):
                axis.axvline(r.prediction.system_rps, color=color, linestyle=":", linewidth=1)
    top.axhline(attainment, color="k", linestyle="--", linewidth=0.8, label=f"{attainment:.0%}")
    top.set_ylabel("SLA attainment")
    top.set_ylim(0, 1.05)
    top.legend(loc="best", fontsize="small")
    top.set_title(f"{bench}: open-loop Poisson, emulated time (dotted: the model's analytic capacity)")
    bottom.set_ylabel("goodput, output tokens/s")
    bottom.set_xlabel("offered requests/s (emulated)")
    figure.savefig(path, dpi=110)
    plt.close(figure)


# ---- the command ----------------------------------------------------------------------------------------------------


def _sla_overrides(items: Sequence[str]) -> dict[str, tuple[float, float]]:
    out = {}
    for item in items:
        name, _, value = item.partition("=")
        ttft, _, itl = value.partition(":")
        try:
            out[name] = (float(ttft), float(itl))
        except ValueError as error:
            raise SystemExit(f"--sla {item!r}: expected NAME=TTFT_MS:ITL_MS ({error})") from error
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    names = [b.name for b in BENCHES]
    parser.add_argument("--out", type=Path, default=Path("capacity-report"), help="output directory")
    parser.add_argument("--quick", action="store_true", help="the Llama example at 1:1, three rates, 15 s each")
    parser.add_argument("--examples", nargs="+", choices=names, help=f"default: all ({', '.join(names)})")
    parser.add_argument("--ratios", nargs="+", type=Ratio.parse, help="P:D pool replicas (default 1:1 1:2 2:1 1:3)")
    parser.add_argument("--rates", type=float, nargs="+", help="emulated req/s (default: fractions of the prediction)")
    fractions = f"default {' '.join(map(str, FULL_FRACTIONS))}; quick {' '.join(map(str, QUICK_FRACTIONS))}"
    parser.add_argument("--fractions", type=float, nargs="+", help=f"rates / the prediction ({fractions})")
    parser.add_argument(
        "--seconds", type=float, help="arrival window per rate, emulated seconds (default 20; quick 15)"
    )
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument("--sla", action="append", default=[], metavar="EXAMPLE=TTFT_MS:ITL_MS",
                        help="SLA targets of an example (default: MLPerf Server constraints, see above)")  # fmt: skip
    parser.add_argument("--time-scale", type=float, help="starting time scale for every example (default 4)")
    parser.add_argument("--max-time-scale", type=float, default=32.0)
    parser.add_argument("--max-lag-share", type=float, default=0.05, help="lag / busy above this raises the scale")
    parser.add_argument("--attainment", type=float, default=0.95, help="SLA attainment at capacity (default 0.95)")
    parser.add_argument("--timeout", type=float, default=60.0, help="per request and drain, emulated seconds")
    parser.add_argument("--max-concurrency", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ready-timeout", type=int, default=240)
    parser.add_argument("--port-base", type=int, default=19779)
    parser.add_argument("--render", type=Path, nargs="+", metavar="CAPACITY_JSON",
                        help="no cluster: print (and with --write-docs publish) the table of saved runs")  # fmt: skip
    parser.add_argument("--write-docs", action="store_true", help=f"write the table into {DOCS.relative_to(REPO)}")
    args = parser.parse_args(argv)
    if args.render:
        loaded = [load_results(path) for path in args.render]
        saved = loaded[0][1]
        args.out.mkdir(parents=True, exist_ok=True)
        head = header(saved["prompt"], saved["output"], saved["attainment"])
        publish([r for found, _ in loaded for r in found], saved["attainment"], head, args.out, args.write_docs)
        return
    overrides = _sla_overrides(args.sla)
    benches = [b for b in BENCHES if (args.examples or (["llama-eagle3"] if args.quick else names)).count(b.name)]
    if args.time_scale is not None:
        benches = [Bench(b.name, b.fragment, b.ttft_ms, b.itl_ms, args.time_scale) for b in benches]
    ratios: list[Ratio] = args.ratios or (
        [Ratio(1, 1)] if args.quick else [Ratio(1, 1), Ratio(1, 2), Ratio(2, 1), Ratio(1, 3)]
    )
    settings = Settings(
        shape=LoadShape(
            seconds=args.seconds or (15.0 if args.quick else 20.0),
            prompt=args.prompt_tokens,
            output=args.output_tokens,
            timeout=args.timeout,
            max_concurrency=args.max_concurrency,
            seed=args.seed,
        ),
        fractions=tuple(args.fractions) if args.fractions else QUICK_FRACTIONS if args.quick else FULL_FRACTIONS,
        rates=tuple(args.rates) if args.rates else None,
        attainment=args.attainment,
        max_lag_share=args.max_lag_share,
        max_time_scale=args.max_time_scale,
        ready_timeout=args.ready_timeout,
        out=args.out,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    for profile in PROFILES.values():
        ensure_router_venv(profile.router)
    work = Path(tempfile.mkdtemp(prefix="disaggspec-bench-capacity-"))
    local = LocalCluster(work / "cluster")
    state = local.up(port_base=free_port_base(args.port_base), nodes=NodeShape(count=NODES), timeout=180, serving=True)
    cluster = Cluster(state.kubeconfig, local=True)
    print(f"work dir {work}; out {args.out}; examples {[b.name for b in benches]}; ratios {[str(r) for r in ratios]}")
    results: list[RatioResult] = []
    operator: OperatorProcess | None = None
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        wait_for("the CRD to be served", lambda: cluster.kubectl("get", "dss", "-A", check=False).returncode == 0)
        operator = OperatorProcess(state.kubeconfig, work / "operator.log").start()
        with pod_runner(state.directory, state.kubeconfig):
            for bench in benches:
                ttft, itl = overrides.get(bench.name, (bench.ttft_ms, bench.itl_ms))
                sla = Sla(ttft_ms=ttft, itl_ms=itl)
                for ratio in ratios:
                    print(f"{bench.name} P:D {ratio} (SLA TTFT {ttft:g} ms, ITL {itl:g} ms)", flush=True)
                    results.append(measure_ratio(cluster, bench, sla, ratio, settings))
                    report(results, settings, start, args.write_docs)
    finally:
        if operator is not None:
            operator.stop()
        local.down()
    report(results, settings, start, args.write_docs)


def header(prompt: int, output: int, attainment: float) -> str:
    return (
        f"Prompt {prompt} / output {output} tokens (fixed), open-loop Poisson at rates around the prediction (the "
        f"swept rates are in capacity.json); capacity = the offered rate of the highest swept rate with SLA "
        f"attainment >= {attainment:.0%}, output tokens/s at that rate over the arrival window; times and rates in "
        "emulated (GPU) time, generator CPU in wall-clock ms per request; time scale: the highest the ratio needed."
    )


def report(results: Sequence[RatioResult], settings: Settings, start: float, docs: bool) -> None:
    """Print the table, write capacity.json and the sweep plots under --out and, with `docs`, the table into
    docs/performance.md (called after every ratio, so that a run cut short keeps what it measured)."""
    shape = settings.shape
    publish(results, settings.attainment, header(shape.prompt, shape.output, settings.attainment), settings.out, docs)
    record = {
        "settings": {
            **asdict(shape),
            "attainment": settings.attainment,
            "max_lag_share": settings.max_lag_share,
            "fractions": settings.fractions,
            "rates": settings.rates,
        },
        "rows": table_rows(results, settings.attainment),
        "runs": [
            {
                "example": r.bench,
                "sla": r.sla,
                "ratio": r.ratio,
                "prediction": None if r.prediction is None else asdict(r.prediction),
                "points": [
                    {k: v for k, v in asdict(p).items() if k != "figures"} | {"summary": p.figures} for p in r.points
                ],
                "error": r.error,
            }
            for r in results
        ],
        "wall_s": round(time.monotonic() - start, 1),
    }
    (settings.out / "capacity.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {settings.out}/capacity.json, per-run summaries and plots; wall {record['wall_s']:.0f} s")


def publish(results: Sequence[RatioResult], attainment: float, head: str, out: Path, docs: bool) -> None:
    """Print the table, draw the sweep plots into `out` and, with `docs`, write the table into the docs."""
    text = markdown(table_rows(results, attainment), head)
    print("\n" + text, flush=True)
    for bench in sorted({r.bench for r in results}):
        plot_sweeps(results, bench, attainment, out / f"{bench}-capacity.png")
    if docs:
        write_docs(text, [(r.bench, r.ratio) for r in results])
        print(f"wrote the table into {DOCS}")


def load_results(path: Path) -> tuple[list[RatioResult], dict[str, Any]]:
    """The ratios a run saved in its capacity.json, and its settings."""
    record = json.loads(path.read_text())
    benches = {b.name: b for b in BENCHES}
    results = []
    for saved in record["runs"]:
        bench = benches[saved["example"]]
        result = RatioResult(
            bench.name, saved["sla"], saved["ratio"], gpus(build(bench, Ratio.parse(saved["ratio"]), 1.0))
        )
        result.error = saved["error"]
        result.prediction = Prediction(**saved["prediction"]) if saved["prediction"] else None
        result.points = [
            Point(p["rate"], p["time_scale"], p["summary"], p["lag_s"], p["busy_s"], p["wall_s"])
            for p in saved["points"]
        ]
        results.append(result)
    return results, record["settings"]


if __name__ == "__main__":
    main()
