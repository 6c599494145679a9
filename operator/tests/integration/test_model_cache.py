"""The model cache against a real API server: a service with a claim-backed cache gets its fill Job, ModelCached turns
True once the Job completes, the pools roll out behind their wait init container, and a new revision replaces the Job.

kwok completes Job pods by itself in the default cluster mode (its `pod-complete` stage marks a Running pod owned by a
Job Succeeded, and the controller-manager's Job controller then completes the Job). Should that not happen in time
(a cluster started in serving mode, say), the test completes the Job through its status subresource the way the Job
controller does, which Kubernetes 1.37 validates: SuccessCriteriaMet before Complete, startTime and completionTime
set, no active pods.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.support.fixtures import Cluster
from e2e.support.operator_process import OperatorProcess
from e2e.support.workloads import condition, deployment, example, get, load, provide_model_claim, wait_ready

pytestmark = pytest.mark.integration

CLAIM = "hf-cache"


@pytest.fixture
def cached_service(cluster: Cluster, namespace: str) -> Iterator[dict[str, Any]]:
    """The llama example with a model cache on a statically bound ReadWriteMany claim (its volume removed again)."""
    obj = load(example("llama"))
    obj["spec"]["model"].pop("volume", None)
    obj["spec"]["model"]["cache"] = {"persistentVolumeClaim": {"claimName": CLAIM}}
    provide_model_claim(cluster, namespace, obj)
    try:
        yield obj
    finally:
        cluster.kubectl("delete", "pv", f"{namespace}-{CLAIM}"[:63], "--ignore-not-found", "--wait=false")


def _jobs(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get(cluster, namespace, "jobs", "-l", f"disaggspec.io/service={name}")["items"]
    return items


def _model_cached(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    dss = get(cluster, namespace, "dss", name)
    found = [c for c in (dss.get("status") or {}).get("conditions", []) if c["type"] == "ModelCached"]
    return found[0] if found else None


def _complete(cluster: Cluster, namespace: str, job: str) -> None:
    """Mark `job` succeeded through its status subresource, as the Job controller would."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    started = get(cluster, namespace, "job", job).get("status", {}).get("startTime") or now
    status = {
        "startTime": started,
        "completionTime": now,
        "active": 0,
        "ready": 0,
        "succeeded": 1,
        "terminating": 0,
        "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now},
            {"type": "Complete", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now},
        ],
    }
    cluster.kubectl(
        "patch",
        "job",
        job,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def _complete_soon(cluster: Cluster, namespace: str, job: str) -> None:
    """Let kwok and the Job controller complete `job`; complete it by hand if they have not within 15 s."""
    try:
        cluster.wait_for(f"Job {job} to complete", lambda: _succeeded(cluster, namespace, job), timeout=15)
    except AssertionError:
        _complete(cluster, namespace, job)


def _succeeded(cluster: Cluster, namespace: str, job: str) -> bool:
    conditions = get(cluster, namespace, "job", job).get("status", {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def test_fill_job_gates_model_cached_and_a_new_revision_replaces_it(
    operator: OperatorProcess, cluster: Cluster, namespace: str, cached_service: dict[str, Any]
) -> None:
    obj = cached_service
    name = obj["metadata"]["name"]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))

    cluster.wait_for("the fill Job", lambda: len(_jobs(cluster, namespace, name)) == 1, timeout=15)
    (job,) = _jobs(cluster, namespace, name)
    job_name = job["metadata"]["name"]
    assert job_name.startswith(f"{name}-cache-")
    assert job["metadata"]["ownerReferences"][0]["kind"] == "DisaggSpecService"
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": CLAIM}} in volumes
    pool = deployment(cluster, namespace, name, "decode")["spec"]["template"]["spec"]
    assert [c["name"] for c in pool["initContainers"]] == ["wait-model-cache"]
    env = {e["name"]: e.get("value") for e in pool["containers"][0]["env"]}
    assert env["HF_HOME"] == "/model-cache" and env["HF_HUB_OFFLINE"] == "1"

    _complete_soon(cluster, namespace, job_name)
    cluster.wait_for(
        "ModelCached=True",
        lambda: (cached := _model_cached(cluster, namespace, name)) is not None and cached["status"] == "True",
        timeout=15,
    )
    wait_ready(cluster, namespace, name, timeout=20)
    dss = get(cluster, namespace, "dss", name)
    assert condition(dss, "ModelCached")["reason"] == "Filled"
    events = get(cluster, namespace, "events", "--field-selector", f"involvedObject.name={name}")["items"]
    assert any(e["reason"] == "ModelCacheFilled" for e in events)

    # A new model revision: a new Job (hence a new fill), the old one pruned, ModelCached back to Filling until done.
    obj["spec"]["model"]["revision"] = "v2"
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj))
    cluster.wait_for(
        "the old Job replaced by a new one",
        lambda: len(current := _live_jobs(cluster, namespace, name)) == 1 and current[0] != job_name,
        timeout=15,
    )
    (new_job,) = _live_jobs(cluster, namespace, name)
    _complete_soon(cluster, namespace, new_job)
    cluster.wait_for(
        "ModelCached=True for the new revision",
        lambda: (
            (cached := _model_cached(cluster, namespace, name)) is not None
            and cached["status"] == "True"
            and new_job in cached.get("message", "")
        ),
        timeout=15,
    )


def _live_jobs(cluster: Cluster, namespace: str, name: str) -> list[str]:
    """Names of the service's fill Jobs that are not being deleted (a pruned Job may linger while its pods go)."""
    return [
        j["metadata"]["name"] for j in _jobs(cluster, namespace, name) if not j["metadata"].get("deletionTimestamp")
    ]
