"""Rollout or scale-down under open-loop load (issue 32's acceptance benchmark): goodput per 10 s window through it.

Run: `.venv/bin/python -m e2e.perf.bench_rollout_load --out /tmp/rollout-load [--baseline-source DIR] [--quick]`.

For each operator (this tree's; with --baseline-source also the operator package in DIR, e.g. the `operator/` of a
`git worktree` of the commit before router pods followed capacity, passed as `DISAGGSPEC_OPERATOR_SOURCE` like
`e2e.perf.bench_rollout`) and each load level (--fractions of the service's capacity) it starts a private serving-mode
cluster, applies the EAGLE3 example with --replicas prefill and decode pods annotated with the emulator's time scale
and a model load of --load-seconds, predicts the service's capacity from the servers' own capacity model
(`e2e.perf.bench_capacity.predict`: min(P x prefill, D x decode), which the measured capacity matched at 1:1, see
docs/performance.md), and sends open-loop Poisson load at that fraction through the router Service
(`e2e.serving.load`, emulated time). After --baseline emulated seconds it bumps the SGLang image and keeps the load
running until the rollout is complete plus --tail seconds. It reports per run: goodput (requests meeting the SLA,
MLPerf Llama Server TTFT 2000 ms / TPOT 100 ms) per 10 s window, its minimum from the rollout on over the baseline
mean; TTFT p99 of first tokens during the rollout; failed requests; cross-revision pairings (the emulator's oracle:
in the client's errors and in the pod logs, since the router may retry a refused request); the rollout duration;
ready router pods per revision over time. It prints one table, writes rollout-load.json and rollout-load.png
(goodput per window, one line per operator x load, rollout start and end marked) under --out, and with --write-docs
the table into docs/performance.md between `<!-- rollout-load:begin -->` and `<!-- rollout-load:end -->`. Prints
figures, asserts nothing.

`--change scale-down` scales both pools from --replicas to one pod fewer instead of bumping the image, waits until the
removed pods are gone (their preStop and drain over), and also reports the removed pods' preStop lines (the drain wait
of `images/sglang/drain_wait.py`; none with an operator before it, whose preStop was a plain pause); the files are
scale-down-load.json/png and the docs block `<!-- scale-down-load:begin -->` ... `:end -->`.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import os
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

import yaml

from disaggspec import constants as c
from disaggspec.sglang.profiles import PROFILES
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.perf.bench_capacity import TIME_SCALE_KEY, Ratio, lag_and_busy, predict, servers
from e2e.perf.bench_layouts import free_port_base
from e2e.perf.bench_rollout import NAMESPACE, POOL_ROLES, PodPoller, _rolled_out
from e2e.serving.emulator.revision import MARKER
from e2e.serving.kubeapi import KubeApi
from e2e.serving.launch import EMULATOR_ANNOTATION_PREFIX
from e2e.serving.load.arrivals import Constant, poisson_arrivals
from e2e.serving.load.client import Bounds, RunReport, plan, run
from e2e.serving.load.lengths import length_model
from e2e.serving.load.sla import Sla, percentile, summary, timeline
from e2e.serving.routers import ensure_router_venv
from e2e.serving.servicetraffic import pod_ready
from e2e.support.kube import Cluster, wait_for
from e2e.support.operator_process import OperatorProcess
from e2e.support.rollout import oracle_refusals, router_service_target
from e2e.support.serving import pod_runner, served_model
from e2e.support.workloads import example, load

REPO: Final = Path(__file__).resolve().parents[2]
DOCS: Final = REPO / "docs" / "performance.md"
CHANGES: Final = ("image", "scale-down")
"""What happens under the load: an image change (a rollout), or both pools scaled from --replicas to one pod fewer."""
MARKERS: Final = {change: (f"<!-- {name}:begin -->", f"<!-- {name}:end -->") for change, name in
                  (("image", "rollout-load"), ("scale-down", "scale-down-load"))}  # fmt: skip
PRESTOP_MARK: Final = "[disaggspec preStop]"
LOAD_SECONDS_KEY: Final = EMULATOR_ANNOTATION_PREFIX + "load-seconds"
WINDOW: Final = 10
"""Goodput window, emulated seconds."""
SLA: Final = Sla(ttft_ms=2000, itl_ms=100)
"""MLPerf Inference llama3_1-8b Server constraints, as e2e.perf.bench_capacity."""


def build(replicas: int, scale: float, load_seconds: float) -> dict[str, Any]:
    """The EAGLE3 example with `replicas` pods per pool, time-scaled, with a short emulated model load."""
    obj = load(example("llama"))
    obj["metadata"]["namespace"] = NAMESPACE
    for role in POOL_ROLES:
        spec = obj["spec"][role]
        spec["replicas"] = replicas
        spec["podAnnotations"] = {
            **(spec.get("podAnnotations") or {}),
            TIME_SCALE_KEY: f"{scale:g}",
            LOAD_SECONDS_KEY: f"{load_seconds:g}",
        }
        spec["lifecycle"] = {"drainSeconds": 30}
    return obj


class RouterSampler(PodPoller):
    """Every second: ready router pods per spec fingerprint (revision), as (wall time, {fingerprint: count})."""

    interval = 1.0
    selector = f"{c.LABEL_ROLE}=router"

    def __init__(self, api: KubeApi, name: str) -> None:
        super().__init__(api, name)
        self.samples: list[tuple[float, dict[str, int]]] = []

    def sample(self, pods: list[dict[str, Any]]) -> None:
        counts = Counter(
            str(p["metadata"]["labels"].get(c.LABEL_FINGERPRINT, "?"))
            for p in pods
            if pod_ready(p) and not p["metadata"].get("deletionTimestamp")
        )
        self.samples.append((time.time(), dict(counts)))


def pool_pods(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    """The service's prefill and decode pods, terminating ones included."""
    pods = json.loads(
        cluster.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"{c.LABEL_SERVICE}={name}", "-o", "json").stdout
    )["items"]
    return [p for p in pods if p["metadata"]["labels"].get(c.LABEL_ROLE) in POOL_ROLES]


