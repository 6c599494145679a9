"""The caches (issue 17): the model cache's fill Job and its name, the pools' wait or fill init container, HF_HOME and
offline mode, the compile cache's variables, and what reconcile hands the ModelCached condition."""

from __future__ import annotations

from typing import Any

import pytest

from disaggspec import apply, reconcile
from disaggspec.api import DisaggSpecService, parse_service
from disaggspec.config import OperatorConfig
from disaggspec.render import caches, fingerprint, render
from tests.unit.deployments import deployment
from tests.unit.dss_cases import edited

CLAIM = {"spec.model.cache": {"persistentVolumeClaim": {"claimName": "hf-cache"}}}
NODE_LOCAL = {"spec.model.cache": {"hostPath": {"path": "/nvme/hf"}}}
COMPILE = {"spec.engine": {"compileCache": {"hostPath": {"path": "/nvme/jit"}}}}


def _service(edits: dict[str, Any]) -> DisaggSpecService:
    obj = edited(edits)
    obj["metadata"]["namespace"] = "ns"
    return parse_service(obj)


def _kinds(manifests: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m for m in manifests if m["kind"] == kind]


def _pool(manifests: list[dict[str, Any]], role: str) -> dict[str, Any]:
    pod: dict[str, Any] = deployment(manifests, "base", role)["spec"]["template"]["spec"]
    return pod


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_no_cache_renders_no_job_and_no_init_container() -> None:
    manifests = render(_service({}), OperatorConfig())
    assert not _kinds(manifests, "Job")
    assert "initContainers" not in _pool(manifests, "prefill")


