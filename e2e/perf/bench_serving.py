"""Serving benchmark on the local backend; prints figures, asserts nothing.

Run: `.venv/bin/python -m e2e.perf.bench_serving [--version 0.5.23] [--concurrency 8 32 128] [--seconds 20]`.

It starts a private local cluster in serving mode, the operator and the pod runner (the real pinned router per release,
the SGLang emulator per pool pod; see docs/serving-emulator.md), applies the EAGLE3 example at the chosen release with
--decode-replicas decode pods, and measures:
  1. time from `kubectl apply` to the first successful request through the router (requests are tried every 0.25 s
     against the router pod as soon as it has an IP), and to the service's Ready condition;
  2. for each concurrency C: C streams for --seconds (at most --max-requests requests), mixed OpenAI chat/completions
     and /generate, streaming and not, --max-tokens tokens each: requests/s, p50/p99 latency, failures;
  3. CPU seconds (user+system, from /proc) spent in each phase by the router, the emulators (prefill, decode) and the
     runner itself, and per 1,000 requests.
The emulators answer as fast as the router can pair them unless --tokens-per-second is set: this measures the router
and the simulation, not a model. All of it runs on this machine's cores, so the figures include the client's own CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from disaggspec.sglang.profiles import PROFILES
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.cluster.proctable import ProcessTable
from e2e.cluster.servingdir import TABLE, runner_pid, serving_dir
from e2e.serving.routers import ensure_router_venv
from e2e.serving.traffic import Load, send
from e2e.support.kube import Cluster
from e2e.support.operator_process import OperatorProcess
from e2e.support.serving import pod_runner, router_url, served_model
from e2e.support.workloads import example, load

NAMESPACE = "bench"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def groups(state_dir: Path) -> dict[str, list[int]]:
    """The runner's processes by kind (router, prefill, decode: from the pod each one stands for), and the runner."""
    out: dict[str, list[int]] = {"router": [], "prefill": [], "decode": [], "runner": []}
    for record in ProcessTable(serving_dir(state_dir) / TABLE).load():
        for kind in ("router", "prefill", "decode"):
            if f"-{kind}-" in record.pod:
                out[kind].append(record.pid)
    runner = runner_pid(state_dir)
    if runner is not None:
        out["runner"].append(runner)
    return out


def cpu_by_group(state_dir: Path) -> dict[str, float]:
    return {kind: sum(cpu_seconds(p) for p in pids) for kind, pids in groups(state_dir).items()}


def first_success(url_of: Any, body: dict[str, Any], deadline: float) -> float | None:
    while time.monotonic() < deadline:
        url = url_of()
        if url:
            request = urllib.request.Request(
                url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    if response.status == 200 and "emulator" in json.loads(response.read()):
                        return time.monotonic()
            except (urllib.error.URLError, OSError, ValueError):
                pass
        time.sleep(0.25)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", choices=sorted(PROFILES), default="0.5.23")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--max-requests", type=int, default=20000)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--decode-replicas", type=int, default=2)
    parser.add_argument("--tokens-per-second", type=float, default=0.0, help="0: as fast as possible")
    parser.add_argument("--port-base", type=int, default=19579)
    args = parser.parse_args()

    for profile in PROFILES.values():
        ensure_router_venv(profile.router)
    work = Path(tempfile.mkdtemp(prefix="disaggspec-bench-serving-"))
    local = LocalCluster(work / "cluster")
    state = local.up(port_base=args.port_base, nodes=NodeShape(count=4), timeout=180, serving=True)
    cluster = Cluster(state.kubeconfig, local=True)
    router = PROFILES[args.version].router
    print(f"release {args.version}: router {router.requirement}; work dir {work}")
    operator: OperatorProcess | None = None
    try:
        cluster.kubectl("apply", "--server-side", "-f", str(Path(__file__).resolve().parents[2] / "crds"))
        cluster.wait_for("CRD established", lambda: cluster.kubectl("get", "dss", "-A", check=False).returncode == 0)
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl("create", "secret", "generic", "hf-token", "-n", NAMESPACE, "--from-literal=token=emulated")
        operator = OperatorProcess(state.kubeconfig, work / "operator.log", webhook=False).start()
        obj = load(example("llama"))
        obj["metadata"]["namespace"] = NAMESPACE
        obj["spec"]["sglang"] = {"version": args.version, "image": f"disaggspec/sglang:v{args.version}-disaggspec"}
        obj["spec"]["router"].pop("policy", None)
        obj["spec"]["decode"]["replicas"] = args.decode_replicas
        if args.tokens_per_second:
            rate = {"emulator.disaggspec.io/tokens-per-second": str(args.tokens_per_second)}
            obj["spec"]["decode"]["podAnnotations"] = rate
        with pod_runner(state.directory, state.kubeconfig):
            t0 = time.monotonic()
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
            name = obj["metadata"]["name"]
            port = obj["spec"]["router"].get("port", 30000)

            def router_ip_url() -> str | None:
                pods = cluster.kubectl(
                    "get", "pods", "-n", NAMESPACE, "-l", f"disaggspec.io/service={name},disaggspec.io/role=router",
                    "-o", "jsonpath={.items[*].status.podIP}", check=False,
                ).stdout.split()  # fmt: skip
                return f"http://{pods[0]}:{port}" if pods else None

            body = {"model": served_model(obj), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
            first = first_success(router_ip_url, body, t0 + 180)
            cluster.kubectl("wait", "-n", NAMESPACE, "--for=condition=Ready", f"dss/{name}", "--timeout=180s")
            ready = time.monotonic()
            print(
                f"kubectl apply -> first successful request: "
                f"{'none in 180 s' if first is None else f'{first - t0:.1f} s'}; -> Ready condition: {ready - t0:.1f} s"
            )
            url = router_url(cluster, NAMESPACE, obj)
            print(
                f"{'streams':>8} {'requests':>9} {'fail':>5} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}  "
                "CPU s (router / prefill / decode / runner)   CPU s per 1k requests (router / emulators)"
            )
            for streams in args.concurrency:
                cpu_before = cpu_by_group(state.directory)
                load_ = Load(
                    url=url,
                    model=served_model(obj),
                    streams=streams,
                    requests=args.max_requests,
                    duration=args.seconds,
                    max_tokens=args.max_tokens,
                    timeout=60,
                )
                report = send(load_)
                cpu_after = cpu_by_group(state.directory)
                used = {k: cpu_after[k] - cpu_before.get(k, 0.0) for k in cpu_after}
                summary = report.summary()
                done = max(1, len(report.succeeded))
                emulators = used["prefill"] + used["decode"]
                print(
                    f"{streams:>8} {summary['requests']:>9} {summary['failures']:>5} {summary['throughput_rps']:>8} "
                    f"{summary['latency_p50_ms']:>8} {summary['latency_p99_ms']:>8}  "
                    f"{used['router']:.1f} / {used['prefill']:.1f} / {used['decode']:.1f} / {used['runner']:.2f}"
                    f"{'':>14}{1000 * used['router'] / done:.2f} / {1000 * emulators / done:.2f}"
                )
                if summary["failures"]:
                    print(f"         errors: {summary['errors']}")
    finally:
        if operator is not None:
            operator.stop()
        local.down()


if __name__ == "__main__":
    main()
