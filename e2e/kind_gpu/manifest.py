"""Renders what the kind-gpu backend applies: the kind cluster config, the DisaggSpecService, the colocated reference
server and the Hugging Face token Secret; pure, driven by `Settings` read from `E2E_*` environment variables.

`run.sh` and `e2e/tests/test_serving_gpu.py` both read the same variables through `Settings.from_env`, so the dry run
prints exactly what the test applies. Every rendered DisaggSpecService goes through the operator's own parser and rule
table (`disaggspec.api.parse_service`, `disaggspec.validation.validate`) before it is written.

The KV transfer runs over TCP (a kind cluster has no RDMA NICs), with existing API fields only:
- 0.5.23: `transfer.backend: mooncake_tcp`. SGLang rewrites it to mooncake and sets `MC_FORCE_TCP=1`
  (sglang/srt/arg_groups/pd_disaggregation_hook.py:27-46 in the 0.5.23 wheel).
- 0.5.2: `transfer.backend: mooncake` plus `MC_FORCE_TCP=1` in both pools' `env`. 0.5.2 passes protocol "rdma" to
  Mooncake (sglang/srt/disaggregation/mooncake/transfer_engine.py:84-101), but Mooncake's Python binding ignores that
  argument and auto-discovers its transport; with `MC_FORCE_TCP` set (or no HCA found) it installs `TcpTransport`
  (Mooncake v0.3.6 mooncake-transfer-engine/src/transfer_engine.cpp:228-244, transfer_engine_py.cpp initializeExt).
  The variable and the TCP transport's GPU-memory staging both arrived in Mooncake v0.3.6 (commit 2eadcef, "Reimplement
  VRAM buffering in TCP transport"); older engines cannot send KV from GPU memory over TCP, which is why run.sh probes
  the image's `mooncake-transfer-engine` version.

The reference is a plain Deployment running the same image with the decode pool's exact command line minus the
`--disaggregation-*` flags (taken from the operator's renderer), i.e. the same model, dtype and EAGLE3 settings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

import yaml

from disaggspec.api import parse_service
from disaggspec.sglang.args import SERVER_PORT, server_args
from disaggspec.sglang.profiles import PROFILES
from disaggspec.validation import validate

ModelSource = Literal["hf", "hostpath"]

DEFAULT_MODEL: Final = "meta-llama/Llama-3.1-8B-Instruct"
DEFAULT_DRAFT: Final = "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"
NODE_MODEL_DIR: Final = "/models"
"""Where the host model directory appears inside the kind worker node (and inside the SGLang containers)."""
HF_SECRET_KEY: Final = "token"
REFERENCE_COMPONENT: Final = "reference"
LABEL_REFERENCE: Final = "e2e.disaggspec.io/reference"
"""Selects the colocated reference server's pod; deliberately not an operator label, so the operator never prunes it."""
GPU_PRESENT_LABEL: Final = "nvidia.com/gpu.present"
"""The device plugin chart's node affinity accepts this label when Node Feature Discovery is not installed."""
DEVICE_MOUNT_DIR: Final = "/var/run/nvidia-container-devices"
"""With `accept-nvidia-visible-devices-as-volume-mounts = true`, the NVIDIA runtime injects the GPUs named by
`/dev/null` mounts below this directory (`all` or an index) into the container: here, the kind worker node."""

# Flags of the decode command the colocated reference must not get; the bool is whether the flag takes a value.
_DISAGG_FLAGS: Final = {
    "--disaggregation-mode": True,
    "--disaggregation-bootstrap-port": True,
    "--disaggregation-transfer-backend": True,
    "--disaggregation-ib-device": True,
    "--disaggregation-decode-allocation-policy": True,
    "--disaggregation-enable-kv-checksum": False,
}


def _flag(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, "").strip()
    return value or default