def test_claim_cache_renders_one_fill_job_before_the_pools() -> None:
    service = _service({**CLAIM, "spec.model.hfTokenSecretRef": {"name": "hf", "key": "token"}})
    manifests = render(service, OperatorConfig())
    (job,) = _kinds(manifests, "Job")
    assert manifests.index(job) < manifests.index(_kinds(manifests, "Deployment")[0])
    assert job["metadata"]["name"] == caches.job_name(service)
    assert job["metadata"]["name"].startswith("base-cache-") and len(job["metadata"]["name"]) <= 63
    spec = job["spec"]
    assert spec["backoffLimit"] == caches.JOB_BACKOFF_LIMIT
    assert "ttlSecondsAfterFinished" not in spec and "activeDeadlineSeconds" not in spec
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [{"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}}]
    (fill,) = pod["containers"]
    env = _env(fill)
    assert env["HF_HOME"] == caches.MODEL_CACHE_PATH
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert "HF_HUB_OFFLINE" not in env  # the Job is the one that downloads
    # python3 -c SCRIPT MARKER (repo revision)...: the target and the EAGLE3 draft, default branches.
    assert fill["command"][3] == caches.marker(service)
    assert fill["command"][4:] == [
        "meta-llama/Llama-3.1-8B-Instruct",
        "",
        "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
        "",
    ]


@pytest.mark.parametrize(
    "edit",
    [
        {"spec.model.revision": "v2"},
        {"spec.speculative.draftModel": {"path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B", "revision": "r2"}},
        {"spec.model.path": "meta-llama/Llama-3.3-70B-Instruct"},
        {"spec.engine": {"tokenizerPath": "someone/tokenizer"}},
    ],
    ids=["model-revision", "draft-revision", "model-path", "tokenizer"],
)
def test_a_new_revision_is_a_new_job_and_a_new_marker(edit: dict[str, Any]) -> None:
    before, after = _service(CLAIM), _service({**CLAIM, **edit})
    assert caches.job_name(before) != caches.job_name(after)
    assert caches.marker(before) != caches.marker(after)


def test_the_job_name_is_stable_across_unrelated_edits() -> None:
    service = _service(CLAIM)
    scaled = _service({**CLAIM, "spec.decode": {"tensorParallelSize": 1, "replicas": 3}})
    assert caches.job_name(service) == caches.job_name(scaled) == caches.job_name(_service(CLAIM))


def test_an_immutable_template_change_renames_the_job_but_keeps_the_marker() -> None:
    service, reimaged = _service(CLAIM), _service({**CLAIM, "spec.sglang.image": "example.invalid/sglang:other"})
    assert caches.job_name(service) != caches.job_name(reimaged)
    assert caches.marker(service) == caches.marker(reimaged)


def test_the_old_job_is_pruned_when_the_revision_changes() -> None:
    owner = {"metadata": {"name": "base", "namespace": "ns", "uid": "u1"}}
    old = render(_service(CLAIM), OperatorConfig())
    new = render(_service({**CLAIM, "spec.model.revision": "v2"}), OperatorConfig())
    (old_job,) = _kinds(old, "Job")
    live = {**old_job, "metadata": {**old_job["metadata"], "uid": "j1", "ownerReferences": [{"uid": "u1"}]}}
    _, wanted = apply.prepare(owner, new, [live])
    assert apply.ref(old_job) not in wanted
    assert apply.ref(_kinds(new, "Job")[0]) in wanted


def test_claim_cache_pools_wait_for_the_marker_and_run_offline() -> None:
    service = _service(CLAIM)
    manifests = render(service, OperatorConfig())
    for role in ("prefill", "decode"):
        pod = _pool(manifests, role)
        (wait,) = pod["initContainers"]
        assert wait["name"] == "wait-model-cache"
        assert wait["command"][-1] == caches.marker(service)
        server = pod["containers"][0]
        env = _env(server)
        assert env["HF_HOME"] == caches.MODEL_CACHE_PATH and env["HF_HUB_OFFLINE"] == "1"
        assert {"name": "model-cache", "mountPath": "/model-cache", "readOnly": True} in server["volumeMounts"]
        # The weights are on the claim, not in the writable layer: no ephemeral-storage request.
        assert "ephemeral-storage" not in server["resources"]["requests"]


@pytest.mark.parametrize("edits", [CLAIM, NODE_LOCAL], ids=["claim", "node-local"])
def test_remote_code_gets_a_writable_modules_cache_outside_hf_home(edits: dict[str, Any]) -> None:
    """HF_HOME is read-only for the servers; transformers copies a repo's remote code into HF_MODULES_CACHE (default
    $HF_HOME/modules), so that gets an emptyDir of its own, writable and not below HF_HOME."""
    manifests = render(_service({**edits, "spec.model.trustRemoteCode": True}), OperatorConfig())
    for role in ("prefill", "decode"):
        pod = _pool(manifests, role)
        server = pod["containers"][0]
        env = _env(server)
        modules = env["HF_MODULES_CACHE"]
        assert modules == caches.MODULES_CACHE_PATH
        assert not modules.startswith(env["HF_HOME"].rstrip("/") + "/") and modules != env["HF_HOME"]
        (mount,) = [m for m in server["volumeMounts"] if m["mountPath"] == modules]
        assert not mount.get("readOnly", False)
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume == {"name": mount["name"], "emptyDir": {"sizeLimit": caches.MODULES_CACHE_SIZE}}
        # Only the server: the init containers run no model code.
        assert all(mount["name"] not in {m["name"] for m in c["volumeMounts"]} for c in pod["initContainers"])


def test_no_model_cache_no_modules_cache() -> None:
    pod = _pool(render(_service({**COMPILE, "spec.model.trustRemoteCode": True}), OperatorConfig()), "prefill")
    assert "HF_MODULES_CACHE" not in _env(pod["containers"][0])
    assert caches.MODULES_CACHE_VOLUME not in {v["name"] for v in pod["volumes"]}


def test_node_local_cache_fills_in_each_pod_and_renders_no_job() -> None:
    service = _service(NODE_LOCAL)
    manifests = render(service, OperatorConfig())
    assert not _kinds(manifests, "Job")
    pod = _pool(manifests, "decode")
    (fill,) = pod["initContainers"]
    assert fill["name"] == "fill-model-cache" and fill["command"][3] == caches.marker(service)
    assert {"name": "model-cache", "hostPath": {"path": "/nvme/hf", "type": "DirectoryOrCreate"}} in pod["volumes"]


@pytest.mark.parametrize(("version", "deep_gemm"), [("0.5.23", "SGLANG_DG_CACHE_DIR"), ("0.5.2", "SGL_DG_CACHE_DIR")])
def test_compile_cache_variables_point_below_its_mount(version: str, deep_gemm: str) -> None:
    manifests = render(_service({**COMPILE, "spec.sglang.version": version}), OperatorConfig())
    server = _pool(manifests, "prefill")["containers"][0]
    env = _env(server)
    assert env[deep_gemm] == "/compile-cache/deep_gemm"
    assert env["SGLANG_CACHE_DIR"] == env["FLASHINFER_WORKSPACE_BASE"] == caches.COMPILE_CACHE_PATH
    assert env["TRITON_CACHE_DIR"] == "/compile-cache/triton"
    assert "HF_HOME" not in env  # no model cache: the weights stay where they were (not on the compile cache)
    assert {"name": "compile-cache", "mountPath": "/compile-cache"} in server["volumeMounts"]


def test_both_caches_keep_hf_home_apart_from_the_compile_cache() -> None:
    env = _env(_pool(render(_service({**CLAIM, **COMPILE}), OperatorConfig()), "decode")["containers"][0])
    assert env["HF_HOME"] == "/model-cache"
    assert all(not str(v).startswith("/model-cache") for k, v in env.items() if k != "HF_HOME")


def test_caches_do_not_change_the_fingerprint() -> None:
    assert fingerprint(_service({})) == fingerprint(_service({**CLAIM, **COMPILE}))


def test_reconcile_observes_the_rendered_job_only() -> None:
    service = _service(CLAIM)
    name = caches.job_name(service)
    stale = {"kind": "Job", "metadata": {"name": "base-cache-0000000000"}, "status": {}}
    current = {"kind": "Job", "metadata": {"name": name}, "status": {"active": 1}}
    observed = reconcile.model_cache_observation(service, [stale, current])
    assert observed is not None and observed.job_name == name and observed.job == current
    assert reconcile.model_cache_observation(_service({}), [current]) is None
    node_local = reconcile.model_cache_observation(_service(NODE_LOCAL), [])
    assert node_local is not None and node_local.job_name is None
