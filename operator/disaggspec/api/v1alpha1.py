"""The `DisaggSpecService` API, version `disaggspec.io/v1alpha1`: pydantic models of the spec and status.

These models are the API. The CRD (OpenAPI schema, `kubectl explain` descriptions, defaults, printer columns) is
generated from them by the build-time `tools.crd` (operator/tools), and the cross-field rules live in
`disaggspec.validation`. Field names are snake_case in Python and camelCase on the wire (`populate_by_name`, so both
parse). Spec models forbid unknown fields; the status model ignores them so an older operator can read a newer status.
Pod-spec pieces a pool passes through (tolerations, `valueFrom`, affinity) are typed as in a Pod, so their shape is
checked at admission with no operator running.

Settings that exist once in the spec (model, sglang, engine, transfer, the shared `speculative` block) are identical
on both pools by construction; only what a pool may override (its `speculative` block) is cross-checked by the rules.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from disaggspec.sglang.profiles import SGLangVersion

GROUP: Final = "disaggspec.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "DisaggSpecService"
PLURAL: Final = "disaggspecservices"
SINGULAR: Final = "disaggspecservice"
SHORT_NAMES: Final = ("dss",)
CATEGORIES: Final = ("all", "disaggspec")

GPU_RESOURCE: Final = "nvidia.com/gpu"
"""The extended resource a pool's GPUs are requested as."""
MAX_GPUS_PER_POD: Final = 16
"""Upper bound of GPUs in one pool pod (one node): bounds gpusPerNode and the per-GPU ib device map."""
MAX_NODES_PER_INSTANCE: Final = 64
"""Upper bound of nodes one multi-node SGLang server spans (spec.<pool>.nodesPerInstance)."""
MAX_TENSOR_PARALLEL_SIZE: Final = MAX_NODES_PER_INSTANCE * MAX_GPUS_PER_POD
"""Upper bound of tensorParallelSize: every nodesPerInstance x gpusPerNode the schema allows (64 x 16 = 1024), far
beyond any real server (DeepSeek-R1 runs at 16 or 32); the rules bind it to the pool's GPUs."""
DEFAULT_BOOTSTRAP_PORT: Final = 8998
"""SGLang's default `--disaggregation-bootstrap-port` (0.5.2 server_args.py:379, 0.5.23 fields/disagg.py:81-83)."""
DEFAULT_ROUTER_PORT: Final = 30000
"""The router's HTTP port (sglang-router's own default)."""
ROUTER_METRICS_PORT: Final = 29000
"""The router's Prometheus port (sglang-router's own default); its HTTP port must differ."""
DEFAULT_GPUS_PER_NODE: Final = 8
"""GPUs on one node of the usual GPU server (HGX/DGX H100, H200, B200, MI300X): the default bound of a pod's GPUs."""
DEFAULT_DRAIN_SECONDS: Final = 600
"""How long a pool pod may take to finish its requests after it is asked to stop (terminationGracePeriodSeconds)."""

# Bounds that keep CEL cost estimates finite; generous for any real manifest.
_MAX_STR: Final = 1024
_MAX_NAME: Final = 253
_MAX_ARG: Final = 4096
_MAX_LIST: Final = 128
_MAX_EXTRA_ARGS: Final = 64
_SERVER_PATH_PATTERN: Final = r"^[^-\s]\S*$"
"""A path or repo id rendered as a server argument's value: no whitespace, and no leading '-', which argparse would
read as the next option."""

Name = Annotated[str, Field(min_length=1, max_length=_MAX_NAME)]
ConfigKey = Annotated[str, Field(min_length=1, max_length=_MAX_NAME, pattern=r"^[-._a-zA-Z0-9]+$")]
"""A key of a Secret or ConfigMap (letters, digits, '-', '_', '.'), as the API server requires of the child's env."""
Quantity = int | Annotated[str, Field(max_length=64)]
QuantityMap = Annotated[dict[str, Quantity], Field(max_length=32)]
FreeForm = dict[str, Any]

ModelDtype = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]
Algorithm = Literal["EAGLE", "EAGLE3", "NEXTN"]
TransferBackend = Literal["mooncake", "nixl", "mooncake_tcp", "mori", "ascend", "fake"]
IbDeviceMapping = Literal["Auto", "Static"]
KvCacheDtype = Literal["auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "fp4_mx_block16", "mxfp8", "nvfp4"]
DraftKvCacheDtype = Literal["auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2"]
RouterPolicy = Literal["random", "round_robin", "cache_aware", "power_of_two"]
ServiceType = Literal["ClusterIP", "NodePort", "LoadBalancer"]
PullPolicy = Literal["Always", "IfNotPresent", "Never"]
ConditionStatus = Literal["True", "False", "Unknown"]


class SpecModel(BaseModel):
    """Base of every spec model: camelCase on the wire, unknown fields rejected, immutable once parsed."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class StatusModel(BaseModel):
    """Base of every status model: camelCase on the wire, unknown fields ignored (written by newer operators)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


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
        "on both pools at /model-cache with HF_HOME=/model-cache and HF_HUB_OFFLINE=1: the servers never download. "
        "With persistentVolumeClaim (ReadWriteMany) a Job (<name>-cache-<hash>) fills it once per model, draft and "
        "tokenizer revision and each pool pod waits in an init container until the Job has written its marker; "
        "status condition ModelCached follows the Job. With hostPath each pool pod fills its own node's directory "
        "in an init container (ModelCached is Unknown, NodeLocal). Exclusive with volume.",
    )
    hf_token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret key holding a Hugging Face token (exported as HF_TOKEN) for gated repos."
    )


