"""The serving launcher's per-pod emulator options: annotations become `--emulate` items, and the pod's spec-fingerprint
label becomes the cross-revision oracle's `revision` unless an annotation sets it; no cluster, no process."""

from __future__ import annotations

from typing import Any

from e2e.serving.launch import ServingLauncher, emulator_options

FINGERPRINT = "0123456789abcdef"


def pool_pod(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama-decode-x", "namespace": "ns", "labels": labels, "annotations": annotations},
        "status": {"podIP": "127.40.0.9"},
    }


def test_annotations_become_sorted_emulate_items() -> None:
    pod = pool_pod({}, {"emulator.disaggspec.io/load-seconds": "2", "emulator.disaggspec.io/fail": "crash", "x": "y"})
    assert emulator_options(pod) == ["--emulate", "fail=crash", "--emulate", "load-seconds=2"]


def test_the_fingerprint_label_is_the_revision_unless_annotated() -> None:
    labelled = pool_pod({"disaggspec.io/spec-fingerprint": FINGERPRINT}, {"emulator.disaggspec.io/fail": "crash"})
    assert emulator_options(labelled) == ["--emulate", "fail=crash", "--emulate", f"revision={FINGERPRINT}"]
    overridden = pool_pod({"disaggspec.io/spec-fingerprint": FINGERPRINT}, {"emulator.disaggspec.io/revision": "other"})
    assert emulator_options(overridden) == ["--emulate", "revision=other"]
    assert emulator_options(pool_pod({}, {})) == []
    assert emulator_options(pool_pod({"disaggspec.io/spec-fingerprint": ""}, {})) == []


def test_the_node_selectors_gpu_product_is_the_capacity_models_gpu_unless_annotated() -> None:
    pod = {**pool_pod({}, {}), "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"}}}
    assert emulator_options(pod) == ["--emulate", "gpu=NVIDIA-H200"]
    annotated = {**pool_pod({}, {"emulator.disaggspec.io/gpu": "NVIDIA-H100-80GB-HBM3"}), "spec": pod["spec"]}
    assert emulator_options(annotated) == ["--emulate", "gpu=NVIDIA-H100-80GB-HBM3"]


def test_pool_pod_plan_carries_the_revision() -> None:
    pod = pool_pod({"app.kubernetes.io/version": "0.5.23", "disaggspec.io/spec-fingerprint": FINGERPRINT}, {})
    container = {"name": "sglang", "command": ["python3", "-m", "sglang.launch_server"], "args": ["--model-path", "m"]}
    plan = ServingLauncher(admin_kubeconfig="/dev/null").plan(pod, container)
    assert plan is not None
    split = plan.argv.index("--")
    assert plan.argv[split - 2 : split] == ["--emulate", f"revision={FINGERPRINT}"]
    assert plan.argv[split + 1 :] == ["--model-path", "m"]


def test_leaderworkerset_worker_pod_plan() -> None:
    """A worker pod of a LeaderWorkerSet group: the kubelet expands the LWS env into the args, the emulator gets the
    expanded values (ints and a pod DNS name), its namespace and the runner's kubeconfig for the cluster-DNS
    stand-in; the name itself stays in the argv (resolved at connect time)."""
    from e2e.serving.emulator.sglang_args import server_config
    from e2e.serving.podenv import resolve_container

    pod = pool_pod({"app.kubernetes.io/version": "0.5.23", "leaderworkerset.sigs.k8s.io/worker-index": "1"}, {})
    pod["spec"] = {"hostname": "llama-decode-0-1", "subdomain": "llama-decode"}
    container = {
        "name": "sglang",
        "command": ["python3", "-m", "sglang.launch_server"],
        "args": ["--model-path", "m", "--tp-size", "16", "--host", "0.0.0.0", "--nnodes", "$(LWS_GROUP_SIZE)",
                 "--node-rank", "$(LWS_WORKER_INDEX)", "--dist-init-addr", "$(LWS_LEADER_ADDRESS):20000"],
        # As the LWS pod webhook injects them.
        "env": [{"name": "LWS_LEADER_ADDRESS", "value": "llama-decode-0.llama-decode.ns"},
                {"name": "LWS_GROUP_SIZE", "value": "2"}, {"name": "LWS_WORKER_INDEX", "value": "1"}],
    }  # fmt: skip
    resolved = resolve_container(pod, container, lambda kind, namespace, name: None).container
    plan = ServingLauncher(admin_kubeconfig="/state/admin.kubeconfig").plan(pod, resolved)
    assert plan is not None
    split = plan.argv.index("--")
    ours = plan.argv[:split]
    assert ours[ours.index("--namespace") + 1] == "ns"
    assert ours[ours.index("--kubeconfig") + 1] == "/state/admin.kubeconfig"
    sglang = plan.argv[split + 1 :]
    assert sglang[sglang.index("--dist-init-addr") + 1] == "llama-decode-0.llama-decode.ns:20000"
    cfg = server_config("0.5.23", sglang)
    assert (cfg.nnodes, cfg.node_rank, cfg.dist_init_addr) == (2, 1, "llama-decode-0.llama-decode.ns:20000")
    without = ServingLauncher(admin_kubeconfig="").plan(pod, resolved)
    assert without is not None and "--kubeconfig" not in without.argv


def test_the_drain_is_bounded_by_the_pods_grace_period() -> None:
    """SGLang drains without a bound of its own: the emulator's bound is the pod's terminationGracePeriodSeconds (a
    time-scaled generation may take minutes of wall time), the kubelet's default 30 s when unset."""
    pod = pool_pod({"app.kubernetes.io/version": "0.5.2"}, {})
    container = {"name": "sglang", "command": ["python3", "-m", "sglang.launch_server"], "args": ["--model-path", "m"]}
    plan = ServingLauncher(admin_kubeconfig="").plan(pod, container)
    assert plan is not None
    assert plan.argv[plan.argv.index("--drain-timeout") + 1] == "30"
    pod["spec"] = {"terminationGracePeriodSeconds": 600}
    plan = ServingLauncher(admin_kubeconfig="").plan(pod, container)
    assert plan is not None
    ours = plan.argv[: plan.argv.index("--")]
    assert ours[ours.index("--drain-timeout") + 1] == "600"
