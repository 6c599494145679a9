"""The router image (images/router/): its build script pins what the profiles pin, and its readiness helper's verdict.

The Dockerfile's hadolint check lives with the other Dockerfiles in test_chart.py; the helper runs for real against
a live router in the serving simulation (e2e/tests/test_serving_local.py).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from disaggspec.sglang.profiles import PROFILES

REPO = Path(__file__).resolve().parents[3]
ROUTER_IMAGE = REPO / "images" / "router"


def _helper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("router_ready", ROUTER_IMAGE / "router_ready.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("version", sorted(PROFILES))
def test_build_script_installs_the_pinned_router(version: str) -> None:
    router = PROFILES[version].router  # type: ignore[index]
    shown = subprocess.run(
        ["bash", str(ROUTER_IMAGE / "build.sh"), version],
        env={**os.environ, "DRY_RUN": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"ROUTER_PACKAGE={router.package}" in shown
    assert f"ROUTER_VERSION={router.version}" in shown
    assert f"--tag {router.image}" in shown


def test_build_script_refuses_an_unsupported_release() -> None:
    refused = subprocess.run(["bash", str(ROUTER_IMAGE / "build.sh"), "0.4.0"], capture_output=True, text=True)
    assert refused.returncode == 2 and "unsupported SGLang version" in refused.stderr


def _worker(role: str, healthy: bool) -> dict[str, object]:
    return {"worker_type": role, "is_healthy": healthy, "url": f"http://127.1.0.1:30000/{role}"}


@pytest.mark.parametrize(
    ("workers", "ready"),
    [
        ([_worker("prefill", True), _worker("decode", True)], True),
        ([_worker("prefill", True), _worker("decode", False)], False),
        ([_worker("decode", True)], False),
        ([_worker("prefill", True)], False),
        ([], False),
        ([_worker("prefill", True), _worker("decode", True), _worker("decode", False)], True),
    ],
)
def test_ready_only_with_a_healthy_prefill_and_decode(workers: list[dict[str, object]], ready: bool) -> None:
    reason = _helper().verdict({"workers": workers, "total": len(workers)})
    assert (reason is None) is ready
    if not ready:
        assert "no healthy" in reason


def test_a_malformed_answer_is_not_ready() -> None:
    assert "no worker list" in _helper().verdict({"status": "ready"})
    assert "no worker list" in _helper().verdict(["not", "a", "dict"])


def test_an_unreachable_router_is_not_ready() -> None:
    # Port 9 on 127.0.0.1 (discard) is not listening on this machine: the helper must fail, not hang or pass.
    assert _helper().main(["--url", "http://127.0.0.1:9", "--timeout", "1"]) == 1