# ---- speculative -------------------------------------------------------------------------------------------------


class DraftModel(SpecModel):
    """The draft checkpoint of EAGLE/EAGLE3 (NEXTN uses the target model's MTP layers and needs none)."""

    path: str = Field(
        min_length=1,
        max_length=_MAX_STR,
        description="Hugging Face repo id or absolute path of the draft model (--speculative-draft-model-path), "
        "in the form spec.model.path takes.",
    )
    revision: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME,
        description="Branch, tag or commit of the draft repo (--speculative-draft-model-revision), in the form "
        "spec.model.revision takes.",
    )


class SpeculativeSpec(SpecModel):
    """Speculative decoding settings shared by both pools. A pool's own `speculative` block overrides single fields;
    the operator rejects any pair whose effective settings differ where SGLang assumes them equal."""

    algorithm: Algorithm = Field(
        description="Speculative algorithm (--speculative-algorithm). EAGLE and EAGLE3 need draftModel; NEXTN runs "
        "the target's multi-token-prediction layers (DeepSeek MTP). Immutable: the hidden-state rows sent from "
        "prefill to decode change width with it.",
    )
    draft_model: DraftModel | None = Field(default=None, description="Draft model; required for EAGLE and EAGLE3.")
    num_steps: int = Field(
        default=3, ge=1, le=64, description="Draft steps per verification (--speculative-num-steps)."
    )
    eagle_topk: int = Field(
        default=1, ge=1, le=64, description="Tokens drafted per step; 1 drafts a chain (--speculative-eagle-topk)."
    )
    num_draft_tokens: int | None = Field(
        default=None,
        ge=2,
        le=1024,
        description="Tokens verified per step (--speculative-num-draft-tokens). With eagleTopk 1 it must be "
        "numSteps + 1 and may be left unset; with eagleTopk > 1 it is required.",
    )
    rejection_sampling: bool = Field(
        default=False,
        description="Verify drafts by rejection sampling (--speculative-use-rejection-sampling); needs eagleTopk 1 "
        "and SGLang 0.5.23.",
    )
    multi_layer: bool = Field(
        default=False,
        description="Multi-layer EAGLE (--enable-multi-layer-eagle): prefill sends eagleTopk x numSteps top-k "
        "entries. SGLang 0.5.23 only.",
    )
    draft_kv_cache_dtype: DraftKvCacheDtype | None = Field(
        default=None,
        description="KV cache dtype of the draft model (--speculative-draft-kv-cache-dtype); unset follows "
        "engine.kvCacheDtype. SGLang 0.5.23 only.",
    )
    token_map: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_STR,
        pattern=_SERVER_PATH_PATTERN,
        description="The draft model's reduced vocabulary (--speculative-token-map): a file path, or a Hugging Face "
        "repo id followed by the file, as FR-Spec publishes them. Rendered identically on both pools (no pool "
        "override: prefill's first draft token and decode's drafts must index the same vocabulary).",
    )
    transfer_draft_probs: bool = Field(
        default=False,
        description="With rejectionSampling, carry the draft proposal q of prefill's first draft step to decode's "
        "first verify (SGLANG_DISAGG_TRANSFER_DRAFT_PROBS=1 on both pools; patch 0003 of the project's SGLang "
        "0.5.23 image). Off, the first verify uses the one-hot proposal, which is exact; on, it can accept more of "
        "the first draft. Costs states x vocab x 4 B + 64 B of transfer-registered host memory per metadata slot on "
        "each side, per scheduler rank (states is 1, or numSteps with multiLayer): about 511 MiB per 1024 slots for "
        "a Llama-3 vocabulary, 1.5 GiB for DeepSeek-V3 with multiLayer. Needs rejectionSampling on both pools.",
    )


class PoolSpeculativeSpec(SpecModel):
    """Per-pool overrides of the shared speculative settings; every unset field inherits spec.speculative."""

    algorithm: Algorithm | None = Field(default=None, description="Overrides spec.speculative.algorithm.")
    draft_model: DraftModel | None = Field(default=None, description="Overrides spec.speculative.draftModel.")
    num_steps: int | None = Field(default=None, ge=1, le=64, description="Overrides spec.speculative.numSteps.")
    eagle_topk: int | None = Field(default=None, ge=1, le=64, description="Overrides spec.speculative.eagleTopk.")
    num_draft_tokens: int | None = Field(
        default=None, ge=2, le=1024, description="Overrides spec.speculative.numDraftTokens."
    )
    rejection_sampling: bool | None = Field(default=None, description="Overrides spec.speculative.rejectionSampling.")
    multi_layer: bool | None = Field(default=None, description="Overrides spec.speculative.multiLayer.")
    draft_kv_cache_dtype: DraftKvCacheDtype | None = Field(
        default=None, description="Overrides spec.speculative.draftKvCacheDtype."
    )


# ---- transfer ----------------------------------------------------------------------------------------------------


