"""A pool's parallel layout beyond tensor parallelism (`spec.prefill.parallelism`, `spec.decode.parallelism`): data
parallel attention, expert parallelism and its all-to-all backend, the dense-MLP TP size, the DP LM head, two-batch
overlap and expert-parallel load balancing (EPLB). Each pool has its own: SGLang's PD transfer pairs a prefill and a
decode of different layouts. Which release flag each field renders, and what is checked against what, is
`disaggspec.sglang.parallelism` and the `parallelism` rule family.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from disaggspec.api.v1alpha1.base import SpecModel

MAX_PARALLEL_SIZE = 1024
"""Upper bound of a parallel size: the largest tensorParallelSize the schema allows (pools.MAX_TENSOR_PARALLEL_SIZE,
64 nodes x 16 GPUs); the rules bind each size to the pool's tensorParallelSize."""
MAX_REDUNDANT_EXPERTS = 1024
"""Upper bound of EPLB's redundant experts: far above what a deployment uses (SGLang's DeepSeek example uses 32)."""

A2ABackend = Literal["none", "deepep"]
DeepEPMode = Literal["auto", "normal", "low_latency"]


class DataParallelAttention(SpecModel):
    """Data-parallel attention: the server's tensorParallelSize GPUs run `size` attention groups, each with its own
    scheduler, KV cache and batch, while the MoE layers stay spread over all the GPUs."""

    size: int = Field(
        ge=2,
        le=MAX_PARALLEL_SIZE,
        description="Attention data-parallel ranks of one server (0.5.2: --enable-dp-attention --dp-size; 0.5.23: "
        "--attn-dp-size). Must divide tensorParallelSize; each rank attends with tensorParallelSize / size GPUs "
        "(equal: pure DP attention, one GPU per rank, as in SGLang's DeepSeek deployments). Omit the block for "
        "tensor-parallel attention.",
    )


class ExpertParallel(SpecModel):
    """Expert parallelism of the MoE layers: experts are spread over the server's GPUs instead of each being sharded
    across them, optionally with an all-to-all backend that sends each token only to the GPUs of its experts."""

    size: int = Field(
        ge=2,
        le=MAX_PARALLEL_SIZE,
        description="GPUs the experts are spread over (--ep-size). Must divide tensorParallelSize; with backend "
        "deepep it must equal tensorParallelSize (SGLang sets it so).",
    )
    backend: A2ABackend = Field(
        default="none",
        description="MoE all-to-all backend (--moe-a2a-backend): none (the experts' outputs are reduced over the "
        "GPUs) or deepep (DeepEP dispatch and combine; needs the DeepEP library and, across nodes, NVSHMEM with "
        "RDMA).",
    )
    deepep_mode: DeepEPMode | None = Field(
        default=None,
        description="DeepEP dispatch mode (--deepep-mode), only with backend deepep: normal (throughput kernels; "
        "SGLang disables CUDA graphs, the usual prefill choice), low_latency (CUDA-graph friendly, the usual decode "
        "choice) or auto (SGLang's default: low_latency for decode batches, normal otherwise).",
    )


class ExpertLoadBalancing(SpecModel):
    """Expert-parallel load balancing (EPLB): SGLang records which experts tokens go to and periodically moves and
    replicates experts so the GPUs get even work."""

    redundant_experts: int = Field(
        default=0,
        ge=0,
        le=MAX_REDUNDANT_EXPERTS,
        description="Extra expert replicas EPLB may place on the GPUs (--ep-num-redundant-experts); 0 moves experts "
        "without replicating them.",
    )


class ParallelismSpec(SpecModel):
    """How one pool's servers split the model beyond tensor parallelism. Every field is this pool's own: a prefill
    and a decode of different layouts pair correctly, and the hints a prefill needs about its decode's layout are
    rendered by the operator from the decode pool's spec."""

    data_parallel_attention: DataParallelAttention | None = Field(
        default=None,
        description="Data-parallel attention (DP attention); unset: attention is tensor parallel over all the "
        "server's GPUs.",
    )
    expert_parallel: ExpertParallel | None = Field(
        default=None,
        description="Expert parallelism of the MoE layers and their all-to-all backend; unset: experts are tensor "
        "parallel (--ep-size 1). Only for MoE models.",
    )
    dense_mlp_tp_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_PARALLEL_SIZE,
        description="Tensor-parallel size of the dense MLP layers of a MoE model (--moe-dense-tp-size); 1 "
        "replicates them on every GPU, which avoids GEMMs too narrow for large TP sizes under DP attention. "
        "0.5.2 accepts only 1; 0.5.23 accepts 1 or tensorParallelSize. Unset: the dense layers follow "
        "tensorParallelSize.",
    )
    dp_lm_head: bool = Field(
        default=False,
        description="Shard the vocabulary (LM head and embedding) within each attention DP rank's GPUs, avoiding "
        "an all-gather across DP ranks (--enable-dp-lm-head). Needs dataParallelAttention.",
    )
    two_batch_overlap: bool = Field(
        default=False,
        description="Split each batch in two and overlap one half's all-to-all communication with the other's "
        "computation (--enable-two-batch-overlap). Needs expertParallel with backend deepep, or dataParallelAttention "
        "(whose all-gathers it then overlaps).",
    )
    eplb: ExpertLoadBalancing | None = Field(
        default=None,
        description="Expert-parallel load balancing (--enable-eplb); needs expertParallel. Unset: experts stay "
        "where they were loaded.",
    )
