"""Renders the caches of a service: the model cache (its fill Job, the pools' wait or fill init container, HF_HOME) and
the compile cache (the JIT cache directories); pure.

With `spec.model.cache` on a PersistentVolumeClaim, one Job per model revision downloads every repo the servers read
(target, draft, tokenizer) into the claim and then writes a marker `<cache>/.disaggspec/<content hash>.done`; each
pool pod waits for that marker in an init container before the server starts, and the server runs with
HF_HUB_OFFLINE=1. The wait sits in the pods rather than in the Deployments' replica count so render stays a function
of the spec alone (no status feeding back into the children) and a revision change rolls the pools like any other
edit: the old pods keep serving from their revision while the new ones wait for theirs. With a hostPath (node-local)
cache a single Job would fill one arbitrary node, so each pool pod fills its own node's directory in an init container
instead (concurrent pods on a node share huggingface_hub's file locks; the marker makes a warm node skip it).

The servers mount the cache read-only, so nothing they write may fall under HF_HOME. Offline, with the pinned
transformers and huggingface_hub of both releases (0.5.2: transformers 4.56.1, huggingface_hub 0.36.2; 0.5.23:
transformers 5.19.0, huggingface_hub 2.4.0, the versions of images/sglang/tests/requirements-*.txt), one thing is
written there:

- Remote code (`trustRemoteCode`, a config.json with `auto_map`, as DeepSeek-V3/R1 and Kimi-K2 have):
  transformers `dynamic_module_utils.get_cached_module_file` copies the repo's module files into
  `HF_MODULES_CACHE/transformers_modules/...` through `create_dynamic_module` and `init_hf_modules` (makedirs, an
  `__init__.py`), and `transformers/utils/hub.py` defaults `HF_MODULES_CACHE` to `$HF_HOME/modules`. On a read-only
  HF_HOME the server fails at start. So the pools get `HF_MODULES_CACHE` on an emptyDir outside HF_HOME
  (`MODULES_CACHE_PATH`): the copy is rebuilt from the cached repo at every start, a few files.

Read but never written offline, so they stay on the read-only mount:

- huggingface_hub `file_download._hf_hub_download_to_cache_dir`: with HF_HUB_OFFLINE the metadata call is replaced by
  `OfflineModeIsEnabled` (`_get_metadata_or_catch_error`), the function returns the cached snapshot file (reading
  `refs/<revision>`) before it ever builds a `.locks/` lock or a blob; `.no_exist/` entries are written only after an
  online HEAD. `_snapshot_download.snapshot_download` offline only reads `refs/` and returns the snapshot folder.
- `HF_TOKEN_PATH` (`$HF_HOME/token`) and `stored_tokens` are read by `utils._auth.get_token`, written only by `hf auth
  login`; the xet cache (`HF_XET_CACHE`, `$HF_HOME/xet`) is written by xet downloads only; the assets cache
  (`HF_ASSETS_CACHE`) only by callers of `cached_assets_path`, which neither transformers nor SGLang is.
- huggingface_hub 2.4.0's agent registry (`utils/_detect_agent.py`, `$HF_HOME/.agent_harnesses.json`) is fetched and
  written only when not offline (`_fetch_registry` returns None under HF_HUB_OFFLINE), and a failed write is ignored;
  the CLI's update stamps (`.check_for_update_done`) belong to the `hf` command, which the servers do not run.
- SGLang's own download lock (`model_loader/weight_utils.get_lock`) lives in `tempfile.gettempdir()` unless
  `--download-dir` is given, not under HF_HOME.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Final

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, effective_speculative
from disaggspec.api.v1alpha1 import CacheVolume
from disaggspec.render import names

MODEL_CACHE_PATH: Final = "/model-cache"
"""Where the model cache is mounted; HF_HOME points here."""
MODULES_CACHE_PATH: Final = "/hf-modules"
"""Where the pools' HF_MODULES_CACHE (transformers' copy of a repo's remote code) lives: an emptyDir, outside HF_HOME
because HF_HOME is the read-only model cache."""
MODULES_CACHE_SIZE: Final = "64Mi"
"""The emptyDir's size limit: remote code is Python source (DeepSeek-V3's two modules are about 100 KB) and its
bytecode; a bound keeps a runaway writer from filling the node's disk."""
COMPILE_CACHE_PATH: Final = "/compile-cache"
"""Where the compile cache is mounted; the JIT cache variables point below it."""
MODEL_CACHE_VOLUME: Final = "model-cache"
MODULES_CACHE_VOLUME: Final = "hf-modules"
COMPILE_CACHE_VOLUME: Final = "compile-cache"
CACHE_ROLE: Final = "model-cache"
"""The role (and component) label of the fill Job and its pod."""
MODEL_CACHE_ENV: Final = c.MODEL_CACHE_ENV
COMPILE_CACHE_ENV: Final = c.COMPILE_CACHE_ENV