class RdmaSpec(SpecModel):
    """RDMA wiring of the KV transfer: NIC resources, Multus networks and the InfiniBand devices SGLang uses."""

    resources: QuantityMap = Field(
        default_factory=dict,
        description="Extended resources each pool pod requests for its NICs, for example "
        "{rdma/hca_shared_devices_a: 1}: domain-prefixed names (not kubernetes.io, not nvidia.com/gpu) with positive "
        "whole-number quantities. Added to requests and limits.",
    )
    networks: list[
        Annotated[
            str,
            Field(max_length=_MAX_NAME, pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?/)?[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
        ]
    ] = Field(
        default_factory=list,
        max_length=16,
        description="Multus NetworkAttachmentDefinitions attached to pool pods, as namespace/name or name.",
    )
    ib_devices: list[Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")]] = (
        Field(
            default_factory=list,
            max_length=MAX_GPUS_PER_POD,
            description="InfiniBand devices a pod may use. With ibDeviceMapping Auto, the HCAs the start-time mapping "
            "may pick from (empty: every RDMA device the pod sees); with Static, the devices every GPU uses "
            "(--disaggregation-ib-device as a comma list). Use either this or ibDevicesPerGpu.",
        )
    )
    ib_devices_per_gpu: Annotated[
        dict[
            str,
            Annotated[
                str,
                Field(
                    min_length=1,
                    max_length=_MAX_NAME,
                    pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*(,[A-Za-z0-9][A-Za-z0-9_.:-]*)*$",
                ),
            ],
        ],
        Field(max_length=MAX_GPUS_PER_POD),
    ] = Field(
        default_factory=dict,
        description="A static InfiniBand device map (ibDeviceMapping Static) per GPU index as the container sees it "
        "(0..n-1, not the node's GPU number), for example {'0': mlx5_0, '1': mlx5_0, '2': mlx5_1}; a value may be a "
        "comma list. Keys are decimal GPU indexes without sign or leading zeros. Must name every GPU of both pools, "
        "and both pools' pods must take whole nodes (GPUs per pod equal to gpusPerNode): a pod with part of a node "
        "gets GPUs anywhere on it, so fixed indexes can point at the other socket's NICs. SGLang 0.5.23 only.",
    )
    ib_device_mapping: IbDeviceMapping | None = Field(
        default=None,
        description="How each GPU's InfiniBand devices are chosen. Auto: at container start a wrapper in the "
        "project's SGLang image (/opt/disaggspec/ib_device_map.py) maps every GPU of the pod to its nearest RDMA "
        "device (same PCIe switch, else same NUMA node, else any; only ibDevices when given) and passes the result "
        "as --disaggregation-ib-device (a per-GPU map on 0.5.23, the chosen devices as a list on 0.5.2) and "
        "NCCL_IB_HCA; without a device found, the transfer engine picks its own. Needs the project's image. Static: "
        "ibDevices or ibDevicesPerGpu rendered as given (nothing given: no device flag). Unset: Static when "
        "ibDevicesPerGpu is set, else Auto.",
    )
    gid_index: int | None = Field(
        default=None,
        ge=0,
        le=255,
        description="RoCE GID index (exported as MC_GID_INDEX and NCCL_IB_GID_INDEX, and as UCX_IB_GID_INDEX with the "
        "nixl backend).",
    )
    host_network: bool = Field(
        default=False,
        description="Run pool pods in the host network namespace (for NICs not exposed through Multus).",
    )

    def effective_mapping(self) -> IbDeviceMapping:
        """ibDeviceMapping, or its default: Static when a per-GPU map is given, else Auto."""
        if self.ib_device_mapping is not None:
            return self.ib_device_mapping
        return "Static" if self.ib_devices_per_gpu else "Auto"


class TransferSpec(SpecModel):
    """How KV cache and speculative metadata travel from prefill to decode."""

    backend: TransferBackend = Field(
        default="mooncake",
        description="KV transfer backend (--disaggregation-transfer-backend), the same on both pools. Immutable.",
    )
    bootstrap_port: int = Field(
        default=DEFAULT_BOOTSTRAP_PORT,
        ge=1,
        le=65535,
        description="Bootstrap port of the prefill server (--disaggregation-bootstrap-port), the same on both pools: "
        "decode falls back to its own value when the router passes none.",
    )
    rdma: RdmaSpec | None = Field(default=None, description="RDMA NICs for the transfer; unset uses the pod network.")


# ---- engine ------------------------------------------------------------------------------------------------------


class EngineSpec(SpecModel):
    """Server settings that must be identical on prefill and decode; set once, rendered on both."""

    page_size: int = Field(default=1, ge=1, le=1024, description="Tokens per KV cache page (--page-size).")
    kv_cache_dtype: KvCacheDtype = Field(
        default="auto", description="KV cache dtype (--kv-cache-dtype); auto follows the model dtype."
    )
    attention_backend: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z0-9_]+$",
        description="Attention backend (--attention-backend); unset lets SGLang choose. Required when eagleTopk > 1 "
        "and pageSize > 1, since only some backends support that.",
    )
    decode_allocation_policy: Literal["early", "prefill_complete"] | None = Field(
        default=None,
        description="When decode reserves KV for a request (--disaggregation-decode-allocation-policy). "
        "SGLang 0.5.23 only.",
    )
    kv_checksum: bool | None = Field(
        default=None,
        description="Checksum each request's KV pages on prefill and verify on decode "
        "(--disaggregation-enable-kv-checksum). SGLang 0.5.23 only.",
    )
    disagg_sampling_mask: bool | None = Field(
        default=None,
        description="Send the sampling mask with the first token (SGLANG_ENABLE_DISAGG_SAMPLING_MASK). "
        "SGLang 0.5.23 only.",
    )
    context_length: int | None = Field(
        default=None,
        ge=1,
        le=1 << 30,
        description="Longest context a request may have (--context-length); unset uses the model's config.",
    )
    quantization: str | None = Field(
        default=None,
        max_length=64,
        pattern=r"^[a-z0-9_-]+$",
        description="Weight quantization method (--quantization), one that spec.sglang.version accepts; unset "
        "follows the checkpoint.",
    )
    tokenizer_path: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_STR,
        pattern=_SERVER_PATH_PATTERN,
        description="Tokenizer repo id or path (--tokenizer-path); unset uses the model's.",
    )
    chat_template: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_STR,
        pattern=_SERVER_PATH_PATTERN,
        description="Built-in chat template name or template file path (--chat-template); unset uses the tokenizer's.",
    )
    compile_cache: CacheVolume | None = Field(
        default=None,
        description="A persistent cache of compiled kernels (Triton, DeepGEMM JIT, FlashInfer, TorchInductor, CUDA), "
        "mounted on both pools at /compile-cache with SGLANG_CACHE_DIR, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, "
        "FLASHINFER_WORKSPACE_BASE, CUDA_CACHE_PATH and the DeepGEMM cache variable pointing into it, so a restarted "
        "server skips minutes of JIT compilation. A ReadWriteMany claim shared by every pod, or a hostPath per node. "
        "Separate from model.cache (HF_HOME is never under it). Not part of the spec fingerprint.",
    )
    extra_args: list[Annotated[str, Field(max_length=_MAX_STR)]] = Field(
        default_factory=list,
        max_length=_MAX_EXTRA_ARGS,
        description="Extra SGLang server arguments rendered identically on both pools, after the typed flags and "
        "before each pool's own extraArgs: the place for options that change what a pool computes and have no "
        "typed field (--load-format, --json-model-override-args, --tokenizer-mode, ...). Checked against the "
        "release's parser; options the operator renders or forbids are rejected (docs/extra-args.md).",
    )


