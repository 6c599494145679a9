"""Remote code on a read-only model cache, with the real transformers and huggingface_hub of the pinned release.

With `spec.model.cache` the operator mounts the cache read-only at HF_HOME. A repo whose config.json has `auto_map`
(DeepSeek-V3/R1, Kimi-K2) is loaded by SGLang with `AutoConfig.from_pretrained(..., trust_remote_code=True)`, and
transformers copies the repo's module into HF_MODULES_CACHE, `$HF_HOME/modules` by default
(`transformers/utils/hub.py`; `dynamic_module_utils.get_cached_module_file`, `create_dynamic_module`). These tests
take the server container's environment and mounts from the operator's real render of
`examples/deepseek-r1-mtp.yaml` (which ships the model cache), map each mount to a local directory (the model cache
read-only, the rendered emptyDir writable), and load a small remote-code repo in a child process with that
environment: it fails with HF_MODULES_CACHE taken out of the rendered environment (the render before issue 29), and
passes with it, writing nothing below HF_HOME.

Read-only for real: the suite may run as root, which a 0555 directory does not stop (CAP_DAC_OVERRIDE). The child
therefore drops CAP_DAC_OVERRIDE and CAP_FOWNER from its capability bounding set before it execs
(prctl(PR_CAPBSET_DROP)), so on exec it keeps neither and root is held to the permission bits like any owner; as
another user the bits alone hold. Each test first checks, in exactly that setup, that a write below HF_HOME fails.
"""

from __future__ import annotations

import ctypes
import json
import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import sglang_version

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "operator"))

from disaggspec.api import parse_service  # noqa: E402
from disaggspec.config import OperatorConfig  # noqa: E402
from disaggspec.render import render  # noqa: E402

EXAMPLE = REPO / "examples" / "deepseek-r1-mtp.yaml"
REPO_ID = "disaggspec-test/remote-config"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_FOWNER = 1, 3
CONFIG_MODULE = """\
from transformers import PretrainedConfig


class RemoteConfig(PretrainedConfig):
    model_type = "disaggspec_remote"

    def __init__(self, marker_from_remote_code="loaded", **kwargs):
        self.marker_from_remote_code = marker_from_remote_code
        super().__init__(**kwargs)
"""
CONFIG = {
    "architectures": ["RemoteModel"],
    "auto_map": {"AutoConfig": "configuration_remote.RemoteConfig"},
    "model_type": "disaggspec_remote",
    "marker_from_remote_code": "from config.json",
}
LOAD = """\
import json, sys
from transformers import AutoConfig
config = AutoConfig.from_pretrained(sys.argv[1], trust_remote_code=True)
print(json.dumps({"class": type(config).__name__, "module": type(config).__module__,
                  "marker": config.marker_from_remote_code}))
"""
PROBE = "import sys; open(sys.argv[1] + '/written-by-the-server', 'w')"


def _server() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The prefill server container of the example as the operator renders it at the release under test, and the
    pod's volumes by name."""
    obj = yaml.safe_load(EXAMPLE.read_text())
    obj["metadata"]["namespace"] = "hf-modules"
    obj["spec"]["sglang"]["version"] = sglang_version()
    manifests = render(parse_service(obj), OperatorConfig())
    (prefill,) = [
        m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["labels"]["disaggspec.io/role"] == "prefill"
    ]
    pod = prefill["spec"]["template"]["spec"]
    return pod["containers"][0], {v["name"]: v for v in pod["volumes"]}


