"""Rollout benchmark on the serving simulation: a change of the pair under traffic; prints figures, asserts nothing.

Run: `.venv/bin/python -m e2e.perf.bench_rollout [--replicas 4] [--load-seconds 60] [--baseline-source DIR]`.

For each operator measured (this tree's; with --baseline-source also the operator package in DIR, e.g. the
`operator/` of a `git worktree` of an older commit, for the behaviour before coordinated rollouts) it starts a private
local cluster in serving mode, the operator and the pod runner, applies the EAGLE3 example with --replicas prefill and
--replicas decode pods (one GPU each) whose emulated model load takes --load-seconds, waits for Ready, then sends
continuous traffic through the router Service (balanced as kube-proxy would, `e2e.serving.servicetraffic`) and
bumps the SGLang image. It reports:
  - rollout time: from the apply to the moment every pool pod left runs the new spec, all ready, and the service is
    Ready for the new generation;
  - failed requests (and the errors), out of all sent;
  - the minimum of ready prefill and of ready decode pods, sampled every 200 ms, and of *routable* ones: ready pods of
    a spec fingerprint that a ready router pairs (a ready pod no router sends to serves nothing);
  - peak extra GPUs: the most GPUs held at once by the service's pool pods (terminating pods hold theirs too) beyond
    the 2 x --replicas the spec asks for.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import yaml

from disaggspec.sglang.profiles import PROFILES
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.serving.continuous import continuous
from e2e.serving.kubeapi import KubeApi
from e2e.serving.routers import ensure_router_venv
from e2e.serving.servicetraffic import pod_ready
from e2e.serving.traffic import Load
from e2e.support.kube import Cluster
from e2e.support.operator_process import OperatorProcess
from e2e.support.rollout import capacity_sampler, router_service_target
from e2e.support.serving import pod_runner, served_model
from e2e.support.workloads import example, load

NAMESPACE = "bench"
REPO = Path(__file__).resolve().parents[2]
POOL_ROLES = ("prefill", "decode")
SIGNATURE = "disaggspec.io/spec-fingerprint"


def routable(pods: list[dict[str, Any]]) -> dict[str, int]:
    """Per pool, the ready pods a ready router can send requests to: those of a spec fingerprint some ready router
    pod selects (router pods carry the fingerprint they pair). Ready pods of another fingerprint idle."""
    routed = {
        p["metadata"]["labels"].get(SIGNATURE)
        for p in pods
        if p["metadata"]["labels"].get("disaggspec.io/role") == "router" and pod_ready(p)
    }
    return {
        role: sum(
            1
            for p in pods
            if p["metadata"]["labels"].get("disaggspec.io/role") == role
            and pod_ready(p)
            and p["metadata"]["labels"].get(SIGNATURE) in routed
        )
        for role in POOL_ROLES
    }


class PodPoller:
    """A thread that lists the service's pods (narrowed by `selector`) every `interval` seconds and hands each
    listing to `sample`; a failed listing is a missing sample, not a reason to stop."""

    interval = 0.2
    selector = ""

    def __init__(self, api: KubeApi, name: str) -> None:
        self.api = api
        self.name = name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self, pods: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        selector = ",".join(filter(None, [f"disaggspec.io/service={self.name}", self.selector]))
        while not self._stop.wait(self.interval):
            try:
                pods = self.api.request(
                    "GET", f"/api/v1/namespaces/{NAMESPACE}/pods", query={"labelSelector": selector}
                )["items"]
            except Exception:  # a failed listing is a missing sample
                continue
            self.sample(pods)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    @contextmanager
    def running(self) -> Iterator[Self]:
        self.start()
        try:
            yield self
        finally:
            self.stop()


class PodSampler(PodPoller):
    """Every 200 ms: GPUs held by the service's pool pods bound to a node (terminating ones included), and the
    routable pods per pool (`routable`)."""

    def __init__(self, api: KubeApi, name: str) -> None:
        super().__init__(api, name)
        self.peak = 0
        self.min_routable = {role: 10**6 for role in POOL_ROLES}

    def sample(self, pods: list[dict[str, Any]]) -> None:
        held = sum(
            int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
            for pod in pods
            if pod["spec"].get("nodeName") and pod.get("status", {}).get("phase") in ("Pending", "Running")
            for c in pod["spec"]["containers"]
        )
        self.peak = max(self.peak, held)
        for role, count in routable(pods).items():
            self.min_routable[role] = min(self.min_routable[role], count)


def _service(replicas: int, load_seconds: float) -> dict[str, Any]:
    obj = load(example("llama"))
    obj["metadata"]["namespace"] = NAMESPACE
    for role in POOL_ROLES:
        obj["spec"][role]["replicas"] = replicas
        obj["spec"][role]["podAnnotations"] = {"emulator.disaggspec.io/load-seconds": str(load_seconds)}
        obj["spec"][role]["lifecycle"] = {"drainSeconds": 30}
    return obj


def _rolled_out(cluster: Cluster, obj: dict[str, Any], old: str) -> bool:
    """Ready for the latest generation, and every pool pod left runs the new spec and is ready."""
    name = obj["metadata"]["name"]
    live = json.loads(cluster.kubectl("get", "dss", name, "-n", NAMESPACE, "-o", "json").stdout)
    status = live.get("status") or {}
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
    if not ready or status.get("observedGeneration") != live["metadata"]["generation"]:
        return False
    fingerprint = status.get("specFingerprint")
    if fingerprint in (None, old):
        return False
    pods = json.loads(
        cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"disaggspec.io/service={name}", "-o", "json").stdout
    )["items"]
    pool = [p for p in pods if p["metadata"]["labels"].get("disaggspec.io/role") in POOL_ROLES]
    return all(
        p["metadata"]["labels"].get("disaggspec.io/spec-fingerprint") == fingerprint
        and not p["metadata"].get("deletionTimestamp")
        for p in pool
    ) and len(pool) == 2 * int(obj["spec"]["prefill"]["replicas"])


def measure(label: str, source: str | None, args: argparse.Namespace, port_base: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"disaggspec-bench-rollout-{label}-"))
    local = LocalCluster(work / "cluster")
    state = local.up(port_base=port_base, nodes=NodeShape(count=4), timeout=180, serving=True)
    cluster = Cluster(state.kubeconfig, local=True)
    saved = os.environ.get("DISAGGSPEC_OPERATOR_SOURCE")
    operator: OperatorProcess | None = None
    try:
        # The operator's own CRD: an older operator refuses fields a newer CRD defaults.
        crds = REPO / "crds" if source is None else Path(source).parent / "crds"
        cluster.kubectl("apply", "--server-side", "-f", str(crds))
        cluster.wait_for("CRD established", lambda: cluster.kubectl("get", "dss", "-A", check=False).returncode == 0)
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl("create", "secret", "generic", "hf-token", "-n", NAMESPACE, "--from-literal=token=emulated")
        if source is not None:
            os.environ["DISAGGSPEC_OPERATOR_SOURCE"] = source
        operator = OperatorProcess(state.kubeconfig, work / "operator.log", webhook=False).start()
        obj = _service(args.replicas, args.load_seconds)
        name = obj["metadata"]["name"]
        with pod_runner(state.directory, state.kubeconfig):
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
            cluster.kubectl(
                "wait",
                "-n",
                NAMESPACE,
                "--for=condition=Ready",
                f"dss/{name}",
                f"--timeout={args.timeout}s",
                timeout=args.timeout + 30,
            )
            live = json.loads(cluster.kubectl("get", "dss", name, "-n", NAMESPACE, "-o", "json").stdout)
            old = str(live["status"]["specFingerprint"])
            api = KubeApi(state.kubeconfig)
            bumped = copy.deepcopy(obj)
            bumped["spec"]["sglang"]["image"] += "-bumped"
            traffic_load = Load(
                url="", model=served_model(obj), streams=args.streams, requests=10**6, duration=args.timeout
            )
            gpus = PodSampler(api, name)
            with (
                capacity_sampler(api, NAMESPACE, name) as sampler,
                gpus.running(),
                continuous(traffic_load, router_service_target(api, NAMESPACE, obj)) as traffic,
            ):
                time.sleep(2)
                t0 = time.monotonic()
                cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(bumped))
                cluster.wait_for(
                    "rolled out", lambda: _rolled_out(cluster, obj, old), timeout=args.timeout, interval=0.5
                )
                elapsed = time.monotonic() - t0
                time.sleep(2)
                report = traffic.stop()
        summary = report.summary()
        return {
            "operator": label,
            "rollout_s": round(elapsed, 1),
            "requests": summary["requests"],
            "failed": summary["failures"],
            "errors": summary["errors"],
            "min_ready_prefill": sampler.minimum("prefill"),
            "min_ready_decode": sampler.minimum("decode"),
            "min_routable_prefill": gpus.min_routable["prefill"],
            "min_routable_decode": gpus.min_routable["decode"],
            "peak_extra_gpus": gpus.peak - 2 * args.replicas,
        }
    finally:
        if saved is None:
            os.environ.pop("DISAGGSPEC_OPERATOR_SOURCE", None)
        else:
            os.environ["DISAGGSPEC_OPERATOR_SOURCE"] = saved
        if operator is not None:
            operator.stop()
        local.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=4, help="prefill and decode pods each")
    parser.add_argument("--load-seconds", type=float, default=60.0, help="emulated model load of every pool pod")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1800.0, help="bound of every wait and of the traffic")
    parser.add_argument(
        "--baseline-source",
        help="operator package directory (`operator/` of another checkout, whose `crds/` is installed for it) of the "
        "behaviour to compare with",
    )
    parser.add_argument("--only-baseline", action="store_true", help="measure the baseline alone")
    parser.add_argument("--port-base", type=int, default=19679)
    args = parser.parse_args()
    for profile in PROFILES.values():
        ensure_router_venv(profile.router)
    runs: list[tuple[str, str | None]] = [] if args.only_baseline else [("revisions", None)]
    if args.baseline_source:
        runs.append(("baseline", str(Path(args.baseline_source).resolve())))
    print(
        f"{args.replicas} prefill + {args.replicas} decode, {args.load_seconds:g} s model loads, "
        f"{args.streams} streams through the router Service, image bump"
    )
    for index, (label, source) in enumerate(runs):
        result = measure(label, source, args, args.port_base + 100 * index)
        print(json.dumps(result))


if __name__ == "__main__":
    main()
