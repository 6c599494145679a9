"""`python -m e2e.serving.load`: one open-loop run against a router (or server) on 127.0.0.0/8, and its SLA report.

    python -m e2e.serving.load --url http://127.0.0.1:30000 --rate 20 --duration 60 \\
        --sla-ttft-ms 500 --sla-itl-ms 50 --out /tmp/load

One arrival shape: `--rate R` (Poisson), `--steps 20:5,20:20,20:5` (seconds:rate, in turn), `--ramp 1:40` (linear
over --duration), `--daily PEAK` (a 24 h curve compressed into --duration) or `--trace FILE` (CSV
timestamp,prompt_tokens,output_tokens, or an Azure LLM trace). Lengths: `--prompt-tokens SPEC --output-tokens SPEC`
(`e2e.serving.load.lengths`) or `--lengths histogram:azure-conv-2023`. Writes summary.json, timeline.csv,
requests.csv and plot.png into --out and prints the summary. `--time-scale S` drives servers emulated S times slower
than a GPU: give every figure in emulated time; it is sent S times slower and reported in emulated time. Exit status
0 when at least one request succeeded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from e2e.serving.load import arrivals as arr
from e2e.serving.load.client import APIS, Bounds, RunReport, Sampler, plan, run
from e2e.serving.load.lengths import length_model
from e2e.serving.load.plot import plot
from e2e.serving.load.sla import Sla, summary, timeline, write_requests, write_timeline
from e2e.serving.load.timescale import check_scale
from e2e.serving.traffic import require_loopback

DEFAULT_DURATION = 60.0


def _pairs(text: str, what: str) -> list[tuple[float, float]]:
    try:
        pairs = [tuple(float(x) for x in item.split(":")) for item in text.split(",") if item.strip()]
    except ValueError as error:
        raise SystemExit(f"{what}: {error}") from error
    if not pairs or any(len(p) != 2 for p in pairs):
        raise SystemExit(f"{what}: expected A:B[,A:B...], not {text!r}")
    return [(p[0], p[1]) for p in pairs]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m e2e.serving.load",
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--url", required=True, help="router or server base URL on 127.0.0.0/8")
    p.add_argument("--model", help="served model name (default: the first of GET /v1/models, else 'default')")
    p.add_argument("--api", choices=APIS, default="completions", help="streamed API (default: completions)")
    shape = p.add_mutually_exclusive_group(required=True)
    shape.add_argument("--rate", type=float, help="Poisson arrivals at this many requests/s")
    shape.add_argument("--steps", help="SECONDS:RATE[,SECONDS:RATE...]: Poisson at each rate in turn")
    shape.add_argument("--ramp", help="START:END: Poisson, rate linear from START to END over --duration")
    shape.add_argument("--daily", type=float, metavar="PEAK", help="a day compressed into --duration, peak rate PEAK")
    shape.add_argument("--trace", type=Path, help="CSV trace: timestamp[,prompt_tokens,output_tokens]")
    p.add_argument("--duration", type=float, help=f"arrival window, seconds (default {DEFAULT_DURATION:g}; steps: "
                   "their sum; trace: its span); a hard cap for every shape")  # fmt: skip
    p.add_argument("--daily-trough", type=float, default=0.25, help="daily: quietest hour / busiest (default 0.25)")
    p.add_argument("--daily-shape", help="daily: 24 comma-separated hourly weights from midnight (overrides trough)")
    p.add_argument("--trace-speedup", type=float, default=1.0, help="trace: replay this many times faster")
    p.add_argument("--prompt-tokens", help="fixed:N | uniform:A:B | normal:MEAN:SD[:MIN:MAX] | lognormal:MEDIAN:SIGMA"
                   "[:MIN:MAX] (default fixed:128)")  # fmt: skip
    p.add_argument("--output-tokens", help="same forms (default fixed:32)")
    p.add_argument("--lengths", help="histogram:NAME|PATH, a joint (prompt, output) histogram (data/README.md)")
    p.add_argument("--seed", type=int, default=0, help="one seed for arrivals, lengths and prompts")
    p.add_argument("--max-requests", type=int, default=10_000, help="hard cap on requests (default 10000)")
    p.add_argument("--max-concurrency", type=int, default=256, help="hard cap in flight; beyond it a request fails "
                   "as client-cap instead of waiting (default 256)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout, seconds (default 60)")
    p.add_argument("--drain", type=float, help="seconds allowed after the last arrival (default --timeout)")
    p.add_argument("--time-scale", type=float, default=1.0, metavar="S", help="the servers run S times slower "
                   "than a GPU (their time-scale annotation): rates, durations, trace times, SLA targets and timeouts "
                   "are emulated time, sent S times slower and reported in emulated time (default 1)")  # fmt: skip
    p.add_argument("--sla-ttft-ms", type=float, help="SLA: time to first token, ms")
    p.add_argument("--sla-itl-ms", type=float, help="SLA: mean inter-token latency of a request, ms")
    p.add_argument("--sla-e2e-ms", type=float, help="SLA: end to end, ms")
    p.add_argument("--kubeconfig", type=Path, help="with --service: sample ready servers per pool from this cluster")
    p.add_argument("--namespace", default="default", help="the service's namespace (default 'default')")
    p.add_argument("--service", help="DisaggSpecService name whose pools' ready servers are sampled every second")
    p.add_argument("--out", type=Path, default=Path("load-report"), help="output directory (default ./load-report)")
    return p


def schedule(args: argparse.Namespace) -> tuple[list[arr.Arrival], float, str]:
    """(arrivals, arrival window, description) of the chosen shape."""
    limit = args.max_requests
    if args.trace is not None:
        found = arr.read_trace(args.trace, speedup=args.trace_speedup)
        span = found[-1].at if found else 0.0
        window = min(args.duration, span) if args.duration is not None else span
        # The last arrival is at `span`: the window includes it (Bounds.admit keeps arrivals before `duration`).
        kept = [a for a in found if a.at <= window][: limit + 1]  # one more: where the cap cut (client.run)
        return kept, max(window, 1e-3), f"trace {args.trace} x{args.trace_speedup:g}"
    curve: arr.RateCurve
    if args.steps is not None:
        curve = arr.Steps(tuple(_pairs(args.steps, "--steps")))
        if args.duration is not None:
            curve = _capped(curve, args.duration)
    else:
        duration = args.duration if args.duration is not None else DEFAULT_DURATION
        if args.rate is not None:
            curve = arr.Constant(args.rate, duration)
        elif args.ramp is not None:
            (start, end) = _pairs(args.ramp, "--ramp")[0]
            curve = arr.Ramp(start, end, duration)
        else:
            shape = (
                tuple(float(w) for w in args.daily_shape.split(","))
                if args.daily_shape
                else arr.default_daily_shape(args.daily_trough)
            )
            curve = arr.Daily(args.daily, duration, shape)
    return arr.poisson_arrivals(curve, args.seed, limit + 1), curve.duration, curve.describe()


def _capped(steps: arr.Steps, duration: float) -> arr.Steps:
    """The steps up to `duration` seconds."""
    kept: list[tuple[float, float]] = []
    left = duration
    for seconds, rate in steps.steps:
        if left <= 0:
            break
        kept.append((min(seconds, left), rate))
        left -= seconds
    return arr.Steps(tuple(kept))


def served_model(url: str) -> str:
    """The first model of GET /v1/models (one bounded request, no proxy), else SGLang's default name (with a
    warning: smg in its multi-model mode refuses requests for a model it does not serve)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(require_loopback(url) + "/v1/models", timeout=5) as response:
            return str(json.loads(response.read())["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError) as error:
        print(f"warning: no model name from {url}/v1/models ({error}); sending model 'default'", file=sys.stderr)
        return "default"


def report_lines(figures: dict[str, Any]) -> list[str]:
    """The summary as a few human lines."""
    req = figures["requests"]

    def lat(name: str) -> str:
        f = figures[name]
        return f"p50 {f['p50']} / p90 {f['p90']} / p99 {f['p99']} ms"

    lines = [
        f"{figures['shape']}; {figures['lengths']}; api {figures['api']}, model {figures['model']}",
        f"requests: {req['scheduled']} scheduled, {req['sent']} sent, {req['succeeded']} succeeded, "
        f"{req['met_sla']} met the SLA {figures['sla'] or '(none set)'}, {req['failed']} failed {figures['failures']}",
        f"rate: offered {figures['offered_rps']}/s over {figures['window_s']} s, achieved {figures['achieved_rps']}/s "
        f"over {figures['elapsed_s']} s; goodput {figures['goodput_rps']} req/s, "
        f"{figures['goodput_output_tokens_per_s']} output tokens/s",
        f"TTFT {lat('ttft_ms')}; ITL {lat('itl_ms')}; e2e {lat('e2e_ms')}",
        f"schedule lag p99 {figures['schedule_lag_ms']['p99']} ms; generator CPU {figures['generator']['cpu_s']} s "
        f"({figures['generator']['cpu_ms_per_request']} ms per request)",
    ]
    scale = figures.get("time_scale", 1.0)
    if scale != 1:
        lines.append(f"time scale {scale:g}: sent {scale:g}x slower; every time and rate above is emulated (GPU) "
                     "time, the generator's CPU is wall-clock")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        url = require_loopback(args.url)
        if args.service is not None and args.kubeconfig is None:
            raise ValueError("--service needs --kubeconfig")
        found, window, shape = schedule(args)
        lengths = length_model(args.prompt_tokens, args.output_tokens, _histogram(args.lengths))
        bounds = Bounds(
            max_requests=args.max_requests,
            max_concurrency=args.max_concurrency,
            duration=window + (1e-6 if args.trace is not None else 0.0),
            timeout=args.timeout,
            drain=args.drain,
        )
        sla = Sla(args.sla_ttft_ms, args.sla_itl_ms, args.sla_e2e_ms)
        check_scale(args.time_scale)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    requests = plan(found, lengths, args.seed)
    model = args.model or served_model(url)
    pools: Sampler | None = None
    if args.service is not None:
        from e2e.serving.load.pools import from_kubeconfig

        pools = from_kubeconfig(args.kubeconfig, args.namespace, args.service)
    result: RunReport = asyncio.run(
        run(
            requests,
            url,
            api=args.api,
            model=model,
            bounds=bounds,
            window=window,
            seed=args.seed,
            pools=pools,
            time_scale=args.time_scale,
        )
    )
    context = {"url": url, "api": args.api, "model": model, "shape": shape, "lengths": lengths.describe()}
    context["seed"] = args.seed
    figures = summary(result, sla, context)
    rows = timeline(result, sla)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(figures, indent=2) + "\n")
    write_timeline(rows, args.out / "timeline.csv")
    write_requests(result.results, args.out / "requests.csv")
    plot(rows, sla, args.out / "plot.png", title=f"{shape} -> {url} ({args.api})", time_scale=args.time_scale)
    for line in report_lines(figures):
        print(line)
    print(f"wrote {args.out}/summary.json, timeline.csv, requests.csv, plot.png")
    return 0 if figures["requests"]["succeeded"] else 1


def _histogram(spec: str | None) -> str | None:
    if spec is None:
        return None
    kind, _, name = spec.partition(":")
    if kind != "histogram" or not name:
        raise ValueError(f"--lengths {spec!r}: expected histogram:NAME or histogram:PATH")
    return name