def _drop_dac_override() -> None:
    """In the child before exec: no capability may bypass file permission bits after the exec."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_FOWNER):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, preexec_fn=_drop_dac_override, capture_output=True, text=True, timeout=300, check=False
    )


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _make_read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if path.is_dir():
            path.chmod(0o555)
        else:
            path.chmod(0o444)


class Node:
    """The server container's filesystem as far as these tests need it: each rendered mount of the model cache and of
    the modules emptyDir as a local directory, and the rendered environment with its paths mapped onto them."""

    def __init__(self, base: Path) -> None:
        container, volumes = _server()
        self.rendered = {e["name"]: e["value"] for e in container["env"] if "value" in e}
        paths = [value for name, value in self.rendered.items() if name.startswith("HF_") and value.startswith("/")]
        self.mounts: dict[str, Path] = {}
        self.read_only: dict[str, bool] = {}
        self.volumes: dict[str, dict[str, Any]] = {}
        for mount in container["volumeMounts"]:
            where = mount["mountPath"]
            if any(path == where or path.startswith(where.rstrip("/") + "/") for path in paths):
                self.mounts[where] = base / mount["name"]
                self.mounts[where].mkdir()
                self.read_only[where] = bool(mount.get("readOnly", False))
                self.volumes[where] = volumes[mount["name"]]
        self.hf_home = self.local(self.rendered["HF_HOME"])

    def local(self, path: str) -> Path:
        for mount_path, local in self.mounts.items():
            if path == mount_path or path.startswith(mount_path.rstrip("/") + "/"):
                return local / os.path.relpath(path, mount_path)
        raise LookupError(f"{path} is on no mount the render gives the server: {sorted(self.mounts)}")

    def env(self, home: Path, without: tuple[str, ...] = ()) -> dict[str, str]:
        """The rendered HF_* environment (paths mapped here), minus `without`, plus what a process needs to run."""
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
        for name, value in self.rendered.items():
            if name.startswith("HF_") and name not in without:
                env[name] = str(self.local(value)) if value.startswith("/") else value
        return env


@pytest.fixture
def node() -> Iterator[Node]:
    # Not pytest's tmp_path: it lives below a 0700 directory of the test's user, which is fine here (same user) but
    # this keeps the tree independent of it. Everything is removed at the end, read-only parts made writable first.
    base = Path(tempfile.mkdtemp(prefix="disaggspec-hf-modules-"))
    base.chmod(0o755)
    try:
        made = Node(base)
        # The fill Job's result: the repo in the hub cache layout below HF_HOME (refs/main -> a snapshot).
        cache = made.hf_home / "hub" / f"models--{REPO_ID.replace('/', '--')}"
        snapshot = cache / "snapshots" / COMMIT
        snapshot.mkdir(parents=True)
        (cache / "refs").mkdir()
        (cache / "refs" / "main").write_text(COMMIT)
        (snapshot / "config.json").write_text(json.dumps(CONFIG))
        (snapshot / "configuration_remote.py").write_text(CONFIG_MODULE)
        # The same files as a plain local directory (a model path given as a directory on the cache).
        local_repo = made.hf_home / "local-repo"
        local_repo.mkdir()
        for name in ("config.json", "configuration_remote.py"):
            (local_repo / name).write_text((snapshot / name).read_text())
        _make_read_only(made.hf_home)
        yield made
    finally:
        for path in [base, *base.rglob("*")]:
            if path.is_dir():
                path.chmod(stat.S_IRWXU)
        subprocess.run(["rm", "-rf", str(base)], check=False)


def test_the_render_mounts_hf_home_read_only_and_the_modules_cache_writable(node: Node) -> None:
    home, modules = node.rendered["HF_HOME"], node.rendered["HF_MODULES_CACHE"]
    assert node.read_only[home] is True and "persistentVolumeClaim" in node.volumes[home]
    assert not modules.startswith(home.rstrip("/") + "/")
    assert node.read_only[modules] is False and "emptyDir" in node.volumes[modules]
    assert node.rendered["HF_HUB_OFFLINE"] == "1"


@pytest.mark.parametrize("target", ["repo-id", "local-directory"])
def test_remote_code_needs_the_rendered_modules_cache(node: Node, target: str) -> None:
    home = Path(tempfile.mkdtemp(prefix="disaggspec-home-"))
    try:
        model = REPO_ID if target == "repo-id" else str(node.hf_home / "local-repo")
        before = _tree(node.hf_home)

        # The setup really refuses writes below HF_HOME (see the module docstring for why this holds as root).
        probe = _run([sys.executable, "-c", PROBE, str(node.hf_home)], node.env(home))
        assert probe.returncode != 0 and "Permission denied" in probe.stderr, probe.stderr

        # As rendered before issue 29: no HF_MODULES_CACHE, so transformers writes $HF_HOME/modules and fails.
        without = _run([sys.executable, "-c", LOAD, model], node.env(home, without=("HF_MODULES_CACHE",)))
        assert without.returncode != 0, without.stdout
        assert "PermissionError" in without.stderr and "modules" in without.stderr, without.stderr[-3000:]

        # As rendered now: the module is copied into the emptyDir and the remote class is used.
        with_cache = _run([sys.executable, "-c", LOAD, model], node.env(home))
        assert with_cache.returncode == 0, with_cache.stderr[-3000:]
        loaded = json.loads(with_cache.stdout.strip().splitlines()[-1])
        assert loaded["class"] == "RemoteConfig" and loaded["module"].startswith("transformers_modules."), loaded
        assert loaded["marker"] == "from config.json", loaded
        modules = node.local(node.rendered["HF_MODULES_CACHE"])
        assert list(modules.rglob("configuration_remote.py")), _tree(modules)
        assert _tree(node.hf_home) == before  # nothing written below HF_HOME
    finally:
        subprocess.run(["rm", "-rf", str(home)], check=False)
