"""Measures how much of the adversarial corpus passes admission: `python -m e2e.adversarial.measure [--port-base N]`.

Starts a private local control plane (its own state directory and ports, never a `make demo` or test cluster),
installs the committed CRD, runs the operator with its admission webhook as a local process, then creates every
corpus spec in one namespace and records for each whether the API server refused it by schema or CEL, the webhook
refused it, or it was admitted. For admitted specs it waits a bounded time for the operator and records how many of
the 9 children (router ServiceAccount, Role, RoleBinding, three Services, three Deployments) exist and what the status
conditions say: rejected only at reconcile (SpecConfigConsistent=False), half-applied (some children but not all),
Degraded with a raw HTTP error, or no status at all (rendering crashed). It prints a table per class and the totals,
writes a JSON report, asserts nothing, and tears its cluster down. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from e2e.adversarial.corpus import ADVERSARIAL, BASES, CLASSES, LEGITIMATE, Spec
from e2e.cluster.controlplane import LocalCluster, NodeShape
from e2e.cluster.processes import port_free
from e2e.support.fixtures import STATE_ROOT, install_crd
from e2e.support.kube import Cluster
from e2e.support.operator_install import wait_webhook_registered
from e2e.support.operator_process import WEBHOOK_CONFIGURATION, OperatorProcess

NAMESPACE: Final = "adversarial"
CHILDREN: Final = 12
"""Children of one service: the router's ServiceAccount, Role, RoleBinding, three Services, three
PodDisruptionBudgets, three Deployments."""
CHILD_KINDS: Final = (
    "serviceaccounts,roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io,services,"
    "poddisruptionbudgets.policy,deployments.apps"
)
DEFAULT_PORT_BASE: Final = 18900
PORTS_NEEDED: Final = 6
CALL_TIMEOUT: Final = 45.0
"""Longest one kubectl call may take: the webhook's own timeout is 30 s."""
RAW_HTTP: Final = re.compile(r"\b(HTTP|[45]\d\d)\b|Unprocessable|Internal Server Error|Bad Request")

REFUSED_SCHEMA: Final = "refused-schema-cel"
REFUSED_WEBHOOK: Final = "refused-webhook"
ADMITTED: Final = "admitted"
ERROR: Final = "create-error"


@dataclass
class Result:
    """What happened to one spec."""

    id: str
    cls: str
    name: str
    reason: str
    admission: str = ERROR
    """refused-schema-cel, refused-webhook, admitted, or create-error (kubectl timed out or failed otherwise)."""
    message: str = ""
    """The API server's refusal (first 600 characters), or its warnings on admission."""
    children: int | None = None
    conditions: dict[str, dict[str, str]] = field(default_factory=dict)
    reconciled: bool = False
    """Whether status.observedGeneration reached the spec's generation."""
    outcome: str = ""
    """For admitted specs: applied, rejected-at-reconcile, half-applied, degraded, no-children or no-status."""
    half_applied: bool = False
    raw_http_degraded: bool = False
    webhook_refuses_on_retry: bool | None = None
    """For specs rejected only at reconcile: whether a later dry-run is refused by the webhook (a fail-open sign)."""


def _free_port_base(first: int) -> int:
    for base in range(first, first + 200 * 10, 10):
        if all(port_free(port) for port in range(base, base + PORTS_NEEDED)):
            return base
    raise RuntimeError(f"no free loopback port range above {first}")


