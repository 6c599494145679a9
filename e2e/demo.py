"""`make demo`: the main job on the embedded local cluster, narrated; `make demo-down` stops it.

Brings up the local control plane (building its binaries on first use), `helm install`s the operator chart (its CRD,
ServiceAccount, least-privilege RBAC, Services and webhook configuration), starts the operator as a background process
with a token of the chart's ServiceAccount (the kwok nodes run no containers, so the chart's own Deployment never
starts; the process gets exactly the chart's permissions), starts the pod runner of serving mode (each pod becomes a
local process on its own loopback IP: the real pinned router package for the router pod, the SGLang emulator for pool
pods), applies the EAGLE3 example, waits for Ready, prints the service, its children and the rendered command lines,
sends a real request through the router and prints the (emulated) answer and who served it, shows every pool pod's
SGLang metrics, changes the draft's revision while traffic flows through the router Service (a coordinated rollout: a
new revision beside the old one), then applies two bad specs and prints how each is rejected: a prefill/decode
mismatch (CEL, in the CRD) and an unknown SGLang flag (the operator's webhook). The cluster, the operator, the pod
runner and the service keep running for exploration (it prints a `curl` line to try) until `make demo-down`, which
stops the operator, then the pod runner and every process it started (pods in their preStop pause or drain
included: the runner kills them by pid and waits), then the cluster; so a next `make demo` finds the pod network free.

The cluster honours `DISAGGSPEC_CLUSTER_DIR` and `DISAGGSPEC_CLUSTER_PORT_BASE` as `python -m e2e.cluster up` does.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from disaggspec.sglang.profiles import PROFILES
from e2e.cluster.controlplane import ClusterError, LocalCluster
from e2e.cluster.processes import alive, cmdline, port_free
from e2e.cluster.proctable import start_ticks
from e2e.serving.continuous import continuous
from e2e.serving.daemon import start_runner
from e2e.serving.plan import DEFAULT_LAUNCHER
from e2e.serving.routers import ensure_router_venv
from e2e.serving.traffic import Load
from e2e.support import workloads
from e2e.support.kube import Cluster, CommandFailed
from e2e.support.operator_install import CHART, fullname, service_account_kubeconfig
from e2e.support.rollout import kube_api, router_service_target
from e2e.support.serving import ready_pods, served_model

REPO = Path(__file__).resolve().parents[1]
DEMO_DIR = REPO / ".state" / "demo"
NAMESPACE = "demo"
EXAMPLE = REPO / "examples" / "llama-3.1-8b-eagle3.yaml"
RELEASE = "disaggspec"
OPERATOR_NAMESPACE = "disaggspec-system"
METRICS_PORT = 18080
WEBHOOK_PORT = 18443
DEFAULT_PORT_BASE = 16379


def say(title: str) -> None:
    print(f"\n\033[1m==> {title}\033[0m", flush=True)


def show(result: subprocess.CompletedProcess[str]) -> None:
    print((result.stdout + result.stderr).rstrip(), flush=True)


def _operator_pid() -> int | None:
    """The pid of the demo's live operator: the recorded pid while it still has the recorded start time (another
    process that got the pid since, another checkout's operator say, is never taken for it)."""
    try:
        recorded = json.loads((DEMO_DIR / "operator.pid").read_text())
    except (OSError, ValueError):
        return None
    if isinstance(recorded, int):  # written by an earlier version: the pid alone
        argv = cmdline(recorded)
        return recorded if alive(recorded) and "disaggspec" in argv and str(METRICS_PORT) in argv else None
    try:
        pid, ticks = int(recorded["pid"]), int(recorded["start_ticks"])
    except (KeyError, TypeError, ValueError):
        return None
    return pid if alive(pid) and start_ticks(pid) == ticks else None


def start_operator(kubeconfig: Path) -> None:
    if _operator_pid() is not None:
        print("operator already running")
        return
    for port in (METRICS_PORT, WEBHOOK_PORT):
        if not port_free(port):
            raise ClusterError(f"port {port} on 127.0.0.1 is in use: run `make demo-down`, or free it")
    DEMO_DIR.mkdir(parents=True, exist_ok=True)
    log = (DEMO_DIR / "operator.log").open("ab")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    argv = [sys.executable, "-m", "disaggspec", "--metrics-addr", "127.0.0.1", "--metrics-port", str(METRICS_PORT)]
    argv += ["--webhook-addr", "127.0.0.1", "--webhook-host", "127.0.0.1", "--webhook-port", str(WEBHOOK_PORT)]
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=REPO)
    (DEMO_DIR / "operator.pid").write_text(json.dumps({"pid": proc.pid, "start_ticks": start_ticks(proc.pid)}))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"operator exited; see {DEMO_DIR / 'operator.log'}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{METRICS_PORT}/healthz", timeout=1):
                print(f"operator running (pid {proc.pid}, log {DEMO_DIR / 'operator.log'})")
                return
        except OSError:
            time.sleep(0.2)
    raise ClusterError("operator did not become healthy in 30s")