@dataclass(frozen=True)
class Settings:
    """Every knob of the kind-gpu run, resolved from the environment (`E2E_*`, plus `HF_TOKEN`)."""

    sglang_version: str
    sglang_image: str
    model_source: ModelSource
    model: str
    draft_model: str
    model_host_dir: str | None
    hf_token_present: bool
    gpus: str
    cluster_name: str
    namespace: str
    name: str
    dtype: str
    extra_args: tuple[str, ...]
    max_tokens: int

    @staticmethod
    def from_env(env: Mapping[str, str]) -> Settings:
        """Read and check the settings; raises ValueError naming the variable and the fix."""
        version = _flag(env, "E2E_SGLANG_VERSION", "0.5.2")
        if version not in PROFILES:
            raise ValueError(f"E2E_SGLANG_VERSION={version}: supported are {', '.join(PROFILES)}")
        source = _flag(env, "E2E_MODEL_SOURCE", "hf")
        if source not in ("hf", "hostpath"):
            raise ValueError(f"E2E_MODEL_SOURCE={source}: use hf (download from Hugging Face) or hostpath")
        host_dir = env.get("E2E_MODEL_HOST_DIR", "").strip() or None
        if source == "hostpath":
            if host_dir is None or not host_dir.startswith("/"):
                raise ValueError("E2E_MODEL_SOURCE=hostpath needs E2E_MODEL_HOST_DIR, an absolute host directory")
            # In hostpath mode the model names are directories below E2E_MODEL_HOST_DIR (default: the repo names).
            model = _flag(env, "E2E_MODEL", PurePosixPath(DEFAULT_MODEL).name)
            draft = _flag(env, "E2E_DRAFT_MODEL", PurePosixPath(DEFAULT_DRAFT).name)
            for var, rel in (("E2E_MODEL", model), ("E2E_DRAFT_MODEL", draft)):
                if rel.startswith("/") or ".." in PurePosixPath(rel).parts:
                    raise ValueError(f"{var}={rel}: in hostpath mode give a directory relative to E2E_MODEL_HOST_DIR")
        else:
            model = _flag(env, "E2E_MODEL", DEFAULT_MODEL)
            draft = _flag(env, "E2E_DRAFT_MODEL", DEFAULT_DRAFT)
        gpus = _flag(env, "E2E_GPUS", "all")
        if gpus != "all" and not all(part.isdigit() for part in gpus.split(",")):
            raise ValueError(f"E2E_GPUS={gpus}: use all or a comma list of GPU indices such as 0,1")
        max_tokens = int(_flag(env, "E2E_MAX_TOKENS", "96"))
        if not 8 <= max_tokens <= 4096:
            raise ValueError(f"E2E_MAX_TOKENS={max_tokens}: use 8..4096")
        return Settings(
            sglang_version=version,
            sglang_image=_flag(env, "E2E_SGLANG_IMAGE", f"disaggspec/sglang:v{version}-disaggspec"),
            model_source=source,  # type: ignore[arg-type]  # checked against the Literal above
            model=model,
            draft_model=draft,
            model_host_dir=host_dir,
            hf_token_present=bool(env.get("HF_TOKEN", "").strip()),
            gpus=gpus,
            cluster_name=_flag(env, "E2E_CLUSTER_NAME", "disaggspec-gpu"),
            namespace=_flag(env, "E2E_NAMESPACE", "disaggspec-e2e"),
            name=_flag(env, "E2E_SERVICE_NAME", "llama-eagle3"),
            dtype=_flag(env, "E2E_DTYPE", "float16"),
            extra_args=tuple(env.get("E2E_EXTRA_ARGS", "").split()),
            max_tokens=max_tokens,
        )

    def model_path(self, name: str) -> str:
        """The `--model-path`-style value of `name`: a HF id, or its directory under the mounted model volume."""
        return name if self.model_source == "hf" else str(PurePosixPath(NODE_MODEL_DIR) / name)

    @property
    def uses_hf_secret(self) -> bool:
        return self.model_source == "hf" and self.hf_token_present

    @property
    def hf_secret_name(self) -> str:
        return f"{self.name}-hf-token"


# ---- kind ----------------------------------------------------------------------------------------------------------


def kind_config(settings: Settings) -> dict[str, Any]:
    """A control-plane node and one worker that gets the GPUs (and the model directory, in hostpath mode)."""
    devices = ["all"] if settings.gpus == "all" else settings.gpus.split(",")
    mounts: list[dict[str, Any]] = [
        {"hostPath": "/dev/null", "containerPath": f"{DEVICE_MOUNT_DIR}/{device}"} for device in devices
    ]
    if settings.model_source == "hostpath":
        assert settings.model_host_dir is not None
        mounts.append({"hostPath": settings.model_host_dir, "containerPath": NODE_MODEL_DIR, "readOnly": True})
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "name": settings.cluster_name,
        "nodes": [
            {"role": "control-plane"},
            {"role": "worker", "labels": {GPU_PRESENT_LABEL: "true"}, "extraMounts": mounts},
        ],
    }