# ---- pools -------------------------------------------------------------------------------------------------------


class ResourceRequirements(SpecModel):
    """Compute resources of one container, as in a Pod spec."""

    limits: QuantityMap = Field(
        default_factory=dict,
        description="Maximum resources, for example {nvidia.com/gpu: 8, memory: 200Gi}. nvidia.com/gpu defaults to "
        "tensorParallelSize. Keys are cpu, memory, ephemeral-storage, hugepages-<size> or a domain-prefixed extended "
        "resource; values are non-negative quantities, whole numbers for extended resources.",
    )
    requests: QuantityMap = Field(
        default_factory=dict,
        description="Minimum resources the scheduler reserves, at most the limit. An extended resource or hugepages "
        "requested must be limited to the same quantity; hugepages need a cpu or memory request or limit.",
    )


class KeySelector(SpecModel):
    """One key of a Secret or ConfigMap in the service's namespace."""

    name: Name = Field(description="Name of the Secret or ConfigMap (a DNS subdomain).")
    key: ConfigKey = Field(description="The key: letters, digits, '-', '_' and '.'.")
    optional: bool | None = Field(default=None, description="Start the container even if the key is missing.")


class ObjectFieldSelector(SpecModel):
    """A field of the pool pod, as the Downward API exposes it to environment variables."""

    api_version: Literal["v1"] | None = Field(default=None, description="Version of the field path's schema (v1).")
    field_path: str = Field(
        max_length=_MAX_NAME,
        pattern=r"^(metadata\.(name|namespace|uid)|metadata\.(labels|annotations)\['[^']+'\]"
        r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$",
        description="metadata.name, metadata.namespace, metadata.uid, metadata.labels['<key>'], "
        "metadata.annotations['<key>'], spec.nodeName, spec.serviceAccountName, status.hostIP(s) or status.podIP(s).",
    )


class ResourceFieldSelector(SpecModel):
    """A resource limit or request of the SGLang container."""

    container_name: str | None = Field(
        default=None, max_length=63, description="Container whose resource is read; the SGLang container when unset."
    )
    resource: Literal[
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
    ] = Field(description="The resource: limits. or requests. followed by cpu, memory or ephemeral-storage.")
    divisor: Quantity | None = Field(default=None, description="Unit the value is expressed in (default 1).")


class EnvVarSource(SpecModel):
    """Where an environment variable's value comes from: exactly one source, as in a Pod."""

    secret_key_ref: KeySelector | None = Field(default=None, description="A key of a Secret.")
    config_map_key_ref: KeySelector | None = Field(default=None, description="A key of a ConfigMap.")
    field_ref: ObjectFieldSelector | None = Field(default=None, description="A field of the pod.")
    resource_field_ref: ResourceFieldSelector | None = Field(
        default=None, description="A resource limit or request of the container."
    )


class EnvVar(SpecModel):
    """An environment variable of the SGLang container."""

    name: str = Field(
        min_length=1,
        max_length=_MAX_NAME,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Variable name: a C identifier (letters, digits and '_', not starting with a digit), the names "
        "shells and SGLang can read. Rejected: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES (the device plugin "
        "sets them), names the operator sets from typed fields (SGLANG_ENABLE_DISAGG_SAMPLING_MASK, MC_GID_INDEX, "
        "NCCL_IB_GID_INDEX, UCX_IB_GID_INDEX, HF_TOKEN with model.hfTokenSecretRef, HF_HOME and HF_HUB_OFFLINE "
        "with model.cache, the compile cache variables with engine.compileCache), and with spec.transfer.rdma set "
        "the MC_*, UCX_* and NCCL_IB_* families the transfer engines read.",
    )
    value: str | None = Field(default=None, max_length=_MAX_ARG, description="Literal value.")
    value_from: EnvVarSource | None = Field(
        default=None,
        description="Source of the value: exactly one of secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef.",
    )


class Toleration(SpecModel):
    """A taint a pool pod tolerates, as in a Pod spec."""

    key: str | None = Field(
        default=None,
        max_length=317,
        description="Taint key (a label key); unset or empty matches every key and then needs operator Exists.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists (any value; no value given) or Equal (the default)."
    )
    value: str | None = Field(default=None, max_length=63, description="Taint value for operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to match; unset matches every effect."
    )
    toleration_seconds: int | None = Field(
        default=None, description="With effect NoExecute only: how long the pod stays bound once tainted."
    )


