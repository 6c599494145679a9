"""Reconcile benchmark on the local control plane; prints figures, asserts nothing.

Run: `.venv/bin/python -m e2e.perf.bench_reconcile [--services 100 500] [--latency-samples 20]`.

It starts a private local cluster with enough kwok GPU nodes for the largest run, installs the CRD, starts the real
operator (webhook off: this measures reconcile, not admission) and measures:
  1. apply -> all 9 children present, for one service at a time (p50/p95 over --latency-samples);
  2. time for N services created at once to all report Ready=True (for each N in --services), and what that
     convergence cost per service: reconcile passes (`disaggspec_reconcile_duration_seconds_count`), status writes
     (the operator's PATCHes `disaggspec_api_writes_total{method="PATCH"}` less its child applies
     `disaggspec_child_writes_total{operation="apply"}`, both server-side apply and status merge-patch being PATCH;
     cross-checked with the API server's `PATCH disaggspecservices/status`), child writes, and operator CPU ms;
  3. write requests during a no-op resync of the largest N: the operator is restarted, so it lists and reconciles
     every service again; writes are counted by the operator (`disaggspec_api_writes_total`) and by the API server
     (`apiserver_request_total` for the owned kinds, verbs other than GET/LIST/WATCH), once its passes are done and
     again --restart-settle seconds later, after its first runtime-health measurements (runtime health is on);
  4. the operator's RSS with the largest N converged, and after the restart of step 3;
  5. with --floor, first: the control plane alone, as a floor under figure 2: the same children of the largest N
     services, rendered by the operator's code but applied straight to the API server by this script (16 parallel
     requests, no operator running), and the time until every Deployment is available.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch

from disaggspec import apply, render
from disaggspec.api import parse_service
from disaggspec.config import OperatorConfig
from disaggspec.render.names import deployment_name
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.support.operator_process import OperatorProcess

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "examples" / "llama-3.1-8b-eagle3.yaml"
CRD = REPO / "crds"
NAMESPACE = "bench"
OWNED = ("deployments", "services", "serviceaccounts", "roles", "rolebindings", "disaggspecservices")
WRITE_VERBS = ("POST", "PUT", "PATCH", "APPLY", "DELETE")


def service(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load(TEMPLATE.read_text())
    obj["metadata"] = {"name": name, "namespace": NAMESPACE}
    return obj


def expected_children(name: str) -> list[str]:
    roles = ("prefill", "decode", "router")
    rendered = parse_service(service(name))
    fingerprint = render.fingerprint(rendered)
    return (
        [f"Deployment/{deployment_name(rendered, r, fingerprint)}" for r in roles]
        + [f"Service/{name}-{r}" for r in roles]
        + [f"{kind}/{name}-router" for kind in ("ServiceAccount", "Role", "RoleBinding")]
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def apiserver_requests(cluster: LocalCluster, verbs: tuple[str, ...] = WRITE_VERBS) -> collections.Counter[str]:
    """Requests with these verbs the API server has served to the owned kinds, by `verb resource[/subresource]`."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    total: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
        if labels.get("resource") in OWNED and labels.get("verb") in verbs:
            if labels.get("resource") == "deployments" and labels.get("subresource") == "status":
                continue  # the Deployment controller's own status writes
            key = f"{labels['verb']} {labels['resource']}" + (
                f"/{labels['subresource']}" if labels.get("subresource") else ""
            )
            total[key] += int(float(line.rsplit(" ", 1)[1]))
    return total


def apiserver_writes(cluster: LocalCluster) -> collections.Counter[str]:
    return apiserver_requests(cluster, WRITE_VERBS)


def owned_children(cluster: LocalCluster) -> int:
    kinds = "deployments,services,serviceaccounts,roles,rolebindings"
    names = cluster.kubectl("get", kinds, "-n", NAMESPACE, "-l", "disaggspec.io/service", "-o", "name").stdout
    return len(names.split())


