"""Builds the local control plane's binaries from the Go module proxy into a cache keyed by version.

Each component (Kubernetes, etcd, kwok, helm, promtool for the chart's alert-rule tests, the LeaderWorkerSet
controller, and the Prometheus server and prometheus-adapter of the optional metrics pipeline) is built once into
``${XDG_CACHE_HOME:-~/.cache}/disaggspec/<component>-<version>/``; a version bump in ``versions.py`` picks a new
directory, so it rebuilds. A build happens in a scratch directory and is renamed into place only when it succeeded,
so an interrupted build never leaves a half-filled cache entry behind.

k8s.io/kubernetes cannot be ``go install``-ed: its go.mod replaces every staging module (k8s.io/api, client-go, ...)
with a local path. We generate a wrapper module that requires k8s.io/kubernetes and pins each of those staging modules
to the matching v0.X.Y release, read from the real go.mod of the pinned release, and stamp the version with -ldflags
so ``/version`` and ``kubectl version`` report the release and not v0.0.0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.cluster import versions


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "disaggspec"


@dataclass(frozen=True)
class Component:
    """One cached component: where it lives and which executables it must contain."""

    name: str
    version: str
    executables: tuple[str, ...]

    @property
    def directory(self) -> Path:
        return cache_root() / f"{self.name}-{self.version}"

    def path(self, executable: str) -> Path:
        return self.directory / "bin" / executable

    def is_built(self) -> bool:
        return all(self.path(e).is_file() and os.access(self.path(e), os.X_OK) for e in self.executables)


KUBERNETES = Component(
    "kubernetes",
    versions.KUBERNETES,
    ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
)
ETCD = Component("etcd", versions.ETCD, ("etcd",))
KWOK = Component("kwok", versions.KWOK, ("kwok",))
HELM = Component("helm", versions.HELM, ("helm",))
PROMTOOL = Component("promtool", versions.PROMETHEUS, ("promtool",))
LWS = Component("lws", versions.LWS, ("lws-controller",))
PROMETHEUS = Component("prometheus", versions.PROMETHEUS, ("prometheus",))
PROMETHEUS_ADAPTER = Component("prometheus-adapter", versions.PROMETHEUS_ADAPTER, ("prometheus-adapter",))
ALL = (ETCD, KWOK, HELM, KUBERNETES, PROMTOOL, LWS, PROMETHEUS, PROMETHEUS_ADAPTER)

LWS_MANIFESTS = {
    "crds": "config/crd/bases",
    "webhook": "config/webhook",
    "rbac": "config/rbac",
}
"""What the LWS cache entry keeps of its module, besides the binary: `<cache>/lws-<version>/<key>/` holds the `*.yaml`
files of the module directory named by the value (the CRDs, the webhook configurations with their kustomize patches,
the controller's ClusterRole); the local control plane renders and applies them (`lws.py`)."""


# go.etcd.io/etcd/server/v3 is a library; etcdmain.Main is the real etcd entry point.
ETCD_MAIN = """package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


class BuildError(RuntimeError):
    """A component could not be built; the message says what to do."""


def log(message: str) -> None:
    print(f"[build] {message}", file=sys.stderr, flush=True)


def check_go() -> str:
    """Return the go executable, or fail at once naming the Go version the pinned modules need."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(f"go not found on PATH: install Go {versions.GO_MIN} or newer to build the local cluster")
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    match = re.match(r"go(\d+)\.(\d+)", out)
    if match is None:
        raise BuildError(f"cannot read the Go version from {out!r}; Go {versions.GO_MIN} or newer is required")
    have = (int(match.group(1)), int(match.group(2)))
    need = tuple(int(p) for p in versions.GO_MIN.split(".")[:2])
    if have < need:
        raise BuildError(f"{out} is too old: Kubernetes {versions.KUBERNETES} needs Go {versions.GO_MIN} or newer")
    return go


def _run_go(go: str, args: list[str], cwd: Path, label: str, env: dict[str, str] | None = None) -> None:
    """Run a go command, relaying progress: `go build -v` names each package as it compiles it."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [go, *args],
        cwd=cwd,
        env={**os.environ, "CGO_ENABLED": "0", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    tail: list[str] = []
    last_report = 0.0
    for count, raw in enumerate(proc.stdout, start=1):
        line = raw.rstrip()
        tail = [*tail[-29:], line]
        now = time.monotonic()
        if now - last_report > 15:
            log(f"{label}: {count} packages so far, {now - started:.0f}s elapsed (last: {line[:80]})")
            last_report = now
    if proc.wait() != 0:
        raise BuildError(f"{label} failed:\n" + "\n".join(tail))
    log(f"{label}: done in {time.monotonic() - started:.0f}s")


def _write_module(directory: Path, module: str, requires: dict[str, str], replaces: dict[str, str], main: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lines = [f"module {module}", "", f"go {versions.GO_MIN}", "", "require ("]
    lines += [f"\t{path} {version}" for path, version in sorted(requires.items())]
    lines += [")", ""]
    if replaces:
        lines += ["replace ("]
        lines += [f"\t{path} => {path} {version}" for path, version in sorted(replaces.items())]
        lines += [")", ""]
    (directory / "go.mod").write_text("\n".join(lines))
    (directory / "main.go").write_text(main)


def _mod_download(go: str, module: str, scratch: Path) -> dict[str, Any]:
    """`go mod download -json module` (module@version): where the module's files and go.mod are in the module cache."""
    out = subprocess.run([go, "mod", "download", "-json", module], cwd=scratch, capture_output=True, text=True)
    if out.returncode != 0:
        raise BuildError(f"cannot download {module}: {out.stdout}{out.stderr}")
    info: dict[str, Any] = json.loads(out.stdout)
    return info


def _staging_modules(go: str, scratch: Path) -> list[str]:
    """The staging modules the pinned k8s.io/kubernetes replaces with local paths, read from its real go.mod."""
    gomod = Path(_mod_download(go, f"k8s.io/kubernetes@{versions.KUBERNETES}", scratch)["GoMod"]).read_text()
    return sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", gomod, re.MULTILINE)))


def _finish(component: Component, staged: Path) -> None:
    """Move a complete build into the cache in one rename."""
    target = component.directory
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, target)