_MAX_TERMS: Final = 8
"""Bound on affinity terms and requirement lists: ample for a pool, and keeps the CRD's CEL cost estimate finite."""
LabelKey = Annotated[str, Field(min_length=1, max_length=317)]
LabelValue = Annotated[str, Field(max_length=63)]


class NodeSelectorRequirement(SpecModel):
    """One node label (or field) test of a node selector term."""

    key: LabelKey = Field(description="Node label key (matchFields: the field name, metadata.name).")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"] = Field(
        description="In and NotIn need values; Exists and DoesNotExist take none; Gt and Lt take one integer."
    )
    values: list[LabelValue] = Field(default_factory=list, max_length=64, description="Values the operator tests.")


class NodeSelectorTerm(SpecModel):
    """Requirements a node must all meet (the terms of a selector are ORed)."""

    match_expressions: list[NodeSelectorRequirement] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Requirements on node labels."
    )
    match_fields: list[NodeSelectorRequirement] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Requirements on node fields."
    )


class NodeSelector(SpecModel):
    """A required node selector: at least one term."""

    node_selector_terms: list[NodeSelectorTerm] = Field(
        min_length=1, max_length=_MAX_TERMS, description="Terms, ORed; at least one."
    )


class PreferredSchedulingTerm(SpecModel):
    """A weighted preferred node term."""

    weight: int = Field(ge=1, le=100, description="Weight of the term, 1-100.")
    preference: NodeSelectorTerm = Field(description="The node term.")


class NodeAffinity(SpecModel):
    """Node affinity, as in a Pod spec."""

    required_during_scheduling_ignored_during_execution: NodeSelector | None = Field(
        default=None, description="Nodes a pool pod may run on."
    )
    preferred_during_scheduling_ignored_during_execution: list[PreferredSchedulingTerm] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Nodes a pool pod prefers."
    )


class LabelSelectorRequirement(SpecModel):
    """One pod label test of a label selector."""

    key: LabelKey = Field(description="Pod label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="In and NotIn need values; Exists and DoesNotExist take none."
    )
    values: list[LabelValue] = Field(default_factory=list, max_length=64, description="Values the operator tests.")


class LabelSelector(SpecModel):
    """A pod label selector."""

    match_labels: Annotated[dict[str, LabelValue], Field(max_length=32)] = Field(
        default_factory=dict, description="Labels a pod must have."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Label requirements, ANDed."
    )


class PodAffinityTerm(SpecModel):
    """Pods (by label, in some namespaces) a pool pod is placed with or away from, per topology domain."""

    label_selector: LabelSelector | None = Field(default=None, description="The pods.")
    namespace_selector: LabelSelector | None = Field(default=None, description="Namespaces of the pods, by label.")
    namespaces: list[Annotated[str, Field(max_length=63)]] = Field(
        default_factory=list, max_length=32, description="Namespaces of the pods; the pool's own when unset."
    )
    topology_key: LabelKey = Field(description="Node label whose value defines the domain (required).")
    match_label_keys: list[LabelKey] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Pod label keys whose values are matched too."
    )
    mismatch_label_keys: list[LabelKey] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Pod label keys whose values must differ."
    )


class WeightedPodAffinityTerm(SpecModel):
    """A weighted preferred pod term."""

    weight: int = Field(ge=1, le=100, description="Weight of the term, 1-100.")
    pod_affinity_term: PodAffinityTerm = Field(description="The pod term.")


class PodAffinity(SpecModel):
    """Pod affinity or anti-affinity, as in a Pod spec."""

    required_during_scheduling_ignored_during_execution: list[PodAffinityTerm] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Terms a pool pod must meet."
    )
    preferred_during_scheduling_ignored_during_execution: list[WeightedPodAffinityTerm] = Field(
        default_factory=list, max_length=_MAX_TERMS, description="Terms a pool pod prefers."
    )


class Affinity(SpecModel):
    """Scheduling affinity of pool pods, typed as in a Pod spec (unknown fields refused) so its shape is checked at
    admission; what needs the scheduler's view is left to the API server's validation of the rendered pool."""

    node_affinity: NodeAffinity | None = Field(default=None, description="Node affinity, as in a Pod spec.")
    pod_affinity: PodAffinity | None = Field(default=None, description="Pod affinity, as in a Pod spec.")
    pod_anti_affinity: PodAffinity | None = Field(default=None, description="Pod anti-affinity, as in a Pod spec.")


SpreadMode = Literal["Preferred", "Required", "Off"]
MaxUnavailable = int | Annotated[str, Field(max_length=4)]
"""A count or a percentage; its form is the rule `disruption-max-unavailable` (an int-or-string schema node keeps
no pattern or bounds, so the check is CEL)."""
_DNS_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class PoolLifecycle(SpecModel):
    """How long a server pod may take to start and to stop. The probes, the preStop pause, the grace period and the
    Deployment's progress deadline are all derived from these two numbers (docs/operator.md, Lifecycle)."""

    startup_seconds: int | None = Field(
        default=None,
        ge=60,
        le=86400,
        description="How long a server may take from start to ready (download and load weights, capture CUDA "
        "graphs) before the kubelet restarts it; the startup probe allows at least this long. Unset: 1800, or 3600 "
        "when a pod has 8 or more GPUs (a DeepSeek-class model, hundreds of GB of weights). The Deployment's "
        "progressDeadlineSeconds is startupSeconds + drainSeconds + 600, so a slow but healthy rollout is not "
        "reported as stuck (Degraded, RolloutStuck).",
    )
    drain_seconds: int = Field(
        default=DEFAULT_DRAIN_SECONDS,
        ge=30,
        le=86400,
        description="How long a server pod may take to stop (terminationGracePeriodSeconds): first a preStop pause "
        "that lets the router and the Service see the pod leave, then SGLang's own drain on SIGTERM, which finishes "
        "the requests in flight before exiting. Long generations need a longer drain; SIGKILL ends whatever is "
        "left. The router's grace period is at least the larger drainSeconds of the two pools.",
    )