def rss_mib(process: OperatorProcess) -> float:
    assert process.proc is not None
    for line in Path(f"/proc/{process.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class ChildWatch:
    """Watches every owned kind in the namespace and records when each child first appeared (monotonic seconds).

    A watch sees an object the moment the API server commits it; polling with LISTs would add its own delay and
    load the API server being measured.
    """

    def __init__(self, api: k8s.ApiClient) -> None:
        core, apps, rbac = k8s.CoreV1Api(api), k8s.AppsV1Api(api), k8s.RbacAuthorizationV1Api(api)
        self.listers = [
            apps.list_namespaced_deployment,
            core.list_namespaced_service,
            core.list_namespaced_service_account,
            rbac.list_namespaced_role,
            rbac.list_namespaced_role_binding,
        ]
        self.seen: dict[str, float] = {}
        self.stopped = False
        self.lock = threading.Condition()
        self.watches = [k8s_watch.Watch() for _ in self.listers]  # type: ignore[no-untyped-call]

    def start(self) -> ChildWatch:
        for lister, watch in zip(self.listers, self.watches, strict=True):
            threading.Thread(target=self._run, args=(lister, watch), daemon=True).start()
        time.sleep(1)  # let every stream open before the first sample
        return self

    def _run(self, lister: Any, watch: Any) -> None:
        try:
            for event in watch.stream(lister, NAMESPACE, timeout_seconds=3600):
                obj = event["object"]
                key = f"{obj.kind}/{obj.metadata.name}"
                with self.lock:
                    self.seen.setdefault(key, time.monotonic())
                    self.lock.notify_all()
        except Exception:  # stop() closes the stream under the reader; nothing to report then
            if not self.stopped:
                raise

    def wait_all(self, keys: list[str], timeout: float = 30) -> float:
        """The time the last of `keys` appeared."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not all(k in self.seen for k in keys):
                if not self.lock.wait(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"children missing after {timeout}s: {[k for k in keys if k not in self.seen]}")
            return max(self.seen[k] for k in keys)

    def stop(self) -> None:
        self.stopped = True
        for watch in self.watches:
            watch.stop()  # type: ignore[no-untyped-call]


def cpu_seconds(cluster: LocalCluster, operator: OperatorProcess | None) -> dict[str, float]:
    """User + system CPU seconds so far of each control-plane process and of the operator (when running)."""
    pids = dict(cluster.require_state().pids)
    if operator is not None and operator.proc is not None:
        pids["operator"] = operator.proc.pid
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in pids.items():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def print_cpu(cluster: LocalCluster, operator: OperatorProcess | None, before: dict[str, float], t0: float) -> None:
    used = {k: v - before.get(k, 0.0) for k, v in cpu_seconds(cluster, operator).items()}
    print(
        "  CPU seconds meanwhile: "
        + ", ".join(f"{k} {v:.0f}" for k, v in sorted(used.items(), key=lambda kv: -kv[1]))
        + f" (total {sum(used.values()):.0f}; wall {time.monotonic() - t0:.0f} s x {os.cpu_count()} cores)"
    )


def convergence_counters(cluster: LocalCluster, operator: OperatorProcess) -> dict[str, float]:
    """The operator's counters the per-service convergence figures are computed from, and the API server's count of
    status writes to DisaggSpecServices."""
    return {
        "passes": operator.metric_total("disaggspec_reconcile_duration_seconds_count"),
        "patches": operator.metric("disaggspec_api_writes_total", method="PATCH"),
        "applies": operator.metric("disaggspec_child_writes_total", operation="apply"),
        "child_writes": operator.metric_total("disaggspec_child_writes_total"),
        "apiserver_status": float(apiserver_writes(cluster).get("PATCH disaggspecservices/status", 0)),
    }


def print_convergence_cost(
    cluster: LocalCluster,
    operator: OperatorProcess,
    count: int,
    before: dict[str, float],
    cpu_before: dict[str, float],
) -> None:
    """Figure 2's cost per service: passes, status writes, child writes and operator CPU since `before`."""
    after = convergence_counters(cluster, operator)
    delta = {k: after[k] - before[k] for k in after}
    status_writes = delta["patches"] - delta["applies"]
    cpu = cpu_seconds(cluster, operator)["operator"] - cpu_before.get("operator", 0.0)
    print(
        f"  per service: {delta['passes'] / count:.2f} reconcile passes, {status_writes / count:.2f} status writes "
        f"(API server: {delta['apiserver_status'] / count:.2f}), {delta['child_writes'] / count:.2f} child writes, "
        f"operator CPU {1000 * cpu / count:.0f} ms"
    )


def control_plane_floor(cluster: LocalCluster, api: apply.Client, count: int) -> None:
    """Figure 5: the children of `count` services applied with no operator, until every Deployment is available."""
    namespace = "floor"
    cluster.kubectl("create", "namespace", namespace)
    manifests = []
    for i in range(count):
        obj = service(f"f-{i}")
        obj["metadata"].update(namespace=namespace, uid=f"00000000-0000-0000-0000-{i:012d}")
        manifests += render.render(parse_service(obj), OperatorConfig())
    before = cpu_seconds(cluster, None)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        list(pool.map(api.apply, manifests))
    applied = time.monotonic() - t0
    want = 3 * count
    while True:
        out = cluster.kubectl(
            "get",
            "deployments",
            "-n",
            namespace,
            "-o",
            "jsonpath={range .items[*]}{.status.availableReplicas}{'\\n'}{end}",
        ).stdout
        available = sum(1 for line in out.splitlines() if line.strip() == "1")
        if available >= want or time.monotonic() - t0 > 900:
            break
        time.sleep(1)
    print(
        f"control plane alone ({len(manifests)} children of {count} services applied by this script, no operator): "
        f"{available}/{want} Deployments available {time.monotonic() - t0:.1f} s after the first apply "
        f"(applying took {applied:.1f} s)"
    )
    print_cpu(cluster, None, before, t0)
    cluster.kubectl("delete", "namespace", namespace, "--wait=true", "--timeout=900s")


def unmeasured(cluster: LocalCluster) -> int:
    """Services whose SpecDecodeHealthy or TransferHealthy is absent or NotMeasured."""
    items = json.loads(cluster.kubectl("get", "dss", "-n", NAMESPACE, "-o", "json").stdout)["items"]
    return sum(
        1
        for item in items
        if sum(
            1
            for cond in item.get("status", {}).get("conditions", [])
            if cond["type"] in ("SpecDecodeHealthy", "TransferHealthy") and cond.get("reason") != "NotMeasured"
        )
        < 2
    )


def ready_count(cluster: LocalCluster, prefix: str) -> int:
    out = cluster.kubectl(
        "get",
        "dss",
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.status.conditions[?(@.type=='Ready')].status}{'\\n'}{end}",
    ).stdout
    return sum(1 for line in out.splitlines() if line.startswith(prefix) and line.endswith(" True"))