def _wait_webhook(cluster: LocalCluster) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        got = cluster.kubectl(
            "get", "validatingwebhookconfiguration", "disaggspec.io", "-o", "jsonpath={..url}", check=False
        )
        if f":{WEBHOOK_PORT}/" in got.stdout:
            return
        time.sleep(0.3)
    raise ClusterError("the operator never registered its admission webhook")


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def _metric_lines(url: str, names: tuple[str, ...]) -> list[str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return [line for line in text.splitlines() if line.startswith(names)]


def up(rollout: bool = True) -> None:
    """The whole demo; `rollout=False` leaves out step 6d, the rollout under traffic (a test's shortcut)."""
    cluster = LocalCluster()
    say("1. local control plane in serving mode (etcd, kube-apiserver, controller-manager, scheduler, kwok GPU nodes)")
    state = cluster.up(port_base=int(os.environ.get("DISAGGSPEC_CLUSTER_PORT_BASE", DEFAULT_PORT_BASE)), serving=True)
    show(cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product,topology.kubernetes.io/zone"))

    say(f"2. helm install {RELEASE} {CHART.relative_to(REPO)} (the CRD, RBAC, Services, webhook configuration)")
    client = Cluster(state.kubeconfig, local=True)
    # No --wait: the chart's operator pod never gets Ready here (its image is not built on this machine and the pod
    # runner only runs routers and SGLang servers); the operator runs below as a local process, as that pod's
    # ServiceAccount.
    show(client.helm("upgrade", "--install", RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE, "--create-namespace"))
    show(
        client.kubectl(
            "get",
            "serviceaccount,clusterrole,clusterrolebinding,service",
            "-A",
            "-l",
            f"app.kubernetes.io/instance={RELEASE}",
        )
    )
    client.wait_for(
        "disaggspecservices to be served",
        lambda: client.kubectl("get", "disaggspecservices", "-A", check=False).returncode == 0,
    )

    say(f"3. the operator: a local process here, as the chart's ServiceAccount {fullname(RELEASE)}")
    DEMO_DIR.mkdir(parents=True, exist_ok=True)
    token_kubeconfig = service_account_kubeconfig(
        client, OPERATOR_NAMESPACE, fullname(RELEASE), DEMO_DIR / "operator.kubeconfig", duration="720h"
    )
    start_operator(token_kubeconfig)
    _wait_webhook(cluster)

    example: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    router = PROFILES[example["spec"]["sglang"]["version"]].router
    say(f"3b. the pod runner: the kubelet of the kwok nodes ({router.requirement} for routers, SGLang emulator)")
    ensure_router_venv(router)
    start_runner(state.directory, state.kubeconfig, DEFAULT_LAUNCHER, [], timeout=60)
    print(f"pod runner running; logs in {state.directory / 'serving' / 'logs'}")

    say(f"4. apply {EXAMPLE.relative_to(REPO)}: Llama-3.1-8B-Instruct + EAGLE3 draft, prefill and decode pools")
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    # The example reads a Hugging Face token from this Secret; nothing is downloaded here.
    cluster.kubectl(
        "create", "secret", "generic", "hf-token", "-n", NAMESPACE, "--from-literal=token=hf_not_used_here", check=False
    )
    show(cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE)))
    name = example["metadata"]["name"]
    show(cluster.kubectl("wait", "-n", NAMESPACE, "--for=condition=Ready", f"dss/{name}", "--timeout=180s"))

    say("5. kubectl get dss, and the children the operator applied")
    show(cluster.kubectl("get", "dss", "-n", NAMESPACE))
    show(cluster.kubectl("get", "deployments,services,serviceaccounts,roles,rolebindings,pods", "-n", NAMESPACE))

    say("6. the SGLang command lines the operator rendered")
    for role in ("prefill", "decode", "router"):
        deployment = workloads.deployment(client, NAMESPACE, name, role)
        command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
        print(f"{role}:\n  " + " ".join(command))

    say(f"6b. a request through the real router ({router.requirement}) to the prefill/decode pair (emulated SGLang)")
    client_pods = {role: ready_pods(client, NAMESPACE, name, role) for role in ("router", "prefill", "decode")}
    port = example["spec"].get("router", {}).get("port", 30000)
    url = f"http://{client_pods['router'][0]['status']['podIP']}:{port}"
    model = served_model(example)
    body = {"model": model, "messages": [{"role": "user", "content": "What is speculative decoding?"}], "max_tokens": 8}
    answer = _post(f"{url}/v1/chat/completions", body)
    served = answer.get("emulator", {})
    print(f"POST {url}/v1/chat/completions  model={model}")
    print(f"answer (emulated model output): {answer['choices'][0]['message']['content']!r}")
    print(
        f"served by prefill {served.get('prefill_pod')} -> decode {served.get('decode_pod')}, bootstrap port "
        f"{served.get('bootstrap_port')}, speculative fingerprints match: {served.get('fingerprint_match')}"
    )

    say("6c. every pool pod's /metrics, with SGLang's metric names")
    for role in ("prefill", "decode"):
        for pod in client_pods[role]:
            metrics = f"http://{pod['status']['podIP']}:30000/metrics"
            print(f"{role} {pod['metadata']['name']} ({metrics}):")
            for line in _metric_lines(metrics, ("sglang:num_requests_total", "sglang:spec_accept_length")):
                print(f"  {line}")

    original: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    if rollout:
        say(
            "6d. a change of the pair under traffic: a new draft revision rolls out as a new revision beside the old "
            "one"
        )
        url = _roll_out_under_traffic(client, original, model, port)

    say("7. a mismatched pair: decode overrides eagleTopk (rejected by the CRD's CEL rules, no operator needed)")
    mismatched = copy.deepcopy(original)
    mismatched["metadata"]["name"] = "mismatched"
    mismatched["spec"]["decode"]["speculative"] = {"eagleTopk": 4, "numDraftTokens": 8}
    show(cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(mismatched), check=False))

    say("8. an unknown SGLang flag in extraArgs (rejected by the operator's admission webhook)")
    unknown = copy.deepcopy(original)
    unknown["metadata"]["name"] = "unknown-flag"
    unknown["spec"]["decode"]["extraArgs"] = ["--enable-magic"]
    show(cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(unknown), check=False))

    say("explore: the service keeps serving until `make demo-down`")
    curl_body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16})
    print(f"curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' -d '{curl_body}'")
    print(f"{sys.executable} -m e2e.serving.traffic --url {url} --model {model} --streams 8 --requests 200")
    print(f'eval "$({sys.executable} -m e2e.cluster env)"   # then: kubectl get dss -n {NAMESPACE} -o yaml')
    print("make demo-down                                    # stop the operator, the pod runner and the cluster")