class DisruptionSpec(SpecModel):
    """The PodDisruptionBudget the operator renders for a pool (or the router): how many of its pods a voluntary
    disruption (a node drain, a cluster upgrade) may take down at once."""

    max_unavailable: MaxUnavailable = Field(
        default=1,
        description="Pods an eviction may leave unavailable at once: a count (0 blocks every voluntary eviction, so "
        "drains wait for you) or a percentage from 0% to 100% such as '25%'. Pods that are not ready (still "
        "starting, or crash-looping) may always be evicted (unhealthyPodEvictionPolicy AlwaysAllow), so a broken "
        "pod never blocks a node drain.",
    )


class PoolSpec(SpecModel):
    """One pool of SGLang servers (prefill or decode): size, parallelism, scheduling and its draft overrides."""

    replicas: int = Field(
        default=1,
        ge=0,
        le=1024,
        description="Number of servers in the pool: pods, or with nodesPerInstance > 1 groups of nodesPerInstance "
        "pods.",
    )
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        le=MAX_TENSOR_PARALLEL_SIZE,
        description="GPUs one server shards the model over (--tp-size). With nodesPerInstance 1 at most gpusPerNode; "
        "with nodesPerInstance > 1 exactly nodesPerInstance x gpusPerNode (the server's ranks over all its nodes).",
    )
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        description="Resources of the SGLang container. Unset cpu, memory and ephemeral-storage requests are sized "
        "from the pod's GPUs (cpu 4 + 4 per GPU; memory the /dev/shm size + 16Gi + 24Gi per GPU; without "
        "model.volume or model.cache, ephemeral-storage 16Gi + 96Gi per GPU for the downloaded weights); each key "
        "given here wins. No cpu or memory limit is set unless given (Burstable); limits equal to the requests make "
        "the pods Guaranteed.",
    )
    node_selector: Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=32)] = Field(
        default_factory=dict, description="Node labels a pool pod requires: label keys and label values."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, max_length=_MAX_LIST, description="Tolerations of pool pods, as in a Pod spec."
    )
    affinity: Affinity | None = Field(
        default=None, description="Affinity of pool pods: nodeAffinity, podAffinity and podAntiAffinity, as in a Pod."
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=_MAX_LIST, description="Extra environment of the SGLang container."
    )
    extra_args: list[Annotated[str, Field(max_length=_MAX_STR)]] = Field(
        default_factory=list,
        max_length=_MAX_EXTRA_ARGS,
        description="Extra SGLang server arguments of this pool only, checked against the release's parser: only "
        "options safe to differ between the pools (scheduling, memory, CUDA graphs, logging, ...). Options the "
        "operator renders, forbids, or that must match across the pools (those go in spec.engine.extraArgs) are "
        "rejected (docs/extra-args.md).",
    )
    pod_labels: Annotated[dict[str, Annotated[str, Field(max_length=63)]], Field(max_length=32)] = Field(
        default_factory=dict,
        description="Extra labels on pool pods: keys are qualified names ([DNS subdomain/]name, the name at most 63 "
        "characters of letters, digits, '-', '_' and '.', alphanumeric at both ends), values label values.",
    )
    pod_annotations: Annotated[dict[str, Annotated[str, Field(max_length=_MAX_ARG)]], Field(max_length=32)] = Field(
        default_factory=dict, description="Extra annotations on pool pods; keys are qualified names as for podLabels."
    )
    speculative: PoolSpeculativeSpec | None = Field(
        default=None,
        description="This pool's overrides of spec.speculative; its effective settings must match the other pool's.",
    )
    gpus_per_node: int = Field(
        default=DEFAULT_GPUS_PER_NODE,
        ge=1,
        le=MAX_GPUS_PER_POD,
        description="GPUs on one node this pool runs on. With nodesPerInstance 1 a pool pod is one SGLang server on "
        "one node, so its GPUs (tensorParallelSize, or resources.limits[nvidia.com/gpu]) may not exceed it. With "
        "nodesPerInstance > 1 every pod of a server's group takes exactly gpusPerNode GPUs.",
    )
    nodes_per_instance: int = Field(
        default=1,
        ge=1,
        le=MAX_NODES_PER_INSTANCE,
        description="Nodes one SGLang server spans. 1: each replica is one pod of a Deployment. More: each replica "
        "is a group of that many pods, one per node (a leader, which serves HTTP and the bootstrap port, and "
        "workers), rendered as a LeaderWorkerSet (leaderworkerset.x-k8s.io/v1), which needs the LeaderWorkerSet "
        "controller v0.9.0 or later installed in the cluster; tensorParallelSize must then be nodesPerInstance x "
        "gpusPerNode, --nnodes, --node-rank and --dist-init-addr are set by the operator, and the router pairs "
        "leaders only. The group restarts as a whole when any of its pods or containers restarts (LeaderWorkerSet "
        "restartPolicy RecreateGroupOnPodRestart): the ranks of one server cannot rejoin one by one. replicas counts "
        "servers (groups), not pods.",
    )
    lifecycle: PoolLifecycle = Field(
        default_factory=PoolLifecycle, description="Start-up and drain budgets of this pool's server pods."
    )
    disruption: DisruptionSpec = Field(
        default_factory=DisruptionSpec, description="The PodDisruptionBudget of this pool."
    )
    priority_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME,
        pattern=_DNS_SUBDOMAIN,
        description="PriorityClass of this pool's pods (a DNS subdomain), so the scheduler may preempt less "
        "important pods for them; unset uses the cluster's default priority.",
    )
    spread: SpreadMode = Field(
        default="Preferred",
        description="How this pool's replicas spread over nodes (a topology spread constraint on "
        "kubernetes.io/hostname, maxSkew 1): Preferred (the scheduler tries; ScheduleAnyway), Required (a replica "
        "waits rather than share a node; DoNotSchedule) or Off. Replicas on different nodes survive the loss of one.",
    )


