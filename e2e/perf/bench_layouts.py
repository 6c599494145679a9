"""Parallelism and placement layouts under open-loop load, each beside its baseline; prints figures, asserts nothing.

Run: `.venv/bin/python -m e2e.perf.bench_layouts [--rate 8] [--seconds 30] [--only NAME ...]`.

One private local cluster in serving mode (the operator with its webhook, the pod runner: the real pinned router per
release, the SGLang emulator per pool pod; see docs/serving-emulator.md) runs, one after another, four services:
  1. tp16-multinode: examples/deepseek-r1-tp16-multinode.yaml as shipped (TP only, two-node LeaderWorkerSet groups):
     the baseline of 2;
  2. pd-dp-ep: examples/deepseek-r1-pd-dp-ep.yaml as shipped (DP attention 16 and DeepEP on both pools, host network);
  3. hostnet-per-node: SGLang 0.5.23, one 2-GPU prefill and one 2-GPU decode on the host network, one pool pod per
     node: the baseline of 4;
  4. hostnet-shared-node: the same with two prefill and two decode pods pinned to one node, each pod on the HTTP and
     bootstrap ports the operator's webhook gave it.
For each: apply it, wait for its Ready condition, drive open-loop Poisson arrivals (`e2e.serving.load`) at --rate for
--seconds through its real router, then delete it and wait until its pods are gone (the two DeepSeek examples take the
same four H100 nodes). It prints per service the offered and achieved rates, goodput under the SLA (--sla-ttft-ms,
--sla-itl-ms), failures, p50/p99 TTFT and ITL, how late the client sent (schedule lag: it kept up while that stays
small), per pool how many servers and, with DP attention, how many DP ranks were given requests (from each pool
server's `GET /emulator/dp`, as e2e/tests/test_serving_dp_attention.py reads it), and the wall time of every phase.
The emulated servers have no capacity model yet (issue 31): a layout's GPUs, DP ranks or shared node change nothing
about how fast they answer, so these figures show wiring, failures and overhead (router, PD handshake, ports, the
client on the same cores), not GPU throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from disaggspec.sglang.profiles import PROFILES
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.cluster.processes import port_free
from e2e.serving.load.arrivals import Constant, poisson_arrivals
from e2e.serving.load.client import APIS, Api, Bounds, plan, run
from e2e.serving.load.lengths import length_model
from e2e.serving.load.sla import Sla, summary
from e2e.serving.routers import ensure_router_venv
from e2e.support.kube import Cluster, CommandFailed, wait_for
from e2e.support.operator_process import OperatorProcess
from e2e.support.serving import apply_service, pod_runner, ready_pods, router_url, served_model
from e2e.support.workloads import LWS_WORKER_INDEX, ROLES, example, get, host_network_service, load

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds"
H100_NODES = 4
"""Each DeepSeek example takes four whole H100 nodes (a two-node prefill group and a two-node decode group)."""
NODES = 6
"""The four H100 nodes and two H200 nodes (gpu-node-0 and gpu-node-1) for the 2-GPU host-network services."""
SHARED_NODE = "gpu-node-1"
SERVER_PORT = 30000
"""SGLang's HTTP port when the pod names none of its own (`--port`'s default)."""
POOLS = ("prefill", "decode")


def _hostnet(name: str, replicas: int, nodes: tuple[str, str]) -> dict[str, Any]:
    """The host-network spec of e2e/tests/test_serving_host_network.py at 0.5.23: prefill pods on nodes[0], decode
    pods on nodes[1]."""
    return host_network_service(name, "0.5.23", replicas=replicas, prefill_node=nodes[0], decode_node=nodes[1])


@dataclass(frozen=True)
class Case:
    """One service to measure, and the one it is compared with."""

    name: str
    build: Callable[[], dict[str, Any]]
    baseline: str | None = None


CASES = (
    Case("tp16-multinode", lambda: load(example("tp16-multinode"))),
    Case("pd-dp-ep", lambda: load(example("pd-dp-ep")), baseline="tp16-multinode"),
    Case("hostnet-per-node", lambda: _hostnet("llama-hostnet-spread", 1, ("gpu-node-0", SHARED_NODE))),
    Case(
        "hostnet-shared-node",
        lambda: _hostnet("llama-hostnet-shared", 2, (SHARED_NODE, SHARED_NODE)),
        baseline="hostnet-per-node",
    ),
)


def layout(obj: dict[str, Any]) -> str:
    """A short description of a service's pools: replicas and parallelism, network, placement."""

    def pool(role: str) -> str:
        spec = obj["spec"][role]
        nodes = int(spec.get("nodesPerInstance", 1))
        text = f"tp{spec.get('tensorParallelSize', 1)}" + (f"/{nodes}n" if nodes > 1 else "")
        parallelism = spec.get("parallelism") or {}
        dp = (parallelism.get("dataParallelAttention") or {}).get("size")
        ep = parallelism.get("expertParallel") or {}
        text += f" dp{dp}" if dp else ""
        text += f" {ep.get('backend', 'ep')}" if ep else ""
        return text

    prefill, decode = pool("prefill"), pool("decode")
    counts = f"{obj['spec']['prefill'].get('replicas', 1)}P+{obj['spec']['decode'].get('replicas', 1)}D"
    text = f"{counts} {prefill}" if prefill == decode else f"{counts} P {prefill}, D {decode}"
    host = ((obj["spec"].get("transfer") or {}).get("rdma") or {}).get("hostNetwork")
    text += ", hostNet" if host else ", podNet"
    pinned = {(obj["spec"][r].get("nodeSelector") or {}).get("kubernetes.io/hostname") for r in POOLS}
    if len(pinned) == 1 and None not in pinned:
        text += f", all on {pinned.pop()}"
    elif None not in pinned:
        text += ", 1 pool pod/node"
    return text