def _roll_out_under_traffic(client: Cluster, original: dict[str, Any], model: str, port: int) -> str:
    """Change the draft's revision (a must-match setting) while traffic flows through the router Service, print the
    revisions as they change and what the traffic saw; returns the URL of a router pod of the new revision."""
    name = original["metadata"]["name"]
    changed = copy.deepcopy(original)
    changed["spec"]["speculative"]["draftModel"]["revision"] = "main"
    api = kube_api(client)
    load = Load(url="", model=model, streams=4, requests=20_000, duration=180, max_tokens=8)
    seen: list[str] = []
    with continuous(load, router_service_target(api, NAMESPACE, original)) as traffic:
        time.sleep(1)
        show(client.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(changed)))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            live = json.loads(client.kubectl("get", "dss", name, "-n", NAMESPACE, "-o", "json").stdout)
            status = live.get("status") or {}
            revisions = status.get("revisions") or []
            line = ", ".join(
                f"{r['name']} {r['traffic']} (prefill {r['prefill'].get('readyReplicas', 0)}, "
                f"decode {r['decode'].get('readyReplicas', 0)} ready)"
                for r in revisions
            )
            if line != (seen[-1] if seen else None):
                seen.append(line)
                print(f"  revisions: {line}")
            done = status.get("observedGeneration") == live["metadata"]["generation"] and len(revisions) == 1
            if done and revisions[0]["traffic"] == "Active" and len(seen) > 1:
                break
            time.sleep(0.5)
        time.sleep(1)
        report = traffic.stop()
    summary = report.summary()
    by_revision = Counter(o.prefill_revision[:8] for o in report.succeeded if o.prefill_revision)
    print(
        f"traffic through the router Service during the rollout: {summary['requests']} requests, "
        f"{summary['failures']} failed; served per revision: {dict(by_revision)}"
    )
    show(client.kubectl("get", "dss", name, "-n", NAMESPACE))
    routers = ready_pods(client, NAMESPACE, name, "router")
    return f"http://{routers[0]['status']['podIP']}:{port}"


def down() -> None:
    pid = _operator_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if _operator_pid() is None:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # our child when up() ran in this process (a test)
        print(f"operator (pid {pid}) stopped")
    (DEMO_DIR / "operator.pid").unlink(missing_ok=True)
    LocalCluster().down()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down"])
    args = parser.parse_args(argv)
    try:
        up() if args.command == "up" else down()
    except (ClusterError, CommandFailed, subprocess.TimeoutExpired) as error:
        print(f"error: {error}", file=sys.stderr)
        if args.command == "up":
            print("(everything started so far keeps running: `make demo-down` stops it)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
