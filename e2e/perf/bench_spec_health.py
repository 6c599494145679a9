"""SpecDecodeHealthy over a long mixed-prompt run on the serving simulation (issue 29); prints figures, asserts nothing.

Run: `.venv/bin/python -m e2e.perf.bench_spec_health [--minutes 20] [--window 60] [--interval 5] [--drop]`.

It starts a private local cluster in serving mode with the operator and the pod runner (the real router, the SGLang
emulator per pool pod), applies `e2e.support.spec_health.seed_drop_service` (4 draft tokens as the DeepSeek MTP
example, 0.5.23, decode accepting 1.565 tokens per verify step, no expectedAcceptLength: the operator learns it), and
sends `MixedTraffic` (phases of 2 to 6 streams and 16 to 32 output tokens) for --minutes with a stable draft. Every
--interval it reads SpecDecodeHealthy and the operator's gauges, and prints: how many readings were False (the false
flags; the issue asks for none over 20 minutes), the LowAcceptLength Events, the range of the measured accept length
and of its drop below the learned baseline, the baseline, and the requests sent. With --drop it then sets the
emulated accept length to 1.362 (the seed's bug) and prints the time until SpecDecodeHealthy is False, then restores
1.565 and prints the time until it is True again. The short versions of both run in `make test`
(`e2e/tests/test_serving_local.py`).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from e2e.support.fixtures import fresh_namespace
from e2e.support.planes import serving_plane
from e2e.support.serving import apply_service, ready_pods, router_url, served_model
from e2e.support.spec_health import BROKEN, HEALTHY, MixedTraffic, condition, seed_drop_service, set_accept_length
from e2e.support.workloads import get, wait_ready

NAME = "spec-health"


def _events(cluster: Any, namespace: str, reason: str) -> int:
    return sum(1 for event in get(cluster, namespace, "events")["items"] if event["reason"] == reason)


def _until(cluster: Any, namespace: str, status: str, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition(cluster, namespace, NAME, "SpecDecodeHealthy").get("status") == status:
            return time.monotonic() - started
        time.sleep(1)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--window", type=float, default=60.0, help="DISAGGSPEC_HEALTH_WINDOW_SECONDS (default 300)")
    parser.add_argument("--interval", type=float, default=5.0, help="DISAGGSPEC_HEALTH_INTERVAL_SECONDS (default 15)")
    parser.add_argument("--drop", action="store_true", help="then the seed's drop to 1.362 and back")
    args = parser.parse_args()
    env = {
        "DISAGGSPEC_HEALTH_WINDOW_SECONDS": f"{args.window:g}",
        "DISAGGSPEC_HEALTH_INTERVAL_SECONDS": f"{args.interval:g}",
    }
    with serving_plane("spec-health", nodes=4, operator_env=env) as plane, fresh_namespace(plane.cluster, "mix") as ns:
        cluster, operator = plane.cluster, plane.operator
        obj = apply_service(cluster, ns, seed_drop_service(NAME))
        wait_ready(cluster, ns, NAME, timeout=150)
        traffic = MixedTraffic(router_url(cluster, ns, obj), served_model(obj), seed=29, phase_seconds=20).start()
        gauge = {"namespace": ns, "service": NAME}
        started = time.monotonic()
        readings: dict[str, int] = {}
        judged = 0
        accepts: list[float] = []
        drops: list[float] = []
        try:
            while time.monotonic() - started < args.minutes * 60:
                time.sleep(args.interval)
                cond = condition(cluster, ns, NAME, "SpecDecodeHealthy")
                readings[cond.get("reason", "none")] = readings.get(cond.get("reason", "none"), 0) + 1
                accept = operator.metric("disaggspec_spec_accept_length", **gauge)
                expected = operator.metric("disaggspec_spec_expected_accept_length", **gauge, source="baseline")
                if accept:
                    accepts.append(accept)
                if accept and expected and expected > 1:
                    judged += 1
                    drops.append(1 - (accept - 1) / (expected - 1))
            sent, failed = traffic.requests()
            status = get(cluster, ns, "dss", NAME)["status"]
            print(
                f"{args.minutes:g} min of mixed prompts, stable draft {HEALTHY} (window {args.window:g} s, every "
                f"{args.interval:g} s): {sent} requests ({failed} failed) in {len(traffic.reports)} phases"
            )
            print(f"  SpecDecodeHealthy readings by reason: {readings}")
            print(
                f"  false flags: {readings.get('LowAcceptLength', 0)} readings False, "
                f"{_events(cluster, ns, 'LowAcceptLength')} LowAcceptLength Events"
            )
            if accepts:
                print(f"  measured accept length: {min(accepts):.3f} .. {max(accepts):.3f}")
            if drops:
                print(
                    f"  drop below the learned baseline over {judged} judged readings: widest {max(drops):.1%}, "
                    f"widest rise {-min(drops):.1%} (False beyond 25%)"
                )
            print(f"  learned baseline (status.specDecode): {status.get('specDecode')}")
            if args.drop:
                decode_pod = ready_pods(cluster, ns, NAME, "decode")[0]
                set_accept_length(decode_pod, BROKEN)
                flagged = _until(cluster, ns, "False", timeout=4 * args.window + 60)
                print(f"  seed drop {HEALTHY} -> {BROKEN}: SpecDecodeHealthy False after {flagged} s")
                set_accept_length(decode_pod, HEALTHY)
                recovered = _until(cluster, ns, "True", timeout=4 * args.window + 60)
                print(f"  restored {HEALTHY}: SpecDecodeHealthy True after {recovered} s")
        finally:
            traffic.stop()


if __name__ == "__main__":
    main()
