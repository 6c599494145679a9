"""What the capacity-model emulator costs at saturation (issue 31 item 5); prints figures, asserts nothing.

Run: `.venv/bin/python -m e2e.perf.bench_emulator [--pairs 8] [--time-scale 20] [--load 1.2] [--seconds 60]`.

Starts `--pairs` emulated SGLang 0.5.23 prefill servers and as many decodes (EAGLE3 Llama-3.1-8B on H100, the
capacity model on), each on a loopback IP of its own, behind ONE real smg router, and drives them with the open-loop
generator at `--load` times the deployment's analytic capacity (`pdsim.system_capacity` of the same profile and
limits), in emulated time at `--time-scale`. Prints: requests, failures, goodput vs the analytic capacity (emulated
requests/s), latency percentiles (emulated), the CPU seconds of the router, of the emulators and of the generator per
wall-clock second (2.0 = both cores), and the emulators' loop lag as a share of their busy time: when the lag share
stays small, the machine kept up and the figures are the model's, not the machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

from disaggspec.sglang.profiles import PROFILES
from e2e.perf.bench_serving import cpu_seconds
from e2e.serving.emulator import capacity, pdsim, profiles, sizing
from e2e.serving.emulator.sglang_args import server_config
from e2e.serving.emulator.tests.harness import HTTP_PORT, Stack, request, sglang_args, wait_for
from e2e.serving.load.arrivals import Constant, poisson_arrivals
from e2e.serving.load.client import Bounds, plan, run
from e2e.serving.load.lengths import Fixed, Independent
from e2e.serving.load.sla import Sla, summary
from e2e.serving.routers import ensure_router_venv

VERSION: Final = "0.5.23"
ACCEPT = 2.0


def analytic(prompt: int, output: int, pairs: int) -> tuple[float, float, float]:
    """(prefill, decode, deployment) requests/s of the profile the emulators select for `sglang_args`."""
    cfg = server_config(VERSION, sglang_args("decode"))
    profile = profiles.select_profile(
        cfg.model_path,
        None,
        speculative_algorithm=cfg.speculative_algorithm,
        num_steps=cfg.speculative_num_steps,
        num_draft_tokens=cfg.speculative_num_draft_tokens,
        accept_length=ACCEPT,
    )
    assert profile is not None
    limits = sizing.size_server(cfg, profile, ranks=1, context_length=131072).limits
    prefill = capacity.prefill_capacity(profile, limits, prompt)
    decode = capacity.decode_capacity(profile, limits, prompt, output)
    return prefill, decode, pdsim.system_capacity(pairs, pairs, prefill, decode)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=8, help="prefill/decode pairs (servers = 2 x pairs)")
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--load", type=float, default=1.2, help="offered load / analytic capacity")
    parser.add_argument("--seconds", type=float, default=60.0, help="arrival window, emulated seconds")
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--output-tokens", type=int, default=256)
    args = parser.parse_args()

    router_profile = PROFILES[VERSION].router
    python = ensure_router_venv(router_profile) / "bin" / "python"
    cap_p, cap_d, cap = analytic(args.prompt_tokens, args.output_tokens, args.pairs)
    rate = args.load * cap
    print(
        f"{args.pairs} prefill + {args.pairs} decode emulators (H100 x Llama-3.1-8B + EAGLE3, accept {ACCEPT}), one "
        f"smg router; prompt {args.prompt_tokens} / output {args.output_tokens}; analytic capacity: prefill "
        f"{cap_p:.1f}/s, decode {cap_d:.1f}/s per server, deployment {cap:.1f}/s; offered {rate:.1f}/s "
        f"({args.load:g}x) for {args.seconds:g} emulated s at time scale {args.time_scale:g}",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="disaggspec-bench-emulator-"))
    with Stack(work, subnet=f"127.243.{os.getpid() % 250 + 1}") as stack:
        emulate = (f"time-scale={args.time_scale:g}", f"accept-length={ACCEPT:g}")
        servers = []
        for index in range(args.pairs):
            servers.append(stack.emulator(VERSION, "prefill", 10 + index, emulate=emulate))
            servers.append(stack.emulator(VERSION, "decode", 100 + index, emulate=emulate))
        argv = [str(python), *router_profile.launch[1:], "--pd-disaggregation"]
        for index in range(args.pairs):
            argv += ["--prefill", f"http://{stack.ip(10 + index)}:{HTTP_PORT}", "8998"]
        for index in range(args.pairs):
            argv += ["--decode", f"http://{stack.ip(100 + index)}:{HTTP_PORT}"]
        argv += ["--host", stack.ip(1), "--port", str(HTTP_PORT), "--worker-startup-check-interval", "1"]
        argv += ["--prometheus-host", stack.ip(1), "--prometheus-port", "29000"]
        env = {k: "" for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
        router = stack.spawn("router", argv, env, graceful=False)
        url = f"http://{stack.ip(1)}:{HTTP_PORT}"
        wait_for(url + "/readiness", proc=router, timeout=120)

        lengths = Independent(Fixed(args.prompt_tokens), Fixed(args.output_tokens))
        requests = plan(poisson_arrivals(Constant(rate, args.seconds), seed=1, limit=200_000), lengths, seed=1)
        bounds = Bounds(max_requests=200_000, max_concurrency=4096, duration=args.seconds, timeout=120)
        pids = {"router": [router.popen.pid], "emulators": [s.popen.pid for s in servers]}
        before = {kind: sum(cpu_seconds(p) for p in found) for kind, found in pids.items()}
        started = time.monotonic()
        report = asyncio.run(
            run(requests, url, api="completions", model="llama-emulated", bounds=bounds, time_scale=args.time_scale)
        )
        wall = time.monotonic() - started
        used = {kind: sum(cpu_seconds(p) for p in found) - before[kind] for kind, found in pids.items()}
        lag = busy = 0.0
        for index in range(args.pairs):
            for host in (10 + index, 100 + index):
                state = json.loads(request("GET", f"http://{stack.ip(host)}:{HTTP_PORT}/emulator/capacity")[1])
                lag += float(state["lag_seconds"])
                busy += float(state["busy_seconds"])
        figures = summary(report, Sla())
        req = figures["requests"]
        print(
            f"requests: {req['sent']} sent, {req['succeeded']} succeeded, {req['failed']} failed {figures['failures']}"
        )
        if figures["failures"]:
            print(f"errors: {figures['errors']}")
        print(
            f"goodput {figures['achieved_rps']} req/s emulated (analytic {cap:.1f}); TTFT p50/p99 "
            f"{figures['ttft_ms']['p50']}/{figures['ttft_ms']['p99']} ms, ITL p50/p99 {figures['itl_ms']['p50']}/"
            f"{figures['itl_ms']['p99']} ms (emulated)"
        )
        print(
            f"CPU per wall second over {wall:.0f} s: router {used['router'] / wall:.2f}, {2 * args.pairs} emulators "
            f"{used['emulators'] / wall:.2f}, generator {report.cpu_seconds / wall:.2f}; emulator loop lag "
            f"{lag:.1f} s of {busy:.1f} s busy ({100 * lag / max(busy, 1e-9):.1f}%)",
            flush=True,
        )
        sys.stdout.flush()


if __name__ == "__main__":
    main()