def _servers(cluster: Cluster, namespace: str, name: str, role: str) -> list[dict[str, Any]]:
    """The Ready pods of `role` that serve SGLang's API: the pods, or each group's leader."""
    pods = ready_pods(cluster, namespace, name, role)
    return [p for p in pods if p["metadata"]["labels"].get(LWS_WORKER_INDEX, "0") == "0"]


def _http_port(pod: dict[str, Any]) -> int:
    """The pod's HTTP port: its container port named http (per pod under a shared host network), else SGLang's."""
    for port in pod["spec"]["containers"][0].get("ports") or []:
        if port.get("name") == "http":
            return int(port["containerPort"])
    return SERVER_PORT


def _dp_report(pod: dict[str, Any]) -> dict[str, Any]:
    """What the server's DP controller gave each of its ranks (`GET /emulator/dp`, docs/serving-emulator.md)."""
    url = f"http://{pod['status']['podIP']}:{_http_port(pod)}/emulator/dp"
    with urllib.request.urlopen(url, timeout=5) as response:
        report: dict[str, Any] = json.loads(response.read())
    return report


def _has_dp(obj: dict[str, Any], role: str) -> bool:
    """Whether pool `role` runs DP attention."""
    return bool(((obj["spec"][role].get("parallelism") or {}).get("dataParallelAttention") or {}).get("size"))


DpSnapshot = dict[str, dict[str, dict[str, Any]]]
"""role -> pod name -> its `/emulator/dp` report."""


