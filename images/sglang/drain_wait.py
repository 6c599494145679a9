#!/usr/bin/env python3
"""preStop helper of the disaggspec SGLang image: leave the routers, then wait for the pod's KV transfers to end.

The operator renders it as every prefill and decode server container's preStop hook (`disaggspec.render.lifecycle`).
The kubelet runs it when the pod is deleted (a rollout step or a scale-down) and sends SIGTERM only once it exits,
after which SGLang drains the requests still in its tokenizer's table. In order:
1. **Leave the routers** (`--pause` seconds): both routers drop a pool pod when its deletionTimestamp is set; the
   pause lets the requests a router dispatched just before arrive.
2. **Wait for the PD queues** (at most `--bound` seconds): until the server's own disaggregation gauges are all zero,
   read from its /metrics (the operator always renders --enable-metrics). On a prefill those count the requests
   waiting for their decode to bootstrap and pre-allocate (0.5.2 `sglang:num_prefill_prealloc_queue_reqs`, 0.5.23
   `sglang:num_prefill_bootstrap_queue_reqs`) and the requests whose KV is being sent
   (`sglang:num_prefill_inflight_queue_reqs`); on a decode, the requests waiting for KV space and their prefill's
   bootstrap (`sglang:num_decode_prealloc_queue_reqs`) and those receiving KV (`sglang:num_decode_transfer_queue_reqs`)
   (0.5.2 srt/metrics/collector.py:257-275, 0.5.23 srt/observability/metrics_collector.py:583-601). With DP attention
   each DP group exports its own series (label dp_rank); they are summed. A peer still expects each of those
   requests: the decode the prefill's KV goes to, the prefill a decode's bootstrap room points at.
3. **Report**: two lines in the container's log (`--log`, default the main process's stdout, so `kubectl logs` shows
   them): how many transfers and bootstrap rooms were in flight when the hook started, then after the pause, how long
   the wait took, and whether the bound cut it short (the count left). Unreadable metrics end the wait at once, and say
   so.
It always exits 0: a failed preStop hook changes nothing in Kubernetes but an Event. Standard library only.
"""

from __future__ import annotations

import argparse
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping

PD_QUEUE_GAUGES = (
    "sglang:num_prefill_prealloc_queue_reqs",
    "sglang:num_prefill_bootstrap_queue_reqs",
    "sglang:num_prefill_inflight_queue_reqs",
    "sglang:num_decode_prealloc_queue_reqs",
    "sglang:num_decode_transfer_queue_reqs",
)
PREFIX = "[disaggspec preStop]"


def in_flight(exposition: Iterable[str]) -> dict[str, float]:
    """The PD queue gauges of a Prometheus text exposition, each summed over its series (DP ranks)."""
    totals: dict[str, float] = {}
    for line in exposition:
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in PD_QUEUE_GAUGES:
            try:
                value = float(line.rsplit(" ", 1)[1])
            except (IndexError, ValueError):
                continue
            totals[name] = totals.get(name, 0.0) + value
    return totals


def describe(gauges: Mapping[str, float]) -> str:
    """'3 (sglang:num_decode_transfer_queue_reqs 3)': the total and its non-zero parts."""
    parts = ", ".join(f"{name} {value:g}" for name, value in sorted(gauges.items()) if value)
    return f"{sum(gauges.values()):g}" + (f" ({parts})" if parts else "")


def wait(
    read: Callable[[], dict[str, float]],
    bound: float,
    interval: float = 0.5,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Poll `read` until every gauge is zero or `bound` seconds passed; the report line (without the prefix)."""
    started = clock()
    first: dict[str, float] | None = None
    while True:
        try:
            now = read()
        except (OSError, urllib.error.URLError, ValueError) as error:
            seen = "" if first is None else f" after {clock() - started:.1f} s ({describe(first)} at first)"
            return f"metrics unreadable ({error}){seen}: not waiting for KV transfers any longer"
        first = now if first is None else first
        waited = clock() - started
        if not sum(now.values()):
            return f"KV transfers and bootstrap rooms in flight: {describe(first)}; waited {waited:.1f} s for them"
        if waited >= bound:
            return (
                f"KV transfers and bootstrap rooms in flight: {describe(first)}; bound of {bound:g} s reached with "
                f"{describe(now)} left"
            )
        sleep(interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="localhost", help="the SGLang server's host")
    parser.add_argument("--port", type=int, default=30000, help="the SGLang server's HTTP port")
    parser.add_argument("--pause", type=float, default=5.0, help="seconds to let the routers drop the pod")
    parser.add_argument("--bound", type=float, default=60.0, help="longest wait for the PD queues, seconds")
    parser.add_argument("--log", default="/proc/1/fd/1", help="where the report line goes")
    args = parser.parse_args(argv)

    def say(text: str) -> None:
        line = f"{PREFIX} {text}\n"
        try:
            with open(args.log, "a") as out:
                out.write(line)
        except OSError:
            sys.stdout.write(line)

    def read() -> dict[str, float]:
        url = f"http://{args.host}:{args.port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:
            return in_flight(response.read().decode("utf-8", "replace").splitlines())

    try:
        at_deletion = describe(read())
    except (OSError, urllib.error.URLError, ValueError) as error:
        at_deletion = f"unknown ({error})"
    say(
        f"KV transfers and bootstrap rooms in flight at deletion: {at_deletion}; "
        f"leaving the routers: pause {args.pause:g} s"
    )
    time.sleep(max(0.0, args.pause))
    say(wait(read, args.bound))
    return 0


if __name__ == "__main__":
    sys.exit(main())