# ---- router ------------------------------------------------------------------------------------------------------


class RouterSpec(SpecModel):
    """The PD router that pairs prefill and decode servers and serves the OpenAI API: the router package pinned for
    spec.sglang.version (sglang-router 0.1.9 for 0.5.2, smg 1.13.0 for 0.5.23)."""

    replicas: int = Field(default=1, ge=0, le=64, description="Number of router pods.")
    image: str | None = Field(
        default=None,
        max_length=_MAX_STR,
        description=(
            "Router image; defaults to the operator's routerImage setting, else the project's router image for "
            "spec.sglang.version (disaggspec/router:sglang-router-0.1.9 for 0.5.2, disaggspec/router:smg-1.13.0 "
            "for 0.5.23), which carries exactly the pinned router package and the readiness helper. An image "
            "reference like spec.sglang.image."
        ),
    )
    policy: RouterPolicy | None = Field(
        default=None,
        description=(
            "Load-balancing policy (--policy). Unset: cache_aware with smg (0.5.23), round_robin with sglang-router "
            "0.1.9 (0.5.2), whose cache_aware cannot select the workers it discovers."
        ),
    )
    port: int = Field(
        default=DEFAULT_ROUTER_PORT,
        ge=1,
        le=65535,
        description=f"HTTP port of the router and its Service; not {ROUTER_METRICS_PORT}, the router's metrics port.",
    )
    service_type: ServiceType = Field(default="ClusterIP", description="Type of the router's Service.")
    resources: ResourceRequirements = Field(
        default_factory=ResourceRequirements,
        description="Resources of the router container. Unset requests default to cpu 1 and memory 1Gi (a router "
        "proxies every request and, with cache_aware, keeps a prefix tree per worker); each key given here wins.",
    )
    disruption: DisruptionSpec = Field(
        default_factory=DisruptionSpec, description="The PodDisruptionBudget of the router."
    )
    priority_class_name: str | None = Field(
        default=None,
        min_length=1,
        max_length=_MAX_NAME,
        pattern=_DNS_SUBDOMAIN,
        description="PriorityClass of the router pods (a DNS subdomain); unset uses the cluster's default priority.",
    )
    spread: SpreadMode = Field(
        default="Preferred",
        description="How router replicas spread over nodes: Preferred, Required or Off, as spec.<pool>.spread.",
    )


# ---- rollout -----------------------------------------------------------------------------------------------------


class RolloutSpec(SpecModel):
    """How a change of the spec fingerprint (image, model or draft revision, speculative settings, engine, transfer)
    rolls out: the new settings run as a new revision (its own prefill, decode and router Deployments) next to the
    old one, which keeps serving until the new one has replaced its capacity (README, Changing a running service).
    maxSurge and maxUnavailable also shape an ordinary rolling update within one revision."""

    max_surge: int = Field(
        default=1,
        ge=0,
        le=1024,
        description="Pods of each pool the rollout may run above its replicas while the old revision serves: each "
        "one needs a free slot for a whole pool pod (its GPUs). 0: a new pod starts only where an old one was "
        "removed, which needs maxUnavailable of at least 1.",
    )
    max_unavailable: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="How far the ready pods of each pool (both revisions together) may fall below its replicas "
        "during a rollout. 0 (the default): an old pod is removed only once a new one is ready and serving, so the "
        "service never loses capacity; a rollout without a free slot for a surge pod then holds (Progressing=False, "
        "reason RolloutHeld) instead of emptying the pool. 1 with maxSurge 0 replaces pods in place, one at a time.",
    )
    max_skew: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Lockstep of the new revision's two pools: neither may run ahead of the other by more than this "
        "fraction of its replicas (ready new prefill / prefill replicas against ready new decode / decode "
        "replicas), so the new revision grows as matched pairs. Each pool may always have one pod.",
    )
    progress_deadline_seconds: int | None = Field(
        default=None,
        ge=30,
        le=86400,
        description="How long the new revision may go without another pod becoming ready before the rollout holds: "
        "Progressing=False with reason RolloutHeld and a RolloutHeld Event, the old revision keeps serving, nothing "
        "more is scaled until a pod becomes ready or the spec changes. Unset: the larger pool's start-up budget plus "
        "its drain budget and 600 s (spec.<pool>.lifecycle), as for the Deployments.",
    )


# ---- spec --------------------------------------------------------------------------------------------------------