JOB_BACKOFF_LIMIT: Final = 4
"""Retries of a failed download (a network blip, a rate limit); each attempt resumes what the last one fetched."""
FILL_REQUESTS: Final = {"cpu": "2", "memory": "8Gi"}
"""A download is network- and disk-bound: a few cores for hashing and parallel transfers."""
WAIT_REQUESTS: Final = {"cpu": "10m", "memory": "32Mi"}

# Downloads each (repo, revision) pair given after the marker path, then writes the marker; a present marker skips
# everything. Arguments, not string formatting: repo ids and revisions never pass through a shell or the script.
# `original/` is skipped: Meta's repos keep a second, Meta-format copy of the weights there that no HF loader reads.
FILL_SCRIPT: Final = """\
import pathlib, sys
from huggingface_hub import snapshot_download
marker = pathlib.Path(sys.argv[1])
if marker.exists():
    sys.exit(0)
for repo, revision in zip(sys.argv[2::2], sys.argv[3::2]):
    print("downloading", repo, revision or "(default branch)", flush=True)
    snapshot_download(repo, revision=revision or None, ignore_patterns=["original/*"])
marker.parent.mkdir(parents=True, exist_ok=True)
marker.write_text(" ".join(sys.argv[2:]) + "\\n")
"""
WAIT_SCRIPT: Final = 'until [ -f "$0" ]; do echo "waiting for the model cache fill job: $0"; sleep 10; done'


def repos(service: DisaggSpecService) -> list[tuple[str, str]]:
    """Every Hugging Face repo (and revision, '' for the default branch) the servers load, in a stable order: the
    target, the draft (the pools' effective draft is the same, a rule checks it) and a tokenizer given as a repo id.
    Absolute paths are files in the image, not downloads."""
    spec = service.spec
    found = [(spec.model.path, spec.model.revision or "")]
    draft = effective_speculative(spec, c.ROLE_PREFILL).draft_model
    if draft is not None:
        found.append((draft.path, draft.revision or ""))
    if spec.engine.tokenizer_path is not None:
        found.append((spec.engine.tokenizer_path, ""))
    unique = dict.fromkeys((repo, rev) for repo, rev in found if not repo.startswith("/"))
    return list(unique)


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:10]


def content_hash(service: DisaggSpecService) -> str:
    """10 hex characters naming what the cache must hold; changes with any repo or revision."""
    return _hash(repos(service))


def marker(service: DisaggSpecService) -> str:
    """The file the fill writes once the cache holds every repo of `content_hash`."""
    return f"{MODEL_CACHE_PATH}/.disaggspec/{content_hash(service)}.done"


def _fill_args(service: DisaggSpecService) -> list[str]:
    args = ["python3", "-c", FILL_SCRIPT, marker(service)]
    for repo, revision in repos(service):
        args += [repo, revision]
    return args


def _source(cache: CacheVolume) -> dict[str, Any]:
    """The Pod volume source of a cache (a rule guarantees exactly one source)."""
    if cache.persistent_volume_claim is not None:
        return {"persistentVolumeClaim": {"claimName": cache.persistent_volume_claim.claim_name}}
    assert cache.host_path is not None
    return {"hostPath": {"path": cache.host_path.path, "type": "DirectoryOrCreate"}}


def _token_env(service: DisaggSpecService) -> list[dict[str, Any]]:
    token = service.spec.model.hf_token_secret_ref
    if token is None:
        return []
    return [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}}]


def _fill_container(service: DisaggSpecService, name: str) -> dict[str, Any]:
    spec = service.spec
    return {
        "name": name,
        "image": spec.sglang.image,
        "imagePullPolicy": spec.sglang.image_pull_policy,
        "command": _fill_args(service),
        "env": [{"name": "HF_HOME", "value": MODEL_CACHE_PATH}, *_token_env(service)],
        "resources": {"requests": dict(FILL_REQUESTS)},
        "volumeMounts": [{"name": MODEL_CACHE_VOLUME, "mountPath": MODEL_CACHE_PATH}],
    }


def uses_fill_job(service: DisaggSpecService) -> bool:
    """The model cache is a shared claim, filled once by a Job (a hostPath cache is filled per node by the pods)."""
    cache = service.spec.model.cache
    return cache is not None and cache.persistent_volume_claim is not None


def job_name(service: DisaggSpecService) -> str:
    """`<service>-cache-<hash>`: the hash covers the repos and the Job's whole pod template, so a new revision (or a
    new image, token or placement: a Job's template is immutable) is a new Job, and the old one is pruned."""
    return f"{service.metadata.name}-cache-{_hash(_job_spec(service))}"


