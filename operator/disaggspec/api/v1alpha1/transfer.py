"""How KV cache travels from prefill to decode (`spec.transfer`: backend, bootstrap port and the RDMA wiring of NICs,
networks and InfiniBand devices) and the server settings that must be identical on both pools (`spec.engine`:
page size, KV cache dtype, attention backend, context length, quantization, tokenizer, compile cache and the shared
extra arguments).
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

from pydantic import Field

from disaggspec.api.v1alpha1.base import (
    _MAX_EXTRA_ARGS,
    _MAX_NAME,
    _MAX_STR,
    _SERVER_PATH_PATTERN,
    QuantityMap,
    SpecModel,
)
from disaggspec.api.v1alpha1.model import CacheVolume
from disaggspec.api.v1alpha1.pools import MAX_GPUS_PER_POD

TransferBackend = Literal["mooncake", "nixl", "mooncake_tcp", "mori", "ascend", "fake"]
IbDeviceMapping = Literal["Auto", "Static"]
KvCacheDtype = Literal["auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "fp4_mx_block16", "mxfp8", "nvfp4"]

DEFAULT_BOOTSTRAP_PORT: Final = 8998
"""SGLang's default `--disaggregation-bootstrap-port` (0.5.2 server_args.py:379, 0.5.23 fields/disagg.py:81-83)."""

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