def create_many(cluster: LocalCluster, names: list[str]) -> None:
    # Batches of 50 per kubectl call keep process start-up out of the measurement as far as possible.
    batches = [names[i : i + 50] for i in range(0, len(names), 50)]

    def create(batch: list[str]) -> None:
        cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all([service(n) for n in batch]))

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(create, batches))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, nargs="+", default=[100, 500])
    parser.add_argument("--latency-samples", type=int, default=20)
    parser.add_argument("--port-base", type=int, default=19479, help="first of the private cluster's 6 ports")
    parser.add_argument(
        "--floor", action="store_true", help="first measure the control plane alone with the largest N (figure 5)"
    )
    parser.add_argument(
        "--restart-settle",
        type=float,
        default=60.0,
        help="after the restart's passes, also count the writes this many seconds later (its first health rounds)",
    )
    args = parser.parse_args()
    largest = max(args.services)
    # 2 GPUs per service (prefill + decode, tp 1); 8 per node; 110 pods per node.
    nodes = max(4, -(-2 * largest // 8) + 2, -(-3 * largest // 100) + 2)
    work = Path(tempfile.mkdtemp(prefix="disaggspec-bench-"))
    cluster = LocalCluster(work / "cluster")
    started = time.monotonic()
    cluster.up(port_base=args.port_base, nodes=NodeShape(count=nodes), timeout=180)
    print(f"cluster: {nodes} kwok GPU nodes, up in {time.monotonic() - started:.1f}s")
    operator: OperatorProcess | None = None
    try:
        cluster.kubectl("apply", "--server-side", "-f", str(CRD))
        time.sleep(2)
        cluster.kubectl("create", "namespace", NAMESPACE)
        state = cluster.require_state()
        raw = k8s_config.new_client_from_config(config_file=str(state.kubeconfig))  # type: ignore[no-untyped-call]
        api = apply.Client(raw)
        if args.floor:
            control_plane_floor(cluster, api, largest)
        operator = OperatorProcess(state.kubeconfig, work / "operator.log", webhook=False).start()

        collection = apply.DSS_RESOURCE.collection(NAMESPACE)
        watcher = ChildWatch(raw).start()
        latencies = []
        for i in range(args.latency_samples):
            name = f"lat-{i}"
            t0 = time.monotonic()
            api.request("POST", collection, body=service(name))
            latencies.append((watcher.wait_all(expected_children(name)) - t0) * 1000)
            time.sleep(0.5)  # one service at a time: let the previous one's rollout events settle
        watcher.stop()
        print(
            f"apply -> all children applied (one service; create request sent to the 9th child seen by a watch): "
            f"p50 {statistics.median(latencies):.0f} ms, p95 {percentile(latencies, 0.95):.0f} ms "
            f"over {len(latencies)} samples"
        )
        passes = operator.passes()
        if passes:
            mean = 1000 * operator.metric_total("disaggspec_reconcile_duration_seconds_sum") / passes
            print(f"  reconcile passes so far: {passes}, mean pass {mean:.0f} ms")
        cluster.kubectl("delete", "dss", "--all", "-n", NAMESPACE, "--wait=true")

        for count in sorted(args.services):
            prefix = f"s{count}-"
            names = [f"{prefix}{i}" for i in range(count)]
            cpu_before = cpu_seconds(cluster, operator)
            cost_before = convergence_counters(cluster, operator)
            t0 = time.monotonic()
            create_many(cluster, names)
            created = time.monotonic() - t0
            while ready_count(cluster, prefix) < count:
                if time.monotonic() - t0 > 900:
                    print(f"{count} services: only {ready_count(cluster, prefix)} Ready after 900 s")
                    break
                time.sleep(1)
            print(
                f"{count} services: all Ready {time.monotonic() - t0:.1f} s after the first create "
                f"(creating took {created:.1f} s)"
            )
            print_cpu(cluster, operator, cpu_before, t0)
            print_convergence_cost(cluster, operator, count, cost_before, cpu_before)
            if count != largest:
                cluster.kubectl("delete", "dss", "--all", "-n", NAMESPACE, "--wait=true", "--timeout=600s")
                time.sleep(5)

        print(f"operator RSS with {largest} services converged: {rss_mib(operator):.0f} MiB")
        # Converged includes runtime health: every service has its first verdicts in status (a late first verdict
        # would be a legitimate write of the old operator's, not the restart's).
        started = time.monotonic()
        while time.monotonic() - started < 180 and unmeasured(cluster) > 0:
            time.sleep(2)
        print(f"  runtime health measured on every service {time.monotonic() - started:.0f} s later")
        time.sleep(5)
        operator.stop()
        # The garbage collector may still be deleting the children of services deleted earlier: wait until only
        # the converged services' children are left, so the baseline counts nobody's writes but the operator's.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and owned_children(cluster) != 9 * largest:
            time.sleep(1)
        before_api = apiserver_writes(cluster)
        before_reads = apiserver_requests(cluster, ("GET",))
        started = time.monotonic()
        operator = OperatorProcess(state.kubeconfig, work / "operator-resync.log", webhook=False).start()
        # The restarted operator lists every service and reconciles each once; wait until that has settled.
        deadline = time.monotonic() + 300
        passes = 0
        peak = 0.0
        while time.monotonic() < deadline:
            peak = max(peak, rss_mib(operator))
            passes = operator.passes()
            if passes >= largest:
                break
            time.sleep(0.5)
        print(f"restart: the new operator had made {passes} passes {time.monotonic() - started:.1f} s after it started")
        time.sleep(5)
        writes = apiserver_writes(cluster) - before_api
        reads = apiserver_requests(cluster, ("GET",)) - before_reads
        print(
            f"no-op resync of {largest} services ({passes} passes): operator writes {operator.writes()}, "
            f"API server writes to owned kinds {sum(writes.values())} {dict(writes)}; GETs {dict(reads)}"
        )
        if args.restart_settle > 0:
            # The new leader's first runtime-health rounds come later than its first passes (every ready pod is
            # scraped; kwok pods never answer): count what they write too (issue 29: nothing).
            time.sleep(args.restart_settle)
            writes = apiserver_writes(cluster) - before_api
            print(
                f"  {args.restart_settle:g} s later (after its first runtime-health rounds): operator writes "
                f"{operator.writes()}, API server writes to owned kinds {sum(writes.values())} {dict(writes)}"
            )
        print(f"operator RSS during the restart: peak {peak:.0f} MiB")
        print(f"operator RSS after the resync: {rss_mib(operator):.0f} MiB")
        print(json.dumps({"log": str(work / "operator.log")}))
    finally:
        if operator is not None:
            operator.stop()
        cluster.down(quiet=True)


if __name__ == "__main__":
    main()