class DisaggSpecServiceSpec(SpecModel):
    """A prefill pool and a decode pool of one model with one set of speculative settings, plus their router."""

    sglang: SGLangSpec = Field(description="SGLang image and release both pools run.")
    model: ModelSpec = Field(description="The target model.")
    speculative: SpeculativeSpec = Field(description="Speculative decoding settings shared by both pools.")
    transfer: TransferSpec = Field(
        default_factory=TransferSpec, description="Prefill-to-decode transfer: backend, bootstrap port, RDMA."
    )
    engine: EngineSpec = Field(default_factory=EngineSpec, description="Server settings identical on both pools.")
    prefill: PoolSpec = Field(description="The prefill pool.")
    decode: PoolSpec = Field(description="The decode pool.")
    router: RouterSpec = Field(default_factory=RouterSpec, description="The PD router.")
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec,
        description="How a change of the must-match settings rolls out as a new revision, and how a rolling update "
        "within one revision surges.",
    )


# ---- status ------------------------------------------------------------------------------------------------------


class Condition(StatusModel):
    """One observation of the service's state (Ready, SpecConfigConsistent, Progressing, Degraded)."""

    type: str = Field(
        max_length=316, description="Condition type: Ready, SpecConfigConsistent, Progressing or Degraded."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str | None = Field(default=None, max_length=1024, description="CamelCase reason of the last change.")
    message: str | None = Field(
        default=None,
        max_length=32768,
        description="Human-readable details; with SpecConfigConsistent=False every failing rule as "
        "[rule] field: message.",
    )
    last_transition_time: str | None = Field(
        default=None, description="When status last changed (RFC 3339).", json_schema_extra={"format": "date-time"}
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="The spec generation this condition was computed from."
    )


class PoolStatus(StatusModel):
    """Replica counts of one pool (or the router)."""

    replicas: int = Field(default=0, ge=0, description="Desired replicas.")
    ready_replicas: int = Field(default=0, ge=0, description="Replicas whose server is ready.")
    updated_replicas: int = Field(default=0, ge=0, description="Replicas running the current spec.")
    available_replicas: int = Field(default=0, ge=0, description="Replicas ready for at least minReadySeconds.")
    ready: str | None = Field(default=None, max_length=32, description="readyReplicas/replicas, for kubectl get.")


RevisionTraffic = Literal["Active", "Rolling", "Draining", "Failed"]


class RevisionPoolStatus(StatusModel):
    """One pool (or the router) of one revision."""

    replicas: int = Field(default=0, ge=0, description="Pods the operator currently asks this revision for.")
    ready_replicas: int = Field(default=0, ge=0, description="Of those, ready.")


class RevisionStatus(StatusModel):
    """One revision: the children of one spec fingerprint."""

    fingerprint: str = Field(max_length=128, description="The spec fingerprint of this revision.")
    name: str = Field(max_length=32, description="The suffix of its Deployment names: <service>-<pool>-<name>.")
    created: str | None = Field(
        default=None,
        description="When its first Deployment was created (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    traffic: RevisionTraffic = Field(
        description="Active: the only revision, rolled out. Rolling: the current spec, growing while an older one "
        "still serves. Draining: an older spec, shrinking as the current one grows. Failed: the current spec's "
        "rollout is held (see the Progressing condition)."
    )
    serving: bool = Field(
        default=False, description="Its router has a ready prefill and a ready decode, so it takes requests."
    )
    prefill: RevisionPoolStatus = Field(default_factory=RevisionPoolStatus, description="Its prefill pool.")
    decode: RevisionPoolStatus = Field(default_factory=RevisionPoolStatus, description="Its decode pool.")
    router: RevisionPoolStatus = Field(default_factory=RevisionPoolStatus, description="Its router.")
    last_progress_time: str | None = Field(
        default=None,
        description="When another of its pods last became ready (RFC 3339); the rollout deadline counts from it.",
        json_schema_extra={"format": "date-time"},
    )
    retiring_since: str | None = Field(
        default=None,
        description="An older revision: when its router was scaled to zero (RFC 3339); its pools go once the router "
        "pods are gone.",
        json_schema_extra={"format": "date-time"},
    )


class DisaggSpecServiceStatus(StatusModel):
    """What the operator last observed."""

    observed_generation: int | None = Field(default=None, ge=0, description="The spec generation last reconciled.")
    conditions: list[Condition] = Field(
        default_factory=list,
        max_length=16,
        description="Current conditions.",
        # One entry per type, merged by type under server-side apply (as for Pod conditions).
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    prefill: PoolStatus | None = Field(default=None, description="The prefill pool's replicas.")
    decode: PoolStatus | None = Field(default=None, description="The decode pool's replicas.")
    router: PoolStatus | None = Field(default=None, description="The router's replicas.")
    spec_fingerprint: str | None = Field(
        default=None, max_length=128, description="Hash of every setting that must match across the pools."
    )
    endpoint: str | None = Field(default=None, max_length=_MAX_STR, description="URL of the router's Service.")
    revisions: list[RevisionStatus] = Field(
        default_factory=list,
        max_length=16,
        description="Every revision with children, the current one first: during a rollout the new revision and the "
        "ones it replaces.",
    )

    def to_wire(self) -> dict[str, Any]:
        """The status as JSON for the API server: camelCase keys, unset (None) fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ObjectMeta(BaseModel):
    """The part of metadata the operator reads; everything else is kept as given."""

    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True)

    name: str = Field(default="", description="Object name.")
    namespace: str | None = Field(default=None, description="Object namespace.")
    generation: int | None = Field(default=None, description="Spec generation.")
    uid: str | None = Field(default=None, description="Object UID.")


class DisaggSpecService(BaseModel):
    """The whole custom resource."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    api_version: Literal["disaggspec.io/v1alpha1"] = Field(default="disaggspec.io/v1alpha1", alias="apiVersion")
    kind: Literal["DisaggSpecService"] = Field(default=KIND)
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: DisaggSpecServiceSpec
    status: DisaggSpecServiceStatus | None = None
