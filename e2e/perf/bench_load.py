"""What the open-loop load generator itself costs, per request; prints figures, asserts nothing.

Run: `.venv/bin/python -m e2e.perf.bench_load [--rates 20 50 100] [--seconds 10] [--output-tokens 32 256]`.

It starts one colocated emulated SGLang 0.5.23 server on a loopback IP of its own (no router: the figures are the
client's), then for each API, output length and rate runs `e2e.serving.load.client.run` in this process for
--seconds of Poisson arrivals and prints: requests sent, failures, the schedule lag p99 (how late requests left:
the generator kept up when it stays at a few ms), the generator's CPU seconds (user + system of this process over the
run, from getrusage: the event loop, HTTP, SSE parsing) per request and per 1,000 output tokens, and the emulator's
CPU per request for scale. Both share this machine's cores; the emulated server has no capacity model (issue 31,
items 1-3), so its latencies here say nothing about a GPU server.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from pathlib import Path

from e2e.perf.bench_serving import cpu_seconds
from e2e.serving.emulator.tests.harness import HTTP_PORT, Stack, sglang_args, wait_for
from e2e.serving.load.arrivals import Constant, poisson_arrivals
from e2e.serving.load.client import APIS, Bounds, plan, run
from e2e.serving.load.lengths import Fixed, Independent
from e2e.serving.load.sla import Sla, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[20.0, 50.0, 100.0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--output-tokens", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--apis", nargs="+", choices=APIS, default=list(APIS))
    parser.add_argument("--tokens-per-second", type=float, default=400.0, help="the emulator's decode pace")
    args = parser.parse_args()

    args_colocated = [a for a in sglang_args("prefill") if a not in ("--disaggregation-mode", "prefill")]
    work = Path(tempfile.mkdtemp(prefix="disaggspec-bench-load-"))
    with Stack(work, subnet=f"127.244.{os.getpid() % 250 + 1}") as stack:
        emulate = (f"tokens-per-second={args.tokens_per_second}",)
        server = stack.emulator("0.5.23", "colocated", 1, args=args_colocated, emulate=emulate)
        url = f"http://{stack.ip(1)}:{HTTP_PORT}"
        wait_for(url + "/health", proc=server)
        print(
            f"one emulated server at {url}, {args.tokens_per_second:g} tokens/s per request; prompt "
            f"{args.prompt_tokens} tokens; {args.seconds:g} s of Poisson arrivals per row"
        )
        print(
            f"{'api':>12} {'out tok':>7} {'rate/s':>7} {'sent':>6} {'fail':>5} {'lag p99 ms':>10} "
            f"{'gen CPU s':>9} {'gen ms/req':>10} {'gen ms/1k tok':>13} {'emu ms/req':>10}"
        )
        for api in args.apis:
            for tokens in args.output_tokens:
                lengths = Independent(Fixed(args.prompt_tokens), Fixed(tokens))
                for rate in args.rates:
                    curve = Constant(rate, args.seconds)
                    requests = plan(poisson_arrivals(curve, seed=1, limit=100_000), lengths, seed=1)
                    before = cpu_seconds(server.popen.pid)
                    bounds = Bounds(max_requests=100_000, max_concurrency=2048, duration=args.seconds, timeout=60)
                    report = asyncio.run(run(requests, url, api=api, model="llama-emulated", bounds=bounds))
                    emulator = cpu_seconds(server.popen.pid) - before
                    figures = summary(report, Sla())
                    sent = max(1, figures["requests"]["sent"])
                    out_tokens = max(1, sum(r.output_tokens for r in report.results))
                    print(
                        f"{api:>12} {tokens:>7} {rate:>7g} {sent:>6} {figures['requests']['failed']:>5} "
                        f"{figures['schedule_lag_ms']['p99']:>10} {report.cpu_seconds:>9.2f} "
                        f"{1000 * report.cpu_seconds / sent:>10.2f} {1e6 * report.cpu_seconds / out_tokens:>13.1f} "
                        f"{1000 * emulator / sent:>10.2f}",
                        flush=True,
                    )
                    if figures["failures"]:
                        print(f"{'':>12} failures: {figures['failures']} {figures['errors']}")


if __name__ == "__main__":
    main()