def _kubectl(
    cluster: Cluster, *args: str, input: str | None = None, timeout: float = CALL_TIMEOUT
) -> tuple[int, str, str]:
    try:
        result = cluster.kubectl(*args, input=input, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"kubectl {' '.join(args[:2])} timed out after {timeout:.0f}s"
    return result.returncode, result.stdout, result.stderr


def _manifest(spec: Spec, name: str) -> dict[str, Any]:
    obj = spec.manifest()
    obj["metadata"] = {"name": name, "namespace": NAMESPACE}
    return obj


def _classify_refusal(stderr: str) -> str:
    if "admission webhook" in stderr:
        return REFUSED_WEBHOOK
    if " is invalid" in stderr or "strict decoding error" in stderr or "unknown field" in stderr:
        return REFUSED_SCHEMA
    return ERROR


def _create(cluster: Cluster, spec: Spec, name: str, dry_run: bool = False) -> tuple[str, str]:
    args = ["create", "-f", "-", "-o", "name"]
    if dry_run:
        args.append("--dry-run=server")
    code, _out, err = _kubectl(cluster, *args, input=json.dumps(_manifest(spec, name)))
    if code == 0:
        return ADMITTED, err.strip()[:600]
    return _classify_refusal(err), err.strip()[:600]


def _wait_webhook_answers(cluster: Cluster, deadline_s: float = 60) -> bool:
    """Whether the webhook refuses a spec only it can refuse (an unknown extraArgs flag) within `deadline_s`."""
    probe = Spec("probe", "probe", "llama", {"spec.prefill.extraArgs": ["--no-such-flag-at-all"]}, "probe")
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        verdict, _ = _create(cluster, probe, "webhook-probe", dry_run=True)
        if verdict == REFUSED_WEBHOOK:
            return True
        time.sleep(1)
    return False


def _snapshot(cluster: Cluster) -> tuple[dict[str, dict[str, Any]], Counter[str]]:
    """Every service in the namespace by name, and how many children each owns."""
    code, out, _ = _kubectl(cluster, "get", "disaggspecservices", "-n", NAMESPACE, "-o", "json")
    services = {item["metadata"]["name"]: item for item in json.loads(out)["items"]} if code == 0 else {}
    by_uid = {item["metadata"]["uid"]: name for name, item in services.items()}
    owned: Counter[str] = Counter()
    code, out, _ = _kubectl(cluster, "get", CHILD_KINDS, "-n", NAMESPACE, "-o", "json")
    if code == 0:
        for child in json.loads(out)["items"]:
            for ref in child["metadata"].get("ownerReferences") or []:
                if ref.get("uid") in by_uid:
                    owned[by_uid[ref["uid"]]] += 1
    return services, owned


def _reconciled(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    return bool(
        status.get("observedGeneration") is not None and status["observedGeneration"] >= obj["metadata"]["generation"]
    )


def _settle(cluster: Cluster, admitted: list[str], settle: float, max_wait: float) -> None:
    """Wait at least `settle` seconds, at most `max_wait`, until every admitted service is reconciled and the child
    counts stopped changing."""
    start = time.monotonic()
    previous: Counter[str] | None = None
    while True:
        elapsed = time.monotonic() - start
        services, owned = _snapshot(cluster)
        done = all(name in services and _reconciled(services[name]) for name in admitted)
        if elapsed >= settle and done and owned == previous:
            print(f"settled after {elapsed:.0f}s", flush=True)
            return
        if elapsed >= max_wait:
            left = sum(1 for name in admitted if not (name in services and _reconciled(services[name])))
            print(f"stopped waiting after {elapsed:.0f}s; {left} admitted services never reconciled", flush=True)
            return
        previous = owned
        time.sleep(2)


def _judge(result: Result, obj: dict[str, Any] | None, children: int) -> None:
    result.children = children
    status = (obj or {}).get("status") or {}
    result.reconciled = obj is not None and _reconciled(obj)
    result.conditions = {
        cond["type"]: {
            "status": cond.get("status", ""),
            "reason": cond.get("reason", ""),
            "message": cond.get("message", "")[:400],
        }
        for cond in status.get("conditions") or []
    }
    degraded = result.conditions.get("Degraded", {})
    result.half_applied = 0 < children < CHILDREN
    result.raw_http_degraded = (
        degraded.get("status") == "True" and RAW_HTTP.search(degraded.get("message", "")) is not None
    )
    if not status:
        result.outcome = "no-status"
    elif result.conditions.get("SpecConfigConsistent", {}).get("status") == "False":
        result.outcome = "rejected-at-reconcile"
    elif result.half_applied:
        result.outcome = "half-applied"
    elif degraded.get("status") == "True":
        result.outcome = "degraded"
    elif children == 0:
        result.outcome = "no-children"
    else:
        result.outcome = "applied"


COLUMNS: Final = (
    ("total", lambda r: True),
    ("schema/CEL", lambda r: r.admission == REFUSED_SCHEMA),
    ("webhook", lambda r: r.admission == REFUSED_WEBHOOK),
    ("admitted", lambda r: r.admission == ADMITTED),
    ("reconcile-rej", lambda r: r.outcome == "rejected-at-reconcile"),
    ("half-applied", lambda r: r.half_applied),
    ("degraded", lambda r: r.conditions.get("Degraded", {}).get("status") == "True"),
    ("degraded-http", lambda r: r.raw_http_degraded),
    ("no-status", lambda r: r.outcome == "no-status"),
    ("all-children-applied", lambda r: r.outcome == "applied" and r.children == CHILDREN),
    ("error", lambda r: r.admission == ERROR),
)


def _table(results: list[Result]) -> str:
    classes = [*CLASSES, "legitimate"]
    width = max(len(c) for c in classes) + 2
    lines = [f"{'class':<{width}}" + "".join(f"{name:>15}" for name, _ in COLUMNS)]
    for cls in [*classes, "TOTAL (bad set)"]:
        rows = [r for r in results if (r.cls == cls if cls != "TOTAL (bad set)" else r.cls in CLASSES)]
        if not rows:
            continue
        lines.append(f"{cls:<{width}}" + "".join(f"{sum(1 for r in rows if test(r)):>15}" for _, test in COLUMNS))
    return "\n".join(lines)


def _totals(results: list[Result]) -> str:
    bad = [r for r in results if r.cls in CLASSES]
    admitted = sum(1 for r in bad if r.admission == ADMITTED)
    half = sum(1 for r in bad if r.half_applied)
    reconcile = sum(1 for r in bad if r.outcome == "rejected-at-reconcile")
    return f"{admitted} of {len(bad)} admitted; {half} half-applied; {reconcile} rejected only at reconcile"


def measure(
    cluster: Cluster, operator: OperatorProcess, settle: float, max_wait: float
) -> tuple[list[Result], dict[str, Any]]:
    """Create every spec, wait, and judge; returns the results and facts about the run."""
    _kubectl(cluster, "create", "namespace", NAMESPACE)
    facts: dict[str, Any] = {"webhook_answering": _wait_webhook_answers(cluster)}
    print(f"webhook answering: {facts['webhook_answering']}", flush=True)
    specs = [*ADVERSARIAL, *LEGITIMATE]
    results: list[Result] = []
    started = time.monotonic()
    for index, spec in enumerate(specs):
        result = Result(spec.id, spec.cls, f"adv-{index:03d}", spec.reason)
        result.admission, result.message = _create(cluster, spec, result.name)
        results.append(result)
        if index % 20 == 0:
            print(f"  created {index + 1}/{len(specs)} ({time.monotonic() - started:.0f}s)", flush=True)
    facts["create_seconds"] = round(time.monotonic() - started, 1)
    admitted = [r.name for r in results if r.admission == ADMITTED]
    _settle(cluster, admitted, settle, max_wait)
    services, owned = _snapshot(cluster)
    for result in results:
        if result.admission == ADMITTED:
            _judge(result, services.get(result.name), owned.get(result.name, 0))
    for result in results:
        if result.outcome == "rejected-at-reconcile":
            spec = next(s for s in specs if s.id == result.id)
            verdict, _ = _create(cluster, spec, result.name + "-retry", dry_run=True)
            result.webhook_refuses_on_retry = verdict == REFUSED_WEBHOOK
    log = operator.log_path.read_text(errors="replace")
    facts["operator_tracebacks"] = log.count("Traceback")
    facts["operator_log"] = str(operator.log_path)
    return results, facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--port-base", type=int, default=None, help="first of 6 loopback ports (default: a free range)")
    parser.add_argument("--settle", type=float, default=10.0, help="least seconds to wait after the last create")
    parser.add_argument("--max-wait", type=float, default=90.0, help="most seconds to wait for reconciles")
    parser.add_argument("--report", type=Path, default=None, help="JSON report path")
    args = parser.parse_args(argv)

    stamp = time.strftime("%Y%m%dT%H%M%S")
    out_dir = STATE_ROOT / "adversarial"
    out_dir.mkdir(parents=True, exist_ok=True)
    report_path: Path = args.report or out_dir / f"report-{stamp}.json"
    base = args.port_base if args.port_base is not None else _free_port_base(DEFAULT_PORT_BASE)
    local = LocalCluster(STATE_ROOT / f"adversarial-cluster-{os.getpid()}")
    state = local.up(port_base=base, nodes=NodeShape(count=4), timeout=180)
    cluster = Cluster(state.kubeconfig, local=True)
    try:
        install_crd(cluster)
        operator = OperatorProcess(state.kubeconfig, out_dir / f"operator-{stamp}.log")
        with operator:
            wait_webhook_registered(cluster, operator)
            try:
                results, facts = measure(cluster, operator, args.settle, args.max_wait)
            finally:
                _kubectl(
                    cluster, "delete", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION, "--ignore-not-found"
                )
    finally:
        local.down()

    print()
    print(_table(results))
    print()
    print(_totals(results))
    admitted_ids = [r.id for r in results if r.cls in CLASSES and r.admission == ADMITTED]
    print(f"admitted: {', '.join(admitted_ids)}")
    for outcome in ("rejected-at-reconcile", "half-applied", "degraded", "no-children", "no-status", "applied"):
        ids = [r.id for r in results if r.cls in CLASSES and r.outcome == outcome]
        print(f"{outcome} ({len(ids)}): {', '.join(ids)}")
    legit = {r.id: r.admission for r in results if r.cls not in CLASSES}
    print(f"legitimate specs: {legit}")
    report = {
        "totals": _totals(results),
        "bases": sorted(BASES),
        "facts": facts,
        "admitted_ids": admitted_ids,
        "results": [asdict(r) for r in results],
    }
    report_path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {report_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
