"""The model cache in the serving simulation (`e2e.serving.modelcache`): the fill Job's container becomes a stand-in
that writes the marker and downloads nothing, the pool containers wait for that marker before the emulator starts;
from the operator's real render of the shipped DeepSeek example and of the hostPath golden case; no cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from disaggspec.api import parse_service
from disaggspec.config import OperatorConfig
from disaggspec.render import caches, render
from e2e.serving import modelcache
from e2e.serving.launch import REPO, ServingLauncher

NAMESPACE = "sim"


def _manifests(source: Path) -> list[dict[str, Any]]:
    obj = yaml.safe_load(source.read_text())
    obj["metadata"]["namespace"] = NAMESPACE
    return render(parse_service(obj), OperatorConfig())


def _pod(template: dict[str, Any], name: str, node: str) -> dict[str, Any]:
    """A pod of `template` as the runner sees it: bound to `node`, with a loopback IP."""
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(template["metadata"]["labels"])},
        "spec": {**template["spec"], "nodeName": node},
        "status": {"podIP": "127.40.0.9", "phase": "Running"},
    }


def _of_kind(manifests: list[dict[str, Any]], kind: str, role: str) -> dict[str, Any]:
    (found,) = [m for m in manifests if m["kind"] == kind and m["metadata"]["labels"]["disaggspec.io/role"] == role]
    return found


def _env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'operator'}"}


def test_the_fill_job_and_the_pools_meet_at_one_marker_on_the_claim(tmp_path: Path) -> None:
    manifests = _manifests(REPO / "examples" / "deepseek-r1-mtp.yaml")
    launcher = ServingLauncher(admin_kubeconfig="/dev/null", volumes=tmp_path)
    job = _of_kind(manifests, "Job", caches.CACHE_ROLE)
    job_pod = _pod(job["spec"]["template"], "fill-x", "gpu-node-1")
    fill = launcher.plan(job_pod, job_pod["spec"]["containers"][0])
    assert fill is not None
    assert fill.argv[:4] == [sys.executable, "-m", "e2e.serving.modelcache", "init"] and fill.argv[-1] == "--"
    (step,) = json.loads(fill.argv[4])
    claim = tmp_path / "claims" / NAMESPACE / "deepseek-hf-cache"
    marker_in_pod = job_pod["spec"]["containers"][0]["command"][3]
    assert step["fill"] == str(claim / os.path.relpath(marker_in_pod, caches.MODEL_CACHE_PATH))
    assert step["repos"] == ["deepseek-ai/DeepSeek-R1", ""]

    # Both pools (on other nodes: the claim is shared) wait for that marker, then exec the emulator.
    for role in ("prefill", "decode"):
        template = _of_kind(manifests, "Deployment", role)["spec"]["template"]
        pod = _pod(template, f"{role}-x", "gpu-node-2")
        plan = launcher.plan(pod, pod["spec"]["containers"][0])
        assert plan is not None
        assert plan.argv[:4] == [sys.executable, "-m", "e2e.serving.modelcache", "init"]
        assert json.loads(plan.argv[4]) == [{"wait": step["fill"]}]
        emulator = plan.argv[plan.argv.index("--") + 1 :]
        assert emulator[:3] == [sys.executable, "-m", "e2e.serving.emulator"]


def test_the_pool_starts_only_once_the_stand_in_fill_wrote_the_marker(tmp_path: Path) -> None:
    """The real processes: the pool's wait holds its command until the fill stand-in has run; the stand-in exits 0,
    writes what the fill script writes, and never imports huggingface_hub (a poisoned copy is first on its path)."""
    manifests = _manifests(REPO / "examples" / "deepseek-r1-mtp.yaml")
    launcher = ServingLauncher(admin_kubeconfig="/dev/null", volumes=tmp_path)
    template = _of_kind(manifests, "Deployment", "prefill")["spec"]["template"]
    pod = _pod(template, "prefill-x", "gpu-node-2")
    steps = modelcache.init_steps(tmp_path, pod)
    waiting = subprocess.Popen(
        modelcache.init_argv(steps, [sys.executable, "-c", "print('server started')"]),
        env=_env(),
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2 * modelcache.POLL_SECONDS + 0.5)
        assert waiting.poll() is None, "the pool started before the cache was filled"

        poisoned = tmp_path / "poisoned"
        (poisoned / "huggingface_hub").mkdir(parents=True)
        (poisoned / "huggingface_hub" / "__init__.py").write_text("raise SystemExit('the stand-in must not download')")
        job = _of_kind(manifests, "Job", caches.CACHE_ROLE)
        job_pod = _pod(job["spec"]["template"], "fill-x", "gpu-node-1")
        fill = launcher.plan(job_pod, job_pod["spec"]["containers"][0])
        assert fill is not None
        env = {**_env(), "PYTHONPATH": f"{poisoned}{os.pathsep}{_env()['PYTHONPATH']}"}
        done = subprocess.run(fill.argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert "not downloading deepseek-ai/DeepSeek-R1" in done.stdout
        marker = Path(steps[0]["wait"])
        assert marker.read_text() == "deepseek-ai/DeepSeek-R1 \n"  # the fill script's content: repo, empty revision

        out, _ = waiting.communicate(timeout=30)
        assert waiting.returncode == 0 and f"model cache marker present: {marker}\nserver started" in out, out
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()


def test_a_node_local_cache_fills_per_node_before_the_server(tmp_path: Path) -> None:
    manifests = _manifests(REPO / "operator" / "tests" / "golden" / "model-cache-node-local" / "input.yaml")
    assert not [m for m in manifests if m["kind"] == "Job"]
    template = _of_kind(manifests, "Deployment", "decode")["spec"]["template"]
    pod = _pod(template, "decode-x", "gpu-node-3")
    (step,) = modelcache.init_steps(tmp_path, pod)
    host_path = next(v for v in pod["spec"]["volumes"] if v["name"] == caches.MODEL_CACHE_VOLUME)["hostPath"]["path"]
    assert step["fill"].startswith(str(tmp_path / "nodes" / "gpu-node-3" / host_path.lstrip("/")) + "/")
    assert step["repos"]
    done = subprocess.run(
        modelcache.init_argv([step], [sys.executable, "-c", "print('server started')"]),
        env=_env(),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and "server started" in done.stdout, done.stderr
    assert Path(step["fill"]).is_file()


def test_pods_without_a_cache_and_other_volumes_are_left_alone(tmp_path: Path) -> None:
    manifests = _manifests(REPO / "examples" / "llama-3.1-8b-eagle3.yaml")
    template = _of_kind(manifests, "Deployment", "prefill")["spec"]["template"]
    pod = _pod(template, "prefill-x", "gpu-node-2")
    assert modelcache.init_steps(tmp_path, pod) == []
    plan = ServingLauncher(admin_kubeconfig="/dev/null", volumes=tmp_path).plan(pod, pod["spec"]["containers"][0])
    assert plan is not None and plan.argv[:3] == [sys.executable, "-m", "e2e.serving.emulator"]
    assert modelcache.volume_dir(tmp_path, pod, "dshm") is None  # an emptyDir is not mapped
