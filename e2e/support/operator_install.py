"""The operator as users get it: the Helm chart, installed per e2e backend, and its ServiceAccount's credentials.

- `local`: `helm install` the chart, then run the operator process on this host (the kwok nodes run no containers)
  with a kubeconfig that holds only a token of the chart's ServiceAccount, so the chart's RBAC alone authorizes it.
- `kind-gpu`: the chart and its operator image were installed by `e2e/kind_gpu/run.sh`; wait for its Deployment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.support.kube import Cluster
from e2e.support.operator_process import WEBHOOK_CONFIGURATION, OperatorProcess

REPO = Path(__file__).resolve().parents[2]
# DISAGGSPEC_CHART: another checkout's chart (with DISAGGSPEC_OPERATOR_SOURCE, to run a suite against an older commit).
CHART = Path(os.environ.get("DISAGGSPEC_CHART") or REPO / "charts" / "disaggspec-operator")
CHART_NAME = "disaggspec-operator"
WEBHOOK_KINDS = ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")
KIND_GPU_RELEASE = "disaggspec"
KIND_GPU_NAMESPACE = "disaggspec-system"


def fullname(release: str) -> str:
    return f"{release}-{CHART_NAME}"


def service_account_kubeconfig(
    cluster: Cluster, namespace: str, account: str, path: Path, duration: str = "60m"
) -> Path:
    """A kubeconfig with the admin kubeconfig's server and CA and a bearer token of `account`, nothing else."""
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
    token = cluster.kubectl("create", "token", account, "-n", namespace, f"--duration={duration}").stdout.strip()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": server}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": account}}],
        "current-context": "test",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def clear_foreign_webhook_configurations(cluster: Cluster) -> None:
    """A directly-run operator writes the `disaggspec.io` configuration itself (and leaves it, as it never empties it);
    helm would refuse to adopt it."""
    for kind in WEBHOOK_KINDS:
        got = cluster.kubectl("get", kind, WEBHOOK_CONFIGURATION, "-o", "json", check=False)
        if got.returncode == 0:
            labels = json.loads(got.stdout)["metadata"].get("labels") or {}
            if labels.get("app.kubernetes.io/managed-by") != "Helm":
                cluster.kubectl("delete", kind, WEBHOOK_CONFIGURATION)


def webhook_url(cluster: Cluster, kind: str = "validatingwebhookconfiguration") -> str:
    return cluster.kubectl(
        "get",
        kind,
        WEBHOOK_CONFIGURATION,
        "-o",
        "jsonpath={.webhooks[*].clientConfig.url}",
        check=False,
    ).stdout


def wait_webhook_registered(
    cluster: Cluster, process: OperatorProcess, description: str = "the operator's webhook registration"
) -> None:
    """Wait until the webhook configuration points at `process` (kopf registers it once the operator has started)."""
    # Both configurations: the specs' validating entry, then the mutating one of host-network pool pods' ports.
    cluster.wait_for(
        description,
        lambda: all(f":{process.webhook_port}/" in webhook_url(cluster, kind) for kind in WEBHOOK_KINDS),
        timeout=30,
    )


# Flags the local process sets itself: where it listens, and the certificate paths inside the chart's pod.
_LOCAL_FLAGS = (
    "--metrics-addr",
    "--metrics-port",
    "--webhook-addr",
    "--webhook-port",
    "--webhook-host",
    "--webhook-cert",
    "--webhook-key",
    "--webhook-ca",
)


def chart_container_settings(cluster: Cluster, namespace: str, release: str) -> tuple[list[str], dict[str, str]]:
    """The installed chart Deployment's operator arguments and environment, as far as they apply to a local process:
    listen addresses and mounted certificate paths are dropped, an env var from the downward API becomes the value
    it would have in the pod (namespace, a pod name), other `valueFrom`s are dropped."""
    deployment = json.loads(
        cluster.kubectl("get", "deployment", fullname(release), "-n", namespace, "-o", "json").stdout
    )
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args: list[str] = []
    raw = list(container.get("args") or [])
    skip_value = False
    for arg in raw:
        if skip_value:
            skip_value = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in _LOCAL_FLAGS:
            skip_value = "=" not in arg
            continue
        args.append(arg)
    env: dict[str, str] = {}
    for var in container.get("env") or []:
        if "value" in var:
            env[var["name"]] = str(var["value"])
            continue
        field = ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if field == "metadata.namespace":
            env[var["name"]] = namespace
        elif field == "metadata.name":
            env[var["name"]] = f"{fullname(release)}-local-{os.getpid()}"
    return args, env


@dataclass(frozen=True)
class InstalledOperator:
    """Where the chart's release lives, and the local operator process when the backend runs one."""

    release: str
    namespace: str
    process: OperatorProcess | None

    @property
    def service_account(self) -> str:
        return fullname(self.release)


@contextmanager
def installed_operator(
    cluster: Cluster,
    backend: str,
    namespace: str,
    work: Path,
    extra_args: list[str] | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[InstalledOperator]:
    """The chart's operator, serving and watching, for the duration of the block (local: uninstalled afterwards).

    Local: the process gets the chart Deployment's own arguments (but its listen addresses) and plain environment
    values, then `extra_args` and `extra_env`."""
    if backend == "kind-gpu":
        # run.sh exports where it installed the chart.
        where = os.environ.get("E2E_OPERATOR_NAMESPACE", KIND_GPU_NAMESPACE)
        deployment = os.environ.get("E2E_OPERATOR_DEPLOYMENT", fullname(KIND_GPU_RELEASE))
        cluster.kubectl("rollout", "status", f"deployment/{deployment}", "-n", where, "--timeout=300s")
        yield InstalledOperator(KIND_GPU_RELEASE, where, None)
        return
    release = "dss-e2e"
    clear_foreign_webhook_configurations(cluster)
    cluster.helm("install", release, str(CHART), "-n", namespace, "--wait", "--timeout=90s")
    try:
        kubeconfig = service_account_kubeconfig(cluster, namespace, fullname(release), work / "operator.kubeconfig")
        args, env = chart_container_settings(cluster, namespace, release)
        args += extra_args or []
        env.update(extra_env or {})
        with OperatorProcess(kubeconfig, work / "operator.log", extra_args=args, extra_env=env) as process:
            try:
                wait_webhook_registered(cluster, process)
                yield InstalledOperator(release, namespace, process)
            finally:
                print(f"operator log: {work / 'operator.log'}\n{process.log_tail(60)}")
    finally:
        cluster.helm("uninstall", release, "-n", namespace, "--wait", "--timeout=90s", check=False)
