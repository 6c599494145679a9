"""`make demo`: the main job on the embedded local cluster, narrated; `make demo-down` stops it.

Brings up the local control plane (building its binaries on first use), `helm install`s the operator chart (its CRD,
ServiceAccount, least-privilege RBAC, Services and webhook configuration), starts the operator as a background process
with a token of the chart's ServiceAccount (the kwok nodes run no containers, so the chart's own Deployment never
starts; the process gets exactly the chart's permissions), applies the EAGLE3 example, waits for Ready, prints the
service, its children and the rendered prefill/decode SGLang command lines, then applies two bad specs and prints how
each is rejected: a prefill/decode mismatch (CEL, in the CRD) and an unknown SGLang flag (the operator's webhook). The
cluster and the operator keep running for exploration until `make demo-down`.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from e2e.cluster.controlplane import ClusterError, LocalCluster
from e2e.cluster.processes import port_free
from e2e.support.kube import Cluster, CommandFailed
from e2e.support.operator_install import CHART, fullname, service_account_kubeconfig

REPO = Path(__file__).resolve().parents[1]
DEMO_DIR = REPO / ".state" / "demo"
NAMESPACE = "demo"
EXAMPLE = REPO / "examples" / "llama-3.1-8b-eagle3.yaml"
RELEASE = "disaggspec"
OPERATOR_NAMESPACE = "disaggspec-system"
METRICS_PORT = 18080
WEBHOOK_PORT = 18443


def say(title: str) -> None:
    print(f"\n\033[1m==> {title}\033[0m", flush=True)


def show(result: subprocess.CompletedProcess[str]) -> None:
    print((result.stdout + result.stderr).rstrip(), flush=True)


def _operator_pid() -> int | None:
    pid_file = DEMO_DIR / "operator.pid"
    if not pid_file.is_file():
        return None
    pid = int(pid_file.read_text())
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"disaggspec" in cmdline else None


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
    (DEMO_DIR / "operator.pid").write_text(str(proc.pid))
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


def up() -> None:
    cluster = LocalCluster()
    say("1. local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok GPU nodes)")
    state = cluster.up()
    show(cluster.kubectl("get", "nodes", "-L", "nvidia.com/gpu.product,topology.kubernetes.io/zone"))

    say(f"2. helm install {RELEASE} {CHART.relative_to(REPO)} (the CRD, RBAC, Services, webhook configuration)")
    client = Cluster(state.kubeconfig, local=True)
    show(
        client.helm(
            "upgrade", "--install", RELEASE, str(CHART), "-n", OPERATOR_NAMESPACE, "--create-namespace", "--wait"
        )
    )
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

    say(f"4. apply {EXAMPLE.relative_to(REPO)}: Llama-3.1-8B-Instruct + EAGLE3 draft, prefill and decode pools")
    cluster.kubectl("create", "namespace", NAMESPACE, check=False)
    show(cluster.kubectl("apply", "-n", NAMESPACE, "-f", str(EXAMPLE)))
    name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]
    show(cluster.kubectl("wait", "-n", NAMESPACE, "--for=condition=Ready", f"dss/{name}", "--timeout=120s"))

    say("5. kubectl get dss, and the children the operator applied")
    show(cluster.kubectl("get", "dss", "-n", NAMESPACE))
    show(cluster.kubectl("get", "deployments,services,serviceaccounts,roles,rolebindings,pods", "-n", NAMESPACE))

    say("6. the SGLang command lines the operator rendered")
    for role in ("prefill", "decode", "router"):
        deployment = json.loads(
            cluster.kubectl("get", "deployment", f"{name}-{role}", "-n", NAMESPACE, "-o", "json").stdout
        )
        command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
        print(f"{role}:\n  " + " ".join(command))

    say("7. a mismatched pair: decode overrides eagleTopk (rejected by the CRD's CEL rules, no operator needed)")
    original: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    mismatched = copy.deepcopy(original)
    mismatched["metadata"]["name"] = "mismatched"
    mismatched["spec"]["decode"]["speculative"] = {"eagleTopk": 4, "numDraftTokens": 8}
    show(cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(mismatched), check=False))

    say("8. an unknown SGLang flag in extraArgs (rejected by the operator's admission webhook)")
    unknown = copy.deepcopy(original)
    unknown["metadata"]["name"] = "unknown-flag"
    unknown["spec"]["decode"]["extraArgs"] = ["--enable-magic"]
    show(cluster.kubectl("apply", "-n", NAMESPACE, "-f", "-", input=yaml.safe_dump(unknown), check=False))

    say("explore")
    print(f'eval "$({sys.executable} -m e2e.cluster env)"   # then: kubectl get dss -n {NAMESPACE} -o yaml')
    print("make demo-down                                    # stop the operator and the cluster")


def down() -> None:
    pid = _operator_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if _operator_pid() is None or not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        print(f"operator (pid {pid}) stopped")
    (DEMO_DIR / "operator.pid").unlink(missing_ok=True)
    LocalCluster().down()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["up", "down"])
    args = parser.parse_args(argv)
    try:
        up() if args.command == "up" else down()
    except (ClusterError, CommandFailed) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