def change(cluster: Cluster, obj: dict[str, Any], old: str, args: argparse.Namespace) -> None:
    """Apply `args.change` to the running service and wait until it is over: for an image change every pool pod left
    runs the new spec and is ready; for a scale-down each pool has one pod fewer, the removed ones gone (their
    preStop and drain over)."""
    changed = copy.deepcopy(obj)
    if args.change == "image":
        changed["spec"]["sglang"]["image"] += "-bumped"
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(changed))
        wait_for("rolled out", lambda: _rolled_out(cluster, obj, old), args.timeout, 0.5)
        return
    target = args.replicas - 1
    for role in POOL_ROLES:
        changed["spec"][role]["replicas"] = target
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(changed))
    name = str(obj["metadata"]["name"])

    def scaled() -> bool:
        pods = pool_pods(cluster, name)
        return all(
            len(mine) == target and all(pod_ready(p) for p in mine)
            for mine in ([p for p in pods if p["metadata"]["labels"][c.LABEL_ROLE] == r] for r in POOL_ROLES)
        )

    wait_for("scaled down", scaled, args.timeout, 0.5)


def windows(report: RunReport) -> list[dict[str, float]]:
    """Goodput (requests meeting the SLA per emulated second, by completion) and offered rate per WINDOW seconds."""
    rows = timeline(report, SLA)
    out = []
    for start in range(0, len(rows) - WINDOW + 1, WINDOW):
        chunk = rows[start : start + WINDOW]
        out.append(
            {
                "start_s": float(start),
                "goodput_rps": sum(r["met_sla"] for r in chunk) / WINDOW,
                "offered_rps": sum(r["offered"] for r in chunk) / WINDOW,
                "failed": float(sum(r["failed"] for r in chunk)),
            }
        )
    return out


