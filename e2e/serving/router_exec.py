"""Start a real PD router for a router pod of the serving simulation, with the pod's own identity, then become it.

The pod runner starts `python -m e2e.serving.router_exec --package P --namespace N --service-account S --pod NAME --
<the pod's router argv>`. This gets a token for the pod's ServiceAccount, bound to the pod (TokenRequest, as the
kubelet does for a projected token; it stops working when the pod is deleted), writes a kubeconfig holding it, and
replaces itself (exec) with the pinned router from its cached venv, `python3` in the argv meaning that venv's Python.
The router's Kubernetes client therefore has exactly the RBAC the operator rendered for it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from disaggspec.sglang.profiles import PROFILES, RouterProfile
from e2e.support.kube import Cluster

TOKEN_SECONDS = 24 * 3600


def router_named(package: str) -> RouterProfile:
    for profile in PROFILES.values():
        if profile.router.package == package:
            return profile.router
    raise SystemExit(f"router_exec: no supported SGLang release is served by {package!r}")


def token_kubeconfig(admin: dict[str, Any], token: str, namespace: str) -> dict[str, Any]:
    """A kubeconfig with the admin kubeconfig's cluster (server, CA) and `token` as its only user."""
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster["cluster"]}],
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": "local", "user": "pod", "namespace": namespace}}],
        "current-context": "pod",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--package", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--service-account", required=True)
    parser.add_argument("--pod", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or command[0] != "python3":
        raise SystemExit(f"router_exec: expected a `python3 ...` router command, got {command[:3]}")
    router = router_named(args.package)
    admin_path = Path(os.environ.pop("DISAGGSPEC_ADMIN_KUBECONFIG", "") or os.environ.get("KUBECONFIG", ""))
    cluster = Cluster(kubeconfig=admin_path, local=True)
    token = cluster.kubectl(
        "create",
        "token",
        args.service_account,
        "-n",
        args.namespace,
        f"--duration={TOKEN_SECONDS}s",
        "--bound-object-kind=Pod",
        f"--bound-object-name={args.pod}",
    ).stdout.strip()
    kubeconfig = admin_path.parent / "serving" / "kubeconfigs" / f"{args.namespace}_{args.pod}.yaml"
    kubeconfig.parent.mkdir(parents=True, exist_ok=True)
    admin = yaml.safe_load(admin_path.read_text())
    kubeconfig.write_text(yaml.safe_dump(token_kubeconfig(admin, token, args.namespace)))
    kubeconfig.chmod(0o600)

    from e2e.serving.routers import ensure_router_venv

    python = str(ensure_router_venv(router) / "bin" / "python")
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    # In a pod, in-cluster config would win; make sure nothing here makes the client look for it.
    env.pop("KUBERNETES_SERVICE_HOST", None)
    sys.stdout.flush()
    os.execve(python, [python, *command[1:]], env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