# ---- the DisaggSpecService -----------------------------------------------------------------------------------------


WORKSTATION_REQUESTS: Final = {"cpu": "2", "memory": "16Gi", "ephemeral-storage": "40Gi"}
"""Requests of each pool pod on a kind cluster: Llama-3.1-8B plus its draft (about 17 GB of weights) on one GPU."""


def _pool(settings: Settings, tcp_env: list[dict[str, str]]) -> dict[str, Any]:
    # The operator's default requests are sized for datacenter GPU nodes (cpu 8, memory 72Gi per 1-GPU pod); a kind
    # cluster on a workstation runs both pools on one machine, so the pools ask for what an 8B model needs.
    resources = {"limits": {"nvidia.com/gpu": 1}, "requests": dict(WORKSTATION_REQUESTS)}
    pool: dict[str, Any] = {"replicas": 1, "tensorParallelSize": 1, "resources": resources}
    if tcp_env:
        pool["env"] = tcp_env
    if settings.extra_args:
        pool["extraArgs"] = list(settings.extra_args)
    return pool


def service(settings: Settings) -> dict[str, Any]:
    """The DisaggSpecService under test: EAGLE3, 1 step, topk 1, 2 draft tokens, one prefill and one decode GPU."""
    model: dict[str, Any] = {"path": settings.model_path(settings.model), "dtype": settings.dtype}
    if settings.model_source == "hostpath":
        assert settings.model_host_dir is not None
        # The kind worker sees the host directory at NODE_MODEL_DIR (its extraMount); the pods mount that node path.
        model["volume"] = {"hostPath": {"path": NODE_MODEL_DIR}, "mountPath": NODE_MODEL_DIR}
    if settings.uses_hf_secret:
        model["hfTokenSecretRef"] = {"name": settings.hf_secret_name, "key": HF_SECRET_KEY}
    if settings.sglang_version == "0.5.2":
        transfer = {"backend": "mooncake", "bootstrapPort": 8998}
        tcp_env = [{"name": "MC_FORCE_TCP", "value": "1"}]
    else:
        transfer = {"backend": "mooncake_tcp", "bootstrapPort": 8998}
        tcp_env = []
    return {
        "apiVersion": "disaggspec.io/v1alpha1",
        "kind": "DisaggSpecService",
        "metadata": {"name": settings.name, "namespace": settings.namespace},
        "spec": {
            "sglang": {"image": settings.sglang_image, "version": settings.sglang_version},
            "model": model,
            "speculative": {
                "algorithm": "EAGLE3",
                "draftModel": {"path": settings.model_path(settings.draft_model)},
                "numSteps": 1,
                "eagleTopk": 1,
                "numDraftTokens": 2,
            },
            "transfer": transfer,
            "prefill": _pool(settings, tcp_env),
            "decode": _pool(settings, tcp_env),
            "router": {"policy": "round_robin"},
        },
    }


def check_service(obj: Mapping[str, Any]) -> None:
    """Parse with the operator's API and run its whole rule table; raises ValueError listing every violation."""
    violations = validate(parse_service(obj))
    if violations:
        raise ValueError("the rendered DisaggSpecService breaks operator rules: " + "; ".join(map(str, violations)))


# ---- the colocated reference ---------------------------------------------------------------------------------------


def reference_command(dss: Mapping[str, Any]) -> list[str]:
    """The decode pool's rendered command without the disaggregation flags: the same server, colocated."""
    argv = server_args(parse_service(dss), "decode")
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in _DISAGG_FLAGS:
            skip = _DISAGG_FLAGS[flag] and "=" not in arg
            continue
        out.append(arg)
    return out


def reference_name(settings: Settings) -> str:
    return f"{settings.name}-{REFERENCE_COMPONENT}"