def figures(report: RunReport, rollout: tuple[float, float], stopped: float, refusals: list[str]) -> dict[str, Any]:
    """The run's figures: windows fully before the rollout are the baseline (the first skipped: warm-up); windows
    from the one holding the rollout's start to the last complete one before the load stopped are judged."""
    begin, end = rollout
    # The requests left unsent when the load was stopped are no failures, and the offered window ends there.
    sent = [r for r in report.results if r.kind != "stopped"]
    report = dataclasses.replace(report, results=sent, window=min(report.window, stopped))
    rows = windows(report)
    base = [w for w in rows if w["start_s"] >= WINDOW and w["start_s"] + WINDOW <= begin]
    judged = [w for w in rows if w["start_s"] + WINDOW > begin and w["start_s"] + WINDOW <= stopped]
    base_mean = sum(w["goodput_rps"] for w in base) / len(base) if base else 0.0
    low = min(judged, key=lambda w: w["goodput_rps"]) if judged else None
    during = [
        r.ttft
        for r in report.results
        if r.ok and r.ttft is not None and r.first_token_at is not None and begin <= r.first_token_at <= end
    ]
    p99 = percentile(during, 0.99)
    crossed = [r for r in report.results if MARKER in r.error]
    whole = summary(report, SLA)
    return {
        "requests": whole["requests"],
        "failures": whole["failures"],
        "errors": whole["errors"],
        "baseline_goodput_rps": round(base_mean, 2),
        "min_window_goodput_rps": None if low is None else round(low["goodput_rps"], 2),
        "min_window_start_s": None if low is None else low["start_s"],
        "min_over_baseline": None if low is None or not base_mean else round(low["goodput_rps"] / base_mean, 3),
        "ttft_p99_rollout_ms": None if p99 is None else round(1000 * p99, 1),
        "cross_revision_client": len(crossed),
        "cross_revision_logs": len(refusals),
        "rollout_emulated_s": (round(begin, 1), round(end, 1)),
        "load_stopped_s": round(stopped, 1),
        "windows": rows,
    }


def measure(
    label: str, source: str | None, fraction: float, args: argparse.Namespace, port_base: int
) -> dict[str, Any]:
    """One operator at one load level on a private cluster; the figures (see the module docstring)."""
    work = Path(tempfile.mkdtemp(prefix=f"disaggspec-bench-rollout-load-{label}-"))
    local = LocalCluster(work / "cluster")
    state = local.up(port_base=free_port_base(port_base), nodes=NodeShape(count=4), timeout=180, serving=True)
    cluster = Cluster(state.kubeconfig, local=True)
    saved = os.environ.get("DISAGGSPEC_OPERATOR_SOURCE")
    operator: OperatorProcess | None = None
    scale = args.time_scale
    try:
        # The operator's own CRD, as e2e.perf.bench_rollout: an older operator refuses fields a newer CRD defaults.
        crds = REPO / "crds" if source is None else Path(source).parent / "crds"
        cluster.kubectl("apply", "--server-side", "-f", str(crds))
        wait_for("the CRD to be served", lambda: cluster.kubectl("get", "dss", "-A", check=False).returncode == 0)
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl("create", "secret", "generic", "hf-token", "-n", NAMESPACE, "--from-literal=token=emulated")
        if source is not None:
            os.environ["DISAGGSPEC_OPERATOR_SOURCE"] = source
        operator = OperatorProcess(state.kubeconfig, work / "operator.log", webhook=False).start()
        obj = build(args.replicas, scale, args.load_seconds)
        name = str(obj["metadata"]["name"])
        with pod_runner(state.directory, state.kubeconfig) as logs:
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
            cluster.kubectl(
                "wait", "-n", NAMESPACE, "--for=condition=Ready", f"dss/{name}", f"--timeout={args.timeout:.0f}s",
                timeout=args.timeout + 30,
            )  # fmt: skip
            wait_for(
                "every pool server Ready",
                lambda: all(len(servers(cluster, NAMESPACE, name, r)) == args.replicas for r in POOL_ROLES),
                args.timeout,
                0.5,
            )
            pools = {role: servers(cluster, NAMESPACE, name, role) for role in POOL_ROLES}
            prediction = predict(pools, Ratio(args.replicas, args.replicas), args.prompt_tokens, args.output_tokens)
            rate = fraction * prediction.system_rps
            live = json.loads(cluster.kubectl("get", "dss", name, "-n", NAMESPACE, "-o", "json").stdout)
            old = str(live["status"]["specFingerprint"])
            api = KubeApi(state.kubeconfig)
            horizon = args.baseline + args.timeout / scale  # emulated: the baseline plus the rollout's bound
            requests = plan(
                poisson_arrivals(Constant(rate, horizon), args.seed, int(rate * horizon * 2) + 20),
                length_model(f"fixed:{args.prompt_tokens}", f"fixed:{args.output_tokens}", None),
                args.seed,
            )
            bounds = Bounds(
                max_requests=len(requests), max_concurrency=4096, duration=horizon, timeout=60.0, drain=60.0
            )
            stop = threading.Event()
            box: dict[str, RunReport] = {}

            def drive() -> None:
                box["report"] = asyncio.run(
                    run(
                        requests, router_service_target(api, NAMESPACE, obj), model=served_model(obj),
                        bounds=bounds, seed=args.seed, stop=stop, time_scale=scale,
                    )
                )  # fmt: skip

            print(
                f"  {label} x{fraction:g}: predicted {prediction.system_rps:.1f} req/s ({prediction.bound}-bound), "
                f"offering {rate:.1f} req/s emulated at time scale {scale:g}",
                flush=True,
            )
            routers = RouterSampler(api, name).start()
            loader = threading.Thread(target=drive, daemon=True)
            t0 = time.monotonic()
            loader.start()
            try:
                time.sleep(args.baseline * scale)
                # the old pods' loops under the baseline load (they are gone after the rollout)
                lag0, busy0 = lag_and_busy([p for role in POOL_ROLES for p in pools[role]])
                begin = (time.monotonic() - t0) / scale
                change(cluster, obj, old, args)
                end = (time.monotonic() - t0) / scale
                print(f"  {args.change} done in {end - begin:.0f} emulated s ({(end - begin) * scale:.0f} wall s)")
                time.sleep(args.tail * scale)
            finally:
                stopped = (time.monotonic() - t0) / scale
                stop.set()
                loader.join(timeout=120 * scale + 60)
                routers.stop()
            now = {role: servers(cluster, NAMESPACE, name, role) for role in POOL_ROLES}
            lag1, busy1 = lag_and_busy([p for role in POOL_ROLES for p in now[role]])
            refusals = oracle_refusals(logs)
            prestop = sorted(
                line
                for path in logs.glob(f"{NAMESPACE}_{name}-*.log")
                for line in path.read_text(errors="replace").splitlines()
                if line.startswith(PRESTOP_MARK)
            )
        if "report" not in box:
            raise RuntimeError("the load generator did not finish")
        result = figures(box["report"], (begin, end), stopped, refusals)
        wall0 = time.time() - (time.monotonic() - t0)
        return {
            "operator": label,
            "fraction": fraction,
            "time_scale": scale,
            "predicted_rps": round(prediction.system_rps, 2),
            "offered_rps": round(rate, 2),
            # pods before the rollout (their loops until now) and the new ones: lag over busy, wall-clock
            "lag_share_before": round(lag0 / busy0, 4) if busy0 else None,
            "lag_share_new_pods": round(lag1 / busy1, 4) if busy1 else None,
            "routers": [((at - wall0) / scale, counts) for at, counts in routers.samples],
            "change": args.change,
            "prestop_reports": prestop,
            **result,
        }
    finally:
        if saved is None:
            os.environ.pop("DISAGGSPEC_OPERATOR_SOURCE", None)
        else:
            os.environ["DISAGGSPEC_OPERATOR_SOURCE"] = saved
        if operator is not None:
            operator.stop()
        local.down()


