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


def test_pool_pod_plan_carries_the_revision() -> None:
    pod = pool_pod({"app.kubernetes.io/version": "0.5.23", "disaggspec.io/spec-fingerprint": FINGERPRINT}, {})
    container = {"name": "sglang", "command": ["python3", "-m", "sglang.launch_server"], "args": ["--model-path", "m"]}
    plan = ServingLauncher(admin_kubeconfig="/dev/null").plan(pod, container)
    assert plan is not None
    split = plan.argv.index("--")
    assert plan.argv[split - 2 : split] == ["--emulate", f"revision={FINGERPRINT}"]
    assert plan.argv[split + 1 :] == ["--model-path", "m"]