def _job_spec(service: DisaggSpecService) -> dict[str, Any]:
    spec = service.spec
    cache = spec.model.cache
    assert cache is not None
    prefill = spec.prefill
    pod_spec: dict[str, Any] = {
        # A failed attempt keeps its pod (logs); the Job makes a new one, up to backoffLimit.
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [_fill_container(service, "fill")],
        "volumes": [{"name": MODEL_CACHE_VOLUME, **_source(cache)}],
    }
    # Where the prefill pool runs: its image is pulled there anyway, and the claim is reachable from there.
    if prefill.node_selector:
        pod_spec["nodeSelector"] = dict(sorted(prefill.node_selector.items()))
    if prefill.tolerations:
        pod_spec["tolerations"] = [
            t.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True) for t in prefill.tolerations
        ]
    pod_spec.update(names.pull_secrets(service))
    # No activeDeadlineSeconds: hundreds of GB over a slow link take hours, and a deadline would kill a healthy
    # download. No ttlSecondsAfterFinished: the finished Job is what ModelCached reads, and a Job removed by its TTL
    # would be rendered (and run) again.
    return {
        "backoffLimit": JOB_BACKOFF_LIMIT,
        "template": {"metadata": {"labels": names.labels(service, CACHE_ROLE)}, "spec": pod_spec},
    }


def fill_job(service: DisaggSpecService) -> list[dict[str, Any]]:
    """The fill Job of a claim-backed model cache (none otherwise)."""
    if not uses_fill_job(service):
        return []
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": names.metadata(service, CACHE_ROLE, job_name(service)),
            "spec": _job_spec(service),
        }
    ]


def pool_init_containers(service: DisaggSpecService) -> list[dict[str, Any]]:
    """Holds a pool pod until the model cache is filled: waits for the Job's marker (claim) or fills the node's
    directory itself (hostPath)."""
    cache = service.spec.model.cache
    if cache is None:
        return []
    if cache.host_path is not None:
        return [_fill_container(service, "fill-model-cache")]
    spec = service.spec
    return [
        {
            "name": "wait-model-cache",
            "image": spec.sglang.image,
            "imagePullPolicy": spec.sglang.image_pull_policy,
            "command": ["sh", "-c", WAIT_SCRIPT, marker(service)],
            "resources": {"requests": dict(WAIT_REQUESTS)},
            "volumeMounts": [{"name": MODEL_CACHE_VOLUME, "mountPath": MODEL_CACHE_PATH, "readOnly": True}],
        }
    ]


def _dg_cache_env(version: str) -> str:
    """The DeepGEMM JIT cache variable: SGL_DG_CACHE_DIR in 0.5.2 (compile_utils.py), SGLANG_DG_CACHE_DIR since the
    SGL_ prefix was deprecated (0.5.23 environ.py)."""
    return "SGL_DG_CACHE_DIR" if version == "0.5.2" else "SGLANG_DG_CACHE_DIR"


def pool_env(service: DisaggSpecService) -> list[dict[str, Any]]:
    """The cache variables of the SGLang container."""
    spec = service.spec
    out: list[dict[str, Any]] = []
    if spec.model.cache is not None:
        out += [
            {"name": "HF_HOME", "value": MODEL_CACHE_PATH},
            {"name": "HF_HUB_OFFLINE", "value": "1"},
            {"name": "HF_MODULES_CACHE", "value": MODULES_CACHE_PATH},
        ]
    if spec.engine.compile_cache is not None:
        base = COMPILE_CACHE_PATH
        # Named one by one rather than XDG_CACHE_HOME or a mount on ~/.cache: those would also move HF_HOME's default
        # (the weights) onto the compile cache when no model cache is set. SGLANG_CACHE_DIR alone covers 0.5.23; the
        # rest are what 0.5.23 derives from it, spelled out for 0.5.2, which reads each library's own variable.
        out += [
            {"name": "SGLANG_CACHE_DIR", "value": base},
            {"name": _dg_cache_env(spec.sglang.version), "value": f"{base}/deep_gemm"},
            {"name": "TRITON_CACHE_DIR", "value": f"{base}/triton"},
            {"name": "TORCHINDUCTOR_CACHE_DIR", "value": f"{base}/inductor"},
            {"name": "CUDA_CACHE_PATH", "value": f"{base}/nv"},
            # FlashInfer appends .cache/flashinfer to this base itself.
            {"name": "FLASHINFER_WORKSPACE_BASE", "value": base},
        ]
    return out


def pool_volumes(service: DisaggSpecService) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The cache volumes of a pool pod and the SGLang container's mounts of them. The server mounts the model cache
    read-only: offline, it only reads, and a bug cannot corrupt what every pod shares. The one thing it writes below
    HF_HOME otherwise, transformers' copy of remote code, goes to an emptyDir instead (see the module docstring)."""
    spec = service.spec
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if spec.model.cache is not None:
        volumes.append({"name": MODEL_CACHE_VOLUME, **_source(spec.model.cache)})
        mounts.append({"name": MODEL_CACHE_VOLUME, "mountPath": MODEL_CACHE_PATH, "readOnly": True})
        volumes.append({"name": MODULES_CACHE_VOLUME, "emptyDir": {"sizeLimit": MODULES_CACHE_SIZE}})
        mounts.append({"name": MODULES_CACHE_VOLUME, "mountPath": MODULES_CACHE_PATH})
    if spec.engine.compile_cache is not None:
        volumes.append({"name": COMPILE_CACHE_VOLUME, **_source(spec.engine.compile_cache)})
        mounts.append({"name": COMPILE_CACHE_VOLUME, "mountPath": COMPILE_CACHE_PATH})
    return volumes, mounts