def _build_tools(go: str, module_dir: Path, ldflags: list[str], output: Path, packages: list[str], label: str) -> None:
    """`go build` of `packages` in a wrapper module whose imports sit behind the `tools` build tag."""
    argv = ["build", "-v", "-trimpath", "-tags", "tools", "-ldflags", " ".join(ldflags), "-o", str(output)]
    _run_go(go, [*argv, *packages], module_dir, label)


def build_kubernetes(go: str) -> None:
    component = KUBERNETES
    with tempfile.TemporaryDirectory(prefix="k8s-build-", dir=cache_root()) as tmp:
        scratch = Path(tmp)
        staging = _staging_modules(go, scratch)
        log(f"kubernetes {component.version}: pinning {len(staging)} staging modules to {versions.staging()}")
        tools = "\n".join(f'\t_ "k8s.io/kubernetes/cmd/{exe}"' for exe in component.executables)
        main = f"//go:build tools\n\npackage tools\n\nimport (\n{tools}\n)\n"
        module_dir = scratch / "module"
        _write_module(
            module_dir,
            "disaggspec.io/localcluster/kubernetes",
            {"k8s.io/kubernetes": component.version},
            {path: versions.staging() for path in staging},
            main,
        )
        _run_go(go, ["mod", "tidy"], module_dir, "kubernetes: go mod tidy")
        major, minor = component.version.lstrip("v").split(".")[:2]
        stamp = {
            "gitVersion": component.version,
            "gitMajor": major,
            "gitMinor": minor,
            "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z",
        }
        ldflags = ["-s", "-w"]
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            ldflags += [f"-X {package}.{key}={value}" for key, value in stamp.items()]
        out = scratch / "out"
        (out / "bin").mkdir(parents=True)
        packages = [f"k8s.io/kubernetes/cmd/{exe}" for exe in component.executables]
        _build_tools(go, module_dir, ldflags, out / "bin", packages, f"kubernetes {component.version}")
        _finish(component, out)