def dp_snapshot(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> DpSnapshot:
    """Every pool server's `/emulator/dp` report (a server without DP attention reports one rank, given every
    request it served)."""
    name = obj["metadata"]["name"]
    return {
        role: {p["metadata"]["name"]: _dp_report(p) for p in _servers(cluster, namespace, name, role)} for role in POOLS
    }


def spread(obj: dict[str, Any], before: DpSnapshot, after: DpSnapshot) -> str:
    """Per pool, how far the requests between two snapshots spread: the servers given at least one out of the
    pool's servers, and for a DP-attention pool the DP ranks (over all its servers) given at least one out of all
    its ranks, e.g. `P 1/1 srv 16/16 dp, D 2/2 srv`."""
    parts = []
    for role, servers in after.items():
        used_servers = used_ranks = ranks = 0
        for pod, report in servers.items():
            old = before.get(role, {}).get(pod, {}).get("dispatched") or [0] * len(report["dispatched"])
            given = [b - a for a, b in zip(old, report["dispatched"], strict=True)]
            used_servers += int(sum(given) > 0)
            used_ranks += sum(1 for n in given if n > 0)
            ranks += int(report["num_dp_ranks"])
        text = f"{role[0].upper()} {used_servers}/{len(servers)} srv"
        parts.append(text + (f" {used_ranks}/{ranks} dp" if _has_dp(obj, role) else ""))
    return ", ".join(parts)


@dataclass
class Row:
    """One service's figures."""

    case: Case
    layout: str
    phases: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] | None = None
    spread: str = "-"
    error: str = ""


@dataclass(frozen=True)
class LoadShape:
    rate: float
    seconds: float
    prompt: str
    output: str
    sla: Sla
    api: Api
    seed: int
    timeout: float
    max_concurrency: int


def drive(url: str, model: str, shape: LoadShape) -> dict[str, Any]:
    """One open-loop run against `url`; its summary (`e2e.serving.load.sla.summary`)."""
    curve = Constant(shape.rate, shape.seconds)
    max_requests = max(1, int(shape.rate * shape.seconds * 3) + 20)  # far above the Poisson count: never the cap
    requests = plan(
        poisson_arrivals(curve, shape.seed, max_requests + 1),
        length_model(shape.prompt, shape.output, None),
        shape.seed,
    )
    bounds = Bounds(
        max_requests=max_requests,
        max_concurrency=shape.max_concurrency,
        duration=shape.seconds,
        timeout=shape.timeout,
        drain=shape.timeout,
    )
    report = asyncio.run(
        run(requests, url, api=shape.api, model=model, bounds=bounds, window=shape.seconds, seed=shape.seed)
    )
    return summary(report, shape.sla, {"url": url, "model": model})


def _pool_pods_left(cluster: Cluster, namespace: str, name: str) -> int:
    selector = f"disaggspec.io/service={name},disaggspec.io/role in ({','.join(ROLES)})"
    return len(get(cluster, namespace, "pods", "-l", selector)["items"])


def measure(cluster: Cluster, case: Case, shape: LoadShape, ready_timeout: int) -> Row:
    """Apply, wait for Ready, load, delete and wait for the pods to go; the figures and the phase times."""
    obj = case.build()
    row = Row(case, layout(obj))
    namespace = f"bench-{case.name}"
    name = obj["metadata"]["name"]
    cluster.kubectl("create", "namespace", namespace)
    t0 = time.monotonic()
    try:
        obj = apply_service(cluster, namespace, obj)
        ready = cluster.kubectl(
            "wait", "-n", namespace, "--for=condition=Ready", f"dss/{name}", f"--timeout={ready_timeout}s",
            check=False, timeout=ready_timeout + 30,
        )  # fmt: skip
        row.phases["apply->Ready"] = time.monotonic() - t0
        if ready.returncode != 0:
            row.error = f"not Ready within {ready_timeout} s: {ready.stderr.strip()[:200]}"
            return row
        url = router_url(cluster, namespace, obj)
        before = dp_snapshot(cluster, namespace, obj)
        t1 = time.monotonic()
        row.figures = drive(url, served_model(obj), shape)
        row.phases["load"] = time.monotonic() - t1
        row.spread = spread(obj, before, dp_snapshot(cluster, namespace, obj))
    except (CommandFailed, AssertionError, OSError, ValueError, KeyError) as error:
        row.error = f"{type(error).__name__}: {str(error).strip()[:300]}"
    finally:
        t2 = time.monotonic()
        cluster.kubectl(
            "delete", "dss", name, "-n", namespace, "--ignore-not-found", "--timeout=120s", check=False, timeout=150
        )
        try:
            wait_for(
                f"the pods of {namespace}/{name} to go",
                lambda: _pool_pods_left(cluster, namespace, name) == 0,
                120,
                0.5,
            )
        except AssertionError as error:
            row.error = row.error or str(error)
        row.phases["delete->pods gone"] = time.monotonic() - t2
    return row