HEAD: Final = (
    "| operator | load | offered req/s | baseline goodput req/s | min 10 s goodput / baseline | TTFT p99 during the "
    "change ms (SLA 2000) | failed / requests | cross-revision (client, logs) | change s | max routers | time scale |"
)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [HEAD, "|" + " --- |" * HEAD.count(" | ") + " --- |"]
    for r in rows:
        begin, end = r["rollout_emulated_s"]
        most = max((sum(counts.values()) for _, counts in r["routers"]), default=0)
        lines.append(
            f"| {r['operator']} | {r['fraction']:.0%} | {r['offered_rps']:g} | {r['baseline_goodput_rps']:g} "
            f"| {r['min_over_baseline']} | {r['ttft_p99_rollout_ms']} | {r['requests']['failed']} / "
            f"{r['requests']['scheduled']} | {r['cross_revision_client']}, {r['cross_revision_logs']} "
            f"| {end - begin:.0f} | {most} | {r['time_scale']:g} |"
        )
    return "\n".join(lines)


def plot_runs(rows: list[dict[str, Any]], path: Path) -> None:
    """Goodput per window over emulated time, one line per operator x load; rollout start (dashed) and end (dotted)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(10, 5), constrained_layout=True)
    for i, r in enumerate(rows):
        color = f"C{i}"
        xs = [w["start_s"] + WINDOW / 2 for w in r["windows"]]
        axis.plot(xs, [w["goodput_rps"] for w in r["windows"]], "o-", color=color,
                  label=f"{r['operator']} at {r['fraction']:.0%}")  # fmt: skip
        begin, end = r["rollout_emulated_s"]
        axis.axvline(begin, color=color, linestyle="--", linewidth=1)
        axis.axvline(end, color=color, linestyle=":", linewidth=1)
    axis.set_xlabel("emulated seconds since the load started (dashed: image bumped; dotted: rolled out)")
    axis.set_ylabel(f"goodput per {WINDOW} s window, req/s meeting the SLA")
    axis.legend(loc="best", fontsize="small")
    axis.set_ylim(bottom=0)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write_docs(text: str, change_: str, path: Path = DOCS) -> None:
    """Replace the block of docs/performance.md marked for `change_` with `text`."""
    begin_mark, end_mark = MARKERS[change_]
    doc = path.read_text()
    start, end = doc.find(begin_mark), doc.find(end_mark)
    if start < 0 or end < start:
        raise SystemExit(f"{path}: no {begin_mark} ... {end_mark} block")
    path.write_text(doc[: start + len(begin_mark)] + "\n" + text.strip() + "\n" + doc[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("rollout-load-report"))
    parser.add_argument("--quick", action="store_true", help="this tree only, 70%% load, short windows")
    parser.add_argument("--change", choices=CHANGES, default="image", help="what happens under the load")
    parser.add_argument("--replicas", type=int, default=4, help="prefill and decode pods each")
    parser.add_argument("--fractions", type=float, nargs="+", help="load / predicted capacity (default 0.7 0.9)")
    parser.add_argument("--time-scale", type=float, help="wall seconds per emulated second (default 16; quick 8)")
    parser.add_argument("--load-seconds", type=float, default=20.0, help="emulated model load of every pool pod")
    parser.add_argument(
        "--baseline", type=float, help="emulated seconds of load before the bump (default 60; quick 20)"
    )
    parser.add_argument("--tail", type=float, help="emulated seconds after the rollout (default 30; quick 10)")
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=1800.0, help="bound of every wait, wall seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline-source", help="operator package directory to compare with (its ../crds too)")
    parser.add_argument("--only-baseline", action="store_true", help="measure the baseline operator alone")
    parser.add_argument("--port-base", type=int, default=19879)
    parser.add_argument("--write-docs", action="store_true", help=f"write the table into {DOCS.relative_to(REPO)}")
    args = parser.parse_args()
    args.baseline = args.baseline or (20.0 if args.quick else 60.0)
    args.time_scale = args.time_scale or (8.0 if args.quick else 16.0)
    args.tail = args.tail or (10.0 if args.quick else 30.0)
    fractions = args.fractions or ([0.7] if args.quick else [0.7, 0.9])
    for profile in PROFILES.values():
        ensure_router_venv(profile.router)
    runs: list[tuple[str, str | None]] = [] if args.only_baseline else [("revisions", None)]
    if args.baseline_source:
        runs.append(("baseline", str(Path(args.baseline_source).resolve())))
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    stem = MARKERS[args.change][0].removeprefix("<!-- ").removesuffix(":begin -->")
    index = 0
    for label, source in runs:
        for fraction in fractions:
            results.append(measure(label, source, fraction, args, args.port_base + 100 * index))
            index += 1
            (args.out / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
            plot_runs(results, args.out / f"{stem}.png")
            print(json.dumps({k: v for k, v in results[-1].items() if k not in ("windows", "routers")}), flush=True)
    what = (
        "an image change"
        if args.change == "image"
        else f"both pools scaled from {args.replicas} to {args.replicas - 1} pods"
    )
    text = (
        f"{args.replicas} prefill + {args.replicas} decode pods of the EAGLE3 example, prompt {args.prompt_tokens} / "
        f"output {args.output_tokens} tokens, open-loop Poisson at a fraction of the predicted capacity through the "
        f"router Service, {args.baseline:g} s of baseline load, then {what}; times in emulated seconds; "
        f"goodput per {WINDOW} s window against the baseline windows' mean.\n\n" + markdown(results)
    )
    reports = [
        f"- {r['operator']} at {r['fraction']:.0%}: "
        + ("; ".join(f"`{line}`" for line in r["prestop_reports"]) or "none")
        for r in results
    ]
    if args.change == "scale-down":
        text += "\n\nThe removed pods' preStop reports (from their logs):\n\n" + "\n".join(reports)
    print("\n" + text)
    print(f"wrote {args.out}/{stem}.json and {stem}.png")
    if args.write_docs:
        write_docs(text, args.change)
        print(f"wrote the table into {DOCS}")


if __name__ == "__main__":
    main()