def build_etcd(go: str) -> None:
    component = ETCD
    with tempfile.TemporaryDirectory(prefix="etcd-build-", dir=cache_root()) as tmp:
        scratch = Path(tmp)
        module_dir = scratch / "module"
        main = ETCD_MAIN
        _write_module(
            module_dir, "disaggspec.io/localcluster/etcd", {"go.etcd.io/etcd/server/v3": component.version}, {}, main
        )
        _run_go(go, ["mod", "tidy"], module_dir, "etcd: go mod tidy")
        out = scratch / "out"
        (out / "bin").mkdir(parents=True)
        ldflags = f"-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=release-{component.version}"
        _run_go(
            go,
            ["build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(out / "bin" / "etcd"), "."],
            module_dir,
            f"etcd {component.version}",
        )
        _finish(component, out)


def _go_install(
    go: str, component: Component, package: str, version_stamp: str, scratch: Path, tags: tuple[str, ...] = ()
) -> Path:
    """`go install <package>@<component.version>` into `scratch/out/bin`, stamping `-X <version_stamp>` and building
    with `tags`; returns `scratch/out`, ready for `_finish`."""
    out = scratch / "out"
    (out / "bin").mkdir(parents=True)
    ldflags = f"-s -w -X {version_stamp}"
    tag_args = ["-tags", ",".join(tags)] if tags else []
    _run_go(
        go,
        ["install", "-v", "-trimpath", *tag_args, "-ldflags", ldflags, f"{package}@{component.version}"],
        scratch,
        f"{component.name} {component.version}",
        env={"GOBIN": str(out / "bin")},
    )
    return out


def build_kwok(go: str) -> None:
    component = KWOK
    with tempfile.TemporaryDirectory(prefix="kwok-build-", dir=cache_root()) as tmp:
        scratch = Path(tmp)
        version = f"sigs.k8s.io/kwok/pkg/consts.Version={component.version.lstrip('v')}"
        out = _go_install(go, component, "sigs.k8s.io/kwok/cmd/kwok", version, scratch)
        # The stage definitions (node initialize/heartbeat, pod ready/delete) ship inside the module source.
        source = subprocess.run(
            [go, "mod", "download", "-json", f"sigs.k8s.io/kwok@{component.version}"],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=True,
        )
        stages = Path(json.loads(source.stdout)["Dir"]) / "kustomize" / "stage"
        shutil.copytree(stages, out / "stage")
        for path in (out / "stage").rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        _finish(component, out)


def build_helm(go: str) -> None:
    component = HELM
    with tempfile.TemporaryDirectory(prefix="helm-build-", dir=cache_root()) as tmp:
        scratch = Path(tmp)
        version = f"helm.sh/helm/v4/internal/version.version={component.version}"
        out = _go_install(go, component, "helm.sh/helm/v4/cmd/helm", version, scratch)
        _finish(component, out)


# promtool's main package registers every service-discovery plugin (AWS, Azure, GCE, ...) through
# prometheus/plugins; the build tag `remove_all_sd` drops them. Checking and unit-testing rule files needs none of
# them, and leaving them out spares compiling some of the cloud SDKs on a 2-core runner.
PROMTOOL_TAGS = ("remove_all_sd",)


def _prometheus_release(go: str, scratch: Path) -> str:
    """The Prometheus release of the pinned module version (v0.316.0 is 3.16.0), read from the module's VERSION file:
    `--version` reports what is stamped into prometheus/common/version, and the module version is not the release."""
    source = _mod_download(go, f"github.com/prometheus/prometheus@{versions.PROMETHEUS}", scratch)
    return (Path(source["Dir"]) / "VERSION").read_text().strip()


def build_promtool(go: str) -> None:
    """`go install` promtool at the pinned module version (its go.mod has no replace directive, so no wrapper module
    is needed), stamping the Prometheus release (`_prometheus_release`)."""
    component = PROMTOOL
    with tempfile.TemporaryDirectory(prefix="promtool-build-", dir=cache_root()) as tmp:
        scratch = Path(tmp)
        release = _prometheus_release(go, scratch)
        log(f"promtool {component.version}: Prometheus {release}")
        version = f"github.com/prometheus/common/version.Version={release}"
        package = "github.com/prometheus/prometheus/cmd/promtool"
        out = _go_install(go, component, package, version, scratch, tags=PROMTOOL_TAGS)
        _finish(component, out)


# The Prometheus server of the metrics pipeline discovers the pool pods with Kubernetes SD and nothing else:
# `remove_all_sd` drops every plugin of prometheus/plugins (each file is `//go:build !remove_all_sd ||
# enable_<name>_sd`) and `enable_kubernetes_sd` takes the Kubernetes one back. Without `builtinassets` the web UI's
# assets are not embedded (the UI pages answer an error; the HTTP API, which the adapter queries, is all we use).
PROMETHEUS_TAGS = ("remove_all_sd", "enable_kubernetes_sd")


def build_prometheus(go: str) -> None:
    """`go install` the Prometheus server (cmd/prometheus) at the same module version as promtool, into a component
    of its own so promtool's cache entry stays valid, with `PROMETHEUS_TAGS`."""
    component = PROMETHEUS
    with tempfile.TemporaryDirectory(prefix="prometheus-build-", dir=cache_root()) as tmp:
        scratch = Path(tmp)
        release = _prometheus_release(go, scratch)
        log(f"prometheus {component.version}: Prometheus {release}")
        version = f"github.com/prometheus/common/version.Version={release}"
        package = "github.com/prometheus/prometheus/cmd/prometheus"
        out = _go_install(go, component, package, version, scratch, tags=PROMETHEUS_TAGS)
        _finish(component, out)


def build_prometheus_adapter(go: str) -> None:
    """Build prometheus-adapter's main package `sigs.k8s.io/prometheus-adapter/cmd/adapter` through a generated
    wrapper module, as for LWS: its go.mod has no replace directive, but `go install ...@<version>` first reads the
    module's version list (for deprecation notices), which the module proxy refuses for it too. The binary is named
    `prometheus-adapter`."""
    component = PROMETHEUS_ADAPTER
    with tempfile.TemporaryDirectory(prefix="prometheus-adapter-build-", dir=cache_root()) as tmp:
        scratch = Path(tmp)
        module_dir = scratch / "module"
        package = "sigs.k8s.io/prometheus-adapter/cmd/adapter"
        main = f'//go:build tools\n\npackage tools\n\nimport _ "{package}"\n'
        requires = {"sigs.k8s.io/prometheus-adapter": component.version}
        _write_module(module_dir, "disaggspec.io/localcluster/prometheus-adapter", requires, {}, main)
        _run_go(go, ["mod", "tidy"], module_dir, "prometheus-adapter: go mod tidy")
        out = scratch / "out"
        (out / "bin").mkdir(parents=True)
        # The adapter stamps no version of its own; its API server's /version reads component-base's.
        ldflags = ["-s", "-w", f"-X k8s.io/component-base/version.gitVersion={component.version}"]
        output = out / "bin" / "prometheus-adapter"
        _build_tools(go, module_dir, ldflags, output, [package], f"prometheus-adapter {component.version}")
        _finish(component, out)


def build_lws(go: str) -> None:
    """Build the LWS controller's main package `sigs.k8s.io/lws/cmd` through a generated wrapper module, as for
    Kubernetes: its go.mod has no replace directive, but `go install sigs.k8s.io/lws/cmd@<version>` first reads the
    module's version list (for deprecation notices), which the module proxy refuses for sigs.k8s.io/lws. The binary
    is named `lws-controller`; the manifests the control plane needs (`LWS_MANIFESTS`) are copied from the module
    next to it."""
    component = LWS
    with tempfile.TemporaryDirectory(prefix="lws-build-", dir=cache_root()) as tmp:
        scratch = Path(tmp)
        module_dir = scratch / "module"
        main = '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/lws/cmd"\n'
        _write_module(module_dir, "disaggspec.io/localcluster/lws", {"sigs.k8s.io/lws": component.version}, {}, main)
        _run_go(go, ["mod", "tidy"], module_dir, "lws: go mod tidy")
        out = scratch / "out"
        (out / "bin").mkdir(parents=True)
        ldflags = ["-s", "-w", f"-X sigs.k8s.io/lws/pkg/version.GitVersion={component.version}"]
        output = out / "bin" / "lws-controller"
        _build_tools(go, module_dir, ldflags, output, ["sigs.k8s.io/lws/cmd"], f"lws {component.version}")
        source = Path(_mod_download(go, f"sigs.k8s.io/lws@{component.version}", module_dir)["Dir"])
        for target, directory in LWS_MANIFESTS.items():
            (out / target).mkdir()
            for path in sorted((source / directory).glob("*.yaml")):
                shutil.copyfile(path, out / target / path.name)
                (out / target / path.name).chmod(0o644)
        _finish(component, out)


BUILDERS = {
    "etcd": build_etcd,
    "kwok": build_kwok,
    "helm": build_helm,
    "kubernetes": build_kubernetes,
    "promtool": build_promtool,
    "lws": build_lws,
    "prometheus": build_prometheus,
    "prometheus-adapter": build_prometheus_adapter,
}


def ensure_built(components: tuple[Component, ...] = ALL) -> None:
    """Build every missing component; reuse what the cache already has."""
    missing = [c for c in components if not c.is_built()]
    for component in components:
        if component.is_built():
            log(f"{component.name} {component.version}: cached in {component.directory}")
    if not missing:
        return
    go = check_go()
    cache_root().mkdir(parents=True, exist_ok=True)
    names = ", ".join(c.name for c in missing)
    log(
        f"cold build of {names}: on 2 cores Kubernetes takes many minutes, promtool, prometheus and "
        "prometheus-adapter a few each, lws about 1.5; progress every 15s"
    )
    for component in missing:
        BUILDERS[component.name](go)