def _cell(value: Any, width: int) -> str:
    return f"{'-' if value is None else value:>{width}}"


COLUMNS = (  # (header, width, the figure from a summary)
    ("offered", 7, lambda f: f["offered_rps"]),
    ("achieved", 8, lambda f: f["achieved_rps"]),
    ("goodput", 7, lambda f: f["goodput_rps"]),
    ("failed", 9, lambda f: f"{f['requests']['failed']}/{f['requests']['scheduled']}"),
    ("TTFT p50", 8, lambda f: f["ttft_ms"]["p50"]),
    ("TTFT p99", 8, lambda f: f["ttft_ms"]["p99"]),
    ("ITL p50", 7, lambda f: f["itl_ms"]["p50"]),
    ("ITL p99", 7, lambda f: f["itl_ms"]["p99"]),
    ("lag p99", 7, lambda f: f["schedule_lag_ms"]["p99"]),
)
"""The table's figure columns; lag is how late the client sent requests (it kept up while that stays small)."""


def print_table(rows: list[Row], shape: LoadShape) -> None:
    sla = f"TTFT <= {shape.sla.ttft_ms:g} ms, ITL <= {shape.sla.itl_ms:g} ms"
    print(
        f"\nopen-loop Poisson {shape.rate:g} req/s for {shape.seconds:g} s per service; prompt {shape.prompt}, "
        f"output {shape.output}; api {shape.api}; SLA {sla}; rates in req/s, latencies in ms"
    )
    header = (
        f"{'service':<20} {'layout':<38} "
        + " ".join(f"{h:>{w}}" for h, w, _ in COLUMNS)
        + "  spread (servers, DP ranks given requests)"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        f = row.figures
        if f is None:
            print(f"{row.case.name:<20} {row.layout:<38} no load: {row.error}")
            continue
        cells = " ".join(_cell(figure(f), w) for _, w, figure in COLUMNS)
        print(f"{row.case.name:<20} {row.layout:<38} {cells}  {row.spread}")
    for row in rows:
        if row.figures is not None and (row.figures["failures"] or row.error):
            note = f"; {row.error}" if row.error else ""
            print(f"  {row.case.name}: failures {row.figures['failures']}, e.g. {row.figures['errors']}{note}")
    by_name = {row.case.name: row for row in rows}
    for row in rows:
        base = by_name.get(row.case.baseline or "")
        if base is None or base.figures is None or row.figures is None:
            continue
        deltas = []
        for label, metric in (("TTFT p50", "ttft_ms"), ("ITL p50", "itl_ms")):
            new, old = row.figures[metric]["p50"], base.figures[metric]["p50"]
            if new is not None and old:
                deltas.append(f"{label} x{new / old:.2f}")
        deltas.append(f"goodput {row.figures['goodput_rps']} vs {base.figures['goodput_rps']} req/s")
        print(f"  {row.case.name} vs its baseline {base.case.name}: {', '.join(deltas)}")


def print_phases(rows: list[Row], setup: dict[str, float]) -> None:
    print("\nwall time, s: " + ", ".join(f"{k} {v:.1f}" for k, v in setup.items()))
    names = ("apply->Ready", "load", "delete->pods gone")
    print(f"{'service':<20} " + " ".join(f"{n:>17}" for n in names))
    for row in rows:
        print(f"{row.case.name:<20} " + " ".join(_cell(_round(row.phases.get(n)), 17) for n in names))


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def free_port_base(first: int, span: int = 10) -> int:
    """The first base from `first` (in steps of `span`) whose `span` loopback ports are all free."""
    for base in range(first, first + 100 * span, span):
        if all(port_free(port) for port in range(base, base + span)):
            return base
    raise RuntimeError(f"no free range of {span} ports from {first}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    names = [case.name for case in CASES]
    parser.add_argument("--rate", type=float, default=8.0, help="Poisson arrivals per second (default 8)")
    parser.add_argument("--seconds", type=float, default=30.0, help="arrival window per service (default 30)")
    parser.add_argument("--only", nargs="+", choices=names, help="these services only (default: all, in order)")
    parser.add_argument("--prompt-tokens", default="fixed:256", help="length spec (e2e.serving.load.lengths)")
    parser.add_argument("--output-tokens", default="fixed:64", help="length spec (e2e.serving.load.lengths)")
    parser.add_argument("--sla-ttft-ms", type=float, default=1000.0)
    parser.add_argument("--sla-itl-ms", type=float, default=100.0)
    parser.add_argument("--api", choices=APIS, default="completions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=30.0, help="per request, and the drain after the arrivals")
    parser.add_argument("--max-concurrency", type=int, default=256)
    parser.add_argument("--ready-timeout", type=int, default=180, help="seconds from apply to Ready")
    parser.add_argument("--port-base", type=int, default=19679, help="first loopback port range to try")
    args = parser.parse_args()
    shape = LoadShape(
        rate=args.rate,
        seconds=args.seconds,
        prompt=args.prompt_tokens,
        output=args.output_tokens,
        sla=Sla(ttft_ms=args.sla_ttft_ms, itl_ms=args.sla_itl_ms),
        api=args.api,
        seed=args.seed,
        timeout=args.timeout,
        max_concurrency=args.max_concurrency,
    )
    length_model(shape.prompt, shape.output, None)  # a bad length spec fails here, before the cluster starts
    cases = [case for case in CASES if args.only is None or case.name in args.only]

    start = time.monotonic()
    setup: dict[str, float] = {}
    for profile in PROFILES.values():
        ensure_router_venv(profile.router)
    setup["router venvs"] = time.monotonic() - start
    work = Path(tempfile.mkdtemp(prefix="disaggspec-bench-layouts-"))
    local = LocalCluster(work / "cluster")
    t = time.monotonic()
    nodes = NodeShape(count=NODES, second_product_nodes=H100_NODES)
    state = local.up(port_base=free_port_base(args.port_base), nodes=nodes, timeout=180, serving=True)
    cluster = Cluster(state.kubeconfig, local=True)
    print(f"work dir {work}; {NODES} nodes ({H100_NODES} H100); services: {', '.join(c.name for c in cases)}")
    operator: OperatorProcess | None = None
    rows: list[Row] = []
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        wait_for("the CRD to be served", lambda: cluster.kubectl("get", "dss", "-A", check=False).returncode == 0)
        setup["cluster up"] = time.monotonic() - t
        t = time.monotonic()
        operator = OperatorProcess(state.kubeconfig, work / "operator.log").start()
        with pod_runner(state.directory, state.kubeconfig):
            setup["operator + pod runner"] = time.monotonic() - t
            for case in cases:
                row = measure(cluster, case, shape, args.ready_timeout)
                rows.append(row)
                done = ", ".join(f"{k} {v:.1f} s" for k, v in row.phases.items())
                print(f"{case.name}: {done}{'; ' + row.error if row.error else ''}", flush=True)
            t = time.monotonic()
        setup["pod runner stop"] = time.monotonic() - t
    finally:
        t = time.monotonic()
        if operator is not None:
            operator.stop()
        local.down()
        setup["operator stop + cluster down"] = time.monotonic() - t
    setup["total"] = time.monotonic() - start
    print_table(rows, shape)
    print_phases(rows, setup)


if __name__ == "__main__":
    main()