def reference(settings: Settings) -> list[dict[str, Any]]:
    """A one-GPU Deployment and a Service of the colocated SGLang server with the same image, model and flags."""
    dss = service(settings)
    name = reference_name(settings)
    labels = {"app.kubernetes.io/name": "sglang-reference", LABEL_REFERENCE: name}
    env: list[dict[str, Any]] = []
    if settings.uses_hf_secret:
        env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": settings.hf_secret_name, "key": HF_SECRET_KEY}}}
        )
    volumes: list[dict[str, Any]] = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "32Gi"}}]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if settings.model_source == "hostpath":
        volumes.append({"name": "model", "hostPath": {"path": NODE_MODEL_DIR, "type": "Directory"}})
        mounts.append({"name": "model", "mountPath": NODE_MODEL_DIR, "readOnly": True})
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 5}
    container: dict[str, Any] = {
        "name": "sglang",
        "image": settings.sglang_image,
        "imagePullPolicy": "IfNotPresent",
        "command": reference_command(dss),
        "ports": [{"name": "http", "containerPort": SERVER_PORT, "protocol": "TCP"}],
        "resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"nvidia.com/gpu": 1}},
        "volumeMounts": mounts,
        # Same start-up budget as the operator's pools: weights download/load plus CUDA graph capture.
        "startupProbe": {**probe, "failureThreshold": 180},
        "readinessProbe": {**probe, "failureThreshold": 3},
    }
    if env:
        container["env"] = env
    meta = {"name": name, "namespace": settings.namespace, "labels": labels}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {LABEL_REFERENCE: name}},
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"automountServiceAccountToken": False, "containers": [container], "volumes": volumes},
            },
        },
    }
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "selector": {LABEL_REFERENCE: name},
            "ports": [{"name": "http", "port": SERVER_PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return [deployment, svc]


ReferenceMode = Literal["sequential", "concurrent"]


def reference_mode(requested: str, allocatable_gpus: int) -> ReferenceMode:
    """When the colocated reference runs: `concurrent` (next to the PD pair) needs a third GPU; `sequential` runs it
    after the PD service is deleted, on the GPU that frees. `auto` picks concurrent when 3 or more GPUs exist."""
    if requested not in ("auto", "sequential", "concurrent"):
        raise ValueError(f"E2E_REFERENCE={requested}: use auto, sequential or concurrent")
    if requested == "concurrent" and allocatable_gpus < 3:
        raise ValueError(
            f"E2E_REFERENCE=concurrent needs 3 GPUs (1 prefill, 1 decode, 1 reference); the cluster has "
            f"{allocatable_gpus}"
        )
    if requested == "auto":
        return "concurrent" if allocatable_gpus >= 3 else "sequential"
    return "concurrent" if requested == "concurrent" else "sequential"


def hf_secret(settings: Settings, token: str) -> dict[str, Any]:
    """The Secret the service's `model.hfTokenSecretRef` (and the reference) read HF_TOKEN from."""
    if not token.strip():
        raise ValueError("HF_TOKEN is empty")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": settings.hf_secret_name, "namespace": settings.namespace},
        "type": "Opaque",
        "stringData": {HF_SECRET_KEY: token.strip()},
    }


def dump(objects: Sequence[Mapping[str, Any]]) -> str:
    return yaml.safe_dump_all([dict(o) for o in objects], sort_keys=False)


# ---- CLI -----------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kind_gpu.manifest", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("settings", help="print the resolved settings as JSON")
    sub.add_parser("kind-config", help="print the kind cluster config")
    render = sub.add_parser("render", help="write service.yaml and reference.yaml (validated); never the Secret")
    render.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env(os.environ)
    except ValueError as error:
        print(f"manifest: {error}", file=sys.stderr)
        return 2
    if args.command == "settings":
        print(json.dumps(asdict(settings), indent=2))
    elif args.command == "kind-config":
        print(yaml.safe_dump(kind_config(settings), sort_keys=False), end="")
    else:
        dss = service(settings)
        check_service(dss)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "service.yaml").write_text(dump([dss]))
        (args.out / "reference.yaml").write_text(dump(reference(settings)))
        print(f"wrote {args.out / 'service.yaml'} and {args.out / 'reference.yaml'} (validated by the operator rules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
