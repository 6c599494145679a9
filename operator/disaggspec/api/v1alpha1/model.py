"""What both pools run: the SGLang image and release (`spec.sglang`), and the target model (`spec.model`): where its
weights come from (a Hugging Face repo, a node directory or a PersistentVolumeClaim), the shared download cache, and
the token for gated repos. The `CacheVolume` shape defined here is also the engine's compile cache.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from disaggspec.api.v1alpha1.base import _MAX_NAME, _MAX_STR, ConfigKey, Name, SpecModel
from disaggspec.sglang.profiles import SGLangVersion

ModelDtype = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]

# ---- sglang ------------------------------------------------------------------------------------------------------


class LocalObjectReference(SpecModel):
    """A reference to an object in the same namespace."""

    name: Name = Field(description="Name of the referenced object.")


class SGLangSpec(SpecModel):
    """The SGLang server image both pools run and the release it contains."""

    image: str = Field(
        min_length=1,
        max_length=_MAX_STR,
        description="Container image of the SGLang server (normally the project's patched image). Both pools run it. "
        "An image reference: [host[:port]/]lowercase/path[:tag][@sha256:<64 hex digits>], no whitespace.",
    )
    version: SGLangVersion = Field(
        description="SGLang release inside the image. Selects the flag profile the operator renders and validates "
        "against; only supported releases are accepted.",
    )
    image_pull_policy: PullPolicy = Field(default="IfNotPresent", description="Pull policy of the SGLang image.")
    image_pull_secrets: list[LocalObjectReference] = Field(
        default_factory=list,
        max_length=16,
        description="Secrets holding registry credentials for the SGLang and router images (DNS subdomain names).",
    )
    topk_buffer_width: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Width of the top-k metadata rows that carry the first draft proposal from prefill to decode. "
        "Leave unset to use the release's width (16 on 0.5.23; the project's 0.5.2 patch sizes it from eagleTopk). "
        "Set it only when the image's patch widens that buffer; eagleTopk (times numSteps with multiLayer) must fit "
        "in it.",
    )


# ---- model -------------------------------------------------------------------------------------------------------


class HostPathVolume(SpecModel):
    """A directory on the node."""

    path: str = Field(
        min_length=1,
        max_length=_MAX_STR,
        description="Directory on the node (the weights, or a cache): an absolute path without '..' segments.",
    )


class PersistentVolumeClaimVolume(SpecModel):
    """An existing PersistentVolumeClaim in the service's namespace."""

    claim_name: Name = Field(description="Name of the PersistentVolumeClaim holding the weights (a DNS subdomain).")
    read_only: bool = Field(default=True, description="Mount the claim read-only.")


class ModelVolume(SpecModel):
    """Where the weights come from when they are not downloaded from Hugging Face. Set exactly one source."""

    host_path: HostPathVolume | None = Field(default=None, description="Weights in a directory on the node.")
    persistent_volume_claim: PersistentVolumeClaimVolume | None = Field(
        default=None, description="Weights on a PersistentVolumeClaim."
    )
    mount_path: str = Field(
        default="/models",
        min_length=1,
        max_length=_MAX_STR,
        pattern=r"^/",
        description="Where the volume is mounted in the SGLang containers; model.path and draftModel.path may "
        "point below it. An absolute path without '.', '..' or empty segments, and not /, nor under /dev (where the "
        "operator mounts /dev/shm and the device plugins put GPUs and NICs), /proc or /sys.",
    )


class CacheClaim(SpecModel):
    """An existing PersistentVolumeClaim in the service's namespace that a cache lives on (mounted read-write)."""

    claim_name: Name = Field(description="Name of the PersistentVolumeClaim (a DNS subdomain).")


class CacheVolume(SpecModel):
    """A persistent directory the servers keep files in across restarts. Set exactly one source."""

    persistent_volume_claim: CacheClaim | None = Field(
        default=None,
        description="A PersistentVolumeClaim shared by every pool pod: its access mode must let all of them mount it "
        "at once, on different nodes (ReadWriteMany, e.g. NFS, CephFS, Lustre, a cloud file store).",
    )
    host_path: HostPathVolume | None = Field(
        default=None,
        description="A directory on each node (e.g. a local NVMe): node-local, filled once per node. The operator "
        "creates it if missing (DirectoryOrCreate).",
    )


class SecretKeyRef(SpecModel):
    """A key of a Secret in the service's namespace."""

    name: Name = Field(description="Name of the Secret (a DNS subdomain).")
    key: ConfigKey = Field(default="token", description="Key inside the Secret: letters, digits, '-', '_' and '.'.")


class ModelSpec(SpecModel):
    """The target model both pools serve."""

    path: str = Field(
        min_length=1,
        max_length=_MAX_STR,
        description="Hugging Face repo id (for example meta-llama/Llama-3.1-8B-Instruct) or an absolute path inside "
        "the model volume, without whitespace or '..' segments. Rendered as --model-path on both pools.",
    )
    revision: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME,
        description="Branch, tag or commit of the model repo (--revision): letters, digits, '.', '_', '-' and '/', "
        "starting with a letter, digit or '_', without '..'.",
    )
    dtype: ModelDtype = Field(default="auto", description="Weight and activation dtype (--dtype).")
    trust_remote_code: bool = Field(default=False, description="Allow custom model code from the repo.")
    served_model_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME,
        description="Model name reported by the OpenAI API (--served-model-name); no whitespace, not starting "
        "with '-'.",
    )
    volume: ModelVolume | None = Field(default=None, description="Volume holding the weights, if not downloaded.")
    cache: CacheVolume | None = Field(
        default=None,
        description="A Hugging Face cache the weights are downloaded into once instead of into every pod. Mounted "
        "on both pools at /model-cache (read-only) with HF_HOME=/model-cache and HF_HUB_OFFLINE=1: the servers never "
        "download; HF_MODULES_CACHE=/hf-modules, an emptyDir, takes the copy of a repo's remote code "
        "(trustRemoteCode). "
        "With persistentVolumeClaim (ReadWriteMany) a Job (<name>-cache-<hash>) fills it once per model, draft and "
        "tokenizer revision and each pool pod waits in an init container until the Job has written its marker; "
        "status condition ModelCached follows the Job. With hostPath each pool pod fills its own node's directory "
        "in an init container (ModelCached is Unknown, NodeLocal). Exclusive with volume.",
    )
    hf_token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding a Hugging Face token (exported as HF_TOKEN) for gated repos."
    )
