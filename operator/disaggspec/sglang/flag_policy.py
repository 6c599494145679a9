"""The classification of every SGLang server option, keyed by argparse `dest` (stable across a flag's aliases and
`--no-` spellings): OWNED, MUST_MATCH, PER_POOL_SAFE or FORBIDDEN, with the typed field, the reason or the value
check that goes with it. The validation rules (`validation/extra_args.py`) read it for every extraArgs element.

- OWNED: rendered by the operator from a typed field (or fixed by the pod layout, or derived from the peer pool's
  spec); extraArgs never set it.
- MUST_MATCH: changes what a pool computes (model, weights, tokenizer and templates, numeric precision, sampling,
  LoRA, the draft): it must be identical on prefill and decode, so it lives in `spec.engine.extraArgs` (rendered on
  both) or, for the common ones, in its typed field (TYPED_MUST_MATCH). In PD the router sends every request to both
  pools and each tokenizes it on its own.
- PER_POOL_SAFE: capacity, scheduling, memory, caching, CUDA graphs and kernels of the same precision, logging,
  metrics, tracing, timeouts, and PD settings only one side reads: a pool may set it alone.
- FORBIDDEN: breaks the pod or the pairing whatever the other pool does (GPU ids and parallel sizes beyond the pod's
  GPUs, several nodes, a config file, per-phase attention backends, TLS the router cannot speak, ...).

Kernel choices that keep the precision regime are per-pool safe: the two pools already differ in reduction order
whenever their tensor parallel sizes differ. When the help text leaves doubt, an option is MUST_MATCH: that costs a
user nothing but writing it once in spec.engine.extraArgs. Rules are explicit entries first, then prefix families;
`classify` returns None for a dest nothing covers, and a unit test fails listing every such dest of every supported
release (and every entry or family that matches no dest any more). Citations are `file:line` in the released wheels.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal

ValueCheck = Literal["port", "divides-tp"]
"""A check on an option's value: `port` (a port the server binds: not the HTTP port, the bootstrap port or another
port of the pool), `divides-tp` (a parallel size that must divide the pool's tensorParallelSize)."""


class FlagClass(StrEnum):
    """The four classes of an option."""

    OWNED = "owned"
    MUST_MATCH = "must-match"
    PER_POOL_SAFE = "per-pool-safe"
    FORBIDDEN = "forbidden"


@dataclass(frozen=True)
class Policy:
    """What one dest is and what goes with its class."""

    cls: FlagClass
    field: str | None = None
    """OWNED: what renders it (a spec field, or the fixed value); MUST_MATCH: its typed field, if it has one."""
    reason: str | None = None
    """FORBIDDEN: why, and what to do instead."""
    check: ValueCheck | None = None


def _owned(field: str) -> Policy:
    return Policy(FlagClass.OWNED, field=field)


def _forbidden(reason: str) -> Policy:
    return Policy(FlagClass.FORBIDDEN, reason=reason)


MUST: Final = Policy(FlagClass.MUST_MATCH)
SAFE: Final = Policy(FlagClass.PER_POOL_SAFE)
SAFE_PORT: Final = Policy(FlagClass.PER_POOL_SAFE, check="port")
SAFE_DIVIDES_TP: Final = Policy(FlagClass.PER_POOL_SAFE, check="divides-tp")

_DP_ATTENTION: Final = "spec.<pool>.parallelism.dataParallelAttention.size"
_EP: Final = "spec.<pool>.parallelism.expertParallel.size"
_FROM_PEER: Final = (
    "the operator, from the peer pool (spec.decode.tensorParallelSize and "
    "spec.<pool>.parallelism.dataParallelAttention): a hint about the other pool's layout is never typed twice"
)

OWNED: Final[dict[str, Policy]] = {
    "model_path": _owned("spec.model.path"),
    "revision": _owned("spec.model.revision"),
    "dtype": _owned("spec.model.dtype"),
    "trust_remote_code": _owned("spec.model.trustRemoteCode"),
    "served_model_name": _owned("spec.model.servedModelName"),
    "tp_size": _owned("spec.<pool>.tensorParallelSize"),
    "tensor_parallel_size": _owned("spec.<pool>.tensorParallelSize"),  # 0.5.2's dest of --tp-size
    "host": _owned("the operator (0.0.0.0: the router reaches each pod on its IP)"),
    "port": _owned("the operator (30000: the router discovers pods at that port)"),
    "enable_metrics": _owned("the operator (always on: the pods' metrics are scraped)"),
    "disaggregation_mode": _owned("the pool's role (spec.prefill or spec.decode)"),
    "disaggregation_bootstrap_port": _owned("spec.transfer.bootstrapPort"),
    "disaggregation_transfer_backend": _owned("spec.transfer.backend"),
    "disaggregation_ib_device": _owned("spec.transfer.rdma.ibDevices or spec.transfer.rdma.ibDevicesPerGpu"),
    "disaggregation_decode_allocation_policy": _owned("spec.engine.decodeAllocationPolicy"),
    "disaggregation_enable_kv_checksum": _owned("spec.engine.kvChecksum"),
    "page_size": _owned("spec.engine.pageSize"),
    "kv_cache_dtype": _owned("spec.engine.kvCacheDtype"),
    "attention_backend": _owned("spec.engine.attentionBackend"),
    "speculative_algorithm": _owned("spec.speculative.algorithm"),
    "speculative_draft_model_path": _owned("spec.speculative.draftModel.path"),
    "speculative_draft_model_revision": _owned("spec.speculative.draftModel.revision"),
    "speculative_num_steps": _owned("spec.speculative.numSteps"),
    "speculative_eagle_topk": _owned("spec.speculative.eagleTopk"),
    "speculative_num_draft_tokens": _owned("spec.speculative.numDraftTokens"),
    "speculative_use_rejection_sampling": _owned("spec.speculative.rejectionSampling"),
    "speculative_draft_kv_cache_dtype": _owned("spec.speculative.draftKvCacheDtype"),
    "enable_multi_layer_eagle": _owned("spec.speculative.multiLayer"),
    # A pool's parallel layout (sglang/parallelism.py has the per-release table with citations).
    "enable_dp_attention": _owned(_DP_ATTENTION),
    "data_parallel_size": _owned(_DP_ATTENTION),  # 0.5.2's dest of --dp-size: the DP-attention size beside it
    "attn_dp_size": _owned(_DP_ATTENTION),
    "ep_size": _owned(_EP),
    "expert_parallel_size": _owned(_EP),  # 0.5.2's dest of --ep-size
    "enable_ep_moe": _owned(_EP),  # 0.5.2's deprecated spelling of --ep-size <tp> (server_args.py:408-412)
    "moe_a2a_backend": _owned("spec.<pool>.parallelism.expertParallel.backend"),
    "enable_deepep_moe": _owned("spec.<pool>.parallelism.expertParallel.backend"),  # 0.5.2: = deepep (413-417)
    "deepep_mode": _owned("spec.<pool>.parallelism.expertParallel.deepepMode"),
    "moe_dense_tp_size": _owned("spec.<pool>.parallelism.denseMlpTpSize"),
    "enable_dp_lm_head": _owned("spec.<pool>.parallelism.dpLmHead"),
    "enable_two_batch_overlap": _owned("spec.<pool>.parallelism.twoBatchOverlap"),
    "enable_eplb": _owned("spec.<pool>.parallelism.eplb"),
    "ep_num_redundant_experts": _owned("spec.<pool>.parallelism.eplb.redundantExperts"),
    "disaggregation_decode_tp": _owned(_FROM_PEER),
    "disaggregation_decode_dp": _owned(_FROM_PEER),
    "prefill_round_robin_balance": _owned(_FROM_PEER),
}
"""Rendered by `sglang/args.py` from a typed field or fixed; a unit test checks every flag it renders is OWNED (or a
TYPED_MUST_MATCH option rendered from its field)."""

_ONE_NODE: Final = (
    "the operator sets it from spec.<pool>.nodesPerInstance (a server over several nodes runs as a LeaderWorkerSet "
    "group, one pod per node); set nodesPerInstance and gpusPerNode, or scale spec.<pool>.replicas"
)
_GPUS: Final = (
    "a pod has exactly its pool's GPUs, numbered from 0, one per tensor-parallel rank (resources.limits "
    "defaults to tensorParallelSize); scale spec.<pool>.replicas or tensorParallelSize instead"
)
_PEER_LAYOUT: Final = (
    "the prefill sets it from its own pipeline size (0.5.2 server_args.py:833) and pipeline parallelism is not "
    "supported; the peer's layout is not set by hand"
)
_PER_PHASE_BACKEND: Final = (
    "a per-phase attention backend bypasses the checks of spec.engine.attentionBackend against the speculative "
    "settings (a draft tree over pages needs a supported backend); set spec.engine.attentionBackend"
)
_PLAIN_HTTP: Final = "the router and the probes reach pool pods over plain HTTP on port 30000"
_NOT_WIRED: Final = "the operator does not deploy or wire the other processes this mode needs"

MULTI_NODE: Final = ("nnodes", "node_rank", "dist_init_addr")
"""FORBIDDEN in extraArgs, yet rendered by the operator (sglang/args.py `multi_node_args`) for a pool whose
nodesPerInstance > 1: the only forbidden options a rendered command carries."""

FORBIDDEN: Final[dict[str, Policy]] = {
    "config": _forbidden(
        "loads server arguments from a file no rule can check, where every owned flag could be set on one pool; "
        "write the arguments in extraArgs"
    ),
    "nnodes": _forbidden(_ONE_NODE),
    "node_rank": _forbidden(_ONE_NODE),
    "dist_init_addr": _forbidden(_ONE_NODE),
    "pp_size": _forbidden(f"pipeline stages multiply the GPUs a server uses: {_GPUS}"),
    "pipeline_parallel_size": _forbidden(f"pipeline stages multiply the GPUs a server uses: {_GPUS}"),
    "dp_size": _forbidden(
        f"data-parallel replicas multiply the GPUs a server uses: {_GPUS}; for DP attention set "
        "spec.<pool>.parallelism.dataParallelAttention"
    ),
    "base_gpu_id": _forbidden(f"moves the ranks off the pod's GPUs: {_GPUS}"),
    "gpu_id_step": _forbidden(f"moves the ranks off the pod's GPUs: {_GPUS}"),
    "numa_node": _forbidden("pins schedulers to NUMA nodes the pod was not scheduled on; use nodeSelector/affinity"),
    "disaggregation_prefill_pp": _forbidden(_PEER_LAYOUT),
    "prefill_attention_backend": _forbidden(_PER_PHASE_BACKEND),
    "decode_attention_backend": _forbidden(_PER_PHASE_BACKEND),
    "enable_pd_role_switch": _forbidden("switches a pool's PD role at runtime; the roles are the operator's"),
    "enable_pdmux": _forbidden("runs prefill and decode in one server; the operator runs them as two pools"),
    "pdmux_config_path": _forbidden("runs prefill and decode in one server; the operator runs them as two pools"),
    "ssl_certfile": _forbidden(_PLAIN_HTTP),
    "ssl_keyfile": _forbidden(_PLAIN_HTTP),
    "ssl_keyfile_password": _forbidden(_PLAIN_HTTP),
    "ssl_ca_certs": _forbidden(_PLAIN_HTTP),
    "enable_ssl_refresh": _forbidden(_PLAIN_HTTP),
    "api_key": _forbidden("the router calls the pools without a key; put authentication in front of the router"),
    "smg_grpc_mode": _forbidden(f"replaces the HTTP server with gRPC; {_PLAIN_HTTP}"),
    "grpc_mode": _forbidden(f"replaces the HTTP server with gRPC; {_PLAIN_HTTP}"),
    "gated_launch_port": _forbidden("every rank blocks at start until an external controller releases it"),
    "use_ray": _forbidden(f"schedulers become Ray actors of a Ray cluster; {_NOT_WIRED}"),
    "decoupled_spec_role": _forbidden(f"decoupled speculative decoding splits drafter and verifier; {_NOT_WIRED}"),
    "decoupled_spec_rank": _forbidden(f"decoupled speculative decoding splits drafter and verifier; {_NOT_WIRED}"),
    "decoupled_spec_bind_endpoint": _forbidden(
        f"decoupled speculative decoding splits drafter and verifier; {_NOT_WIRED}"
    ),
    "decoupled_spec_connect_endpoints": _forbidden(
        f"decoupled speculative decoding splits drafter and verifier; {_NOT_WIRED}"
    ),
    "encoder_only": _forbidden(f"encoder disaggregation (EPD); {_NOT_WIRED}"),
    "language_only": _forbidden(f"encoder disaggregation (EPD); {_NOT_WIRED}"),
    "encoder_urls": _forbidden(f"encoder disaggregation (EPD); {_NOT_WIRED}"),
    "encoder_register_urls": _forbidden(f"encoder disaggregation (EPD); {_NOT_WIRED}"),
    "encoder_transfer_backend": _forbidden(f"encoder disaggregation (EPD); {_NOT_WIRED}"),
    "encoder_bootstrap_port": _forbidden(f"encoder disaggregation (EPD); {_NOT_WIRED}"),
    "enable_adaptive_dispatch_to_encoder": _forbidden(f"encoder disaggregation (EPD); {_NOT_WIRED}"),
    "max_ep_size": _forbidden(f"elastic EP scales past the pod's GPUs; {_GPUS}"),
    "elastic_ep_backend": _forbidden(f"elastic EP scales past the pod's GPUs; {_GPUS}"),
    "elastic_ep_initial_size": _forbidden(f"elastic EP scales past the pod's GPUs; {_GPUS}"),
    "elastic_ep_scale_timeout": _forbidden(f"elastic EP scales past the pod's GPUs; {_GPUS}"),
    "ep_join_mode": _forbidden(f"elastic EP scales past the pod's GPUs; {_GPUS}"),
    "ep_join_rank_offset": _forbidden(f"elastic EP scales past the pod's GPUs; {_GPUS}"),
    "mooncake_ib_device": _forbidden(
        "the transfer's InfiniBand devices are rendered from spec.transfer.rdma (ibDevices, ibDevicesPerGpu)"
    ),
}

TYPED_MUST_MATCH: Final[dict[str, Policy]] = {
    "context_length": Policy(FlagClass.MUST_MATCH, field="spec.engine.contextLength"),
    "quantization": Policy(FlagClass.MUST_MATCH, field="spec.engine.quantization"),
    "chat_template": Policy(FlagClass.MUST_MATCH, field="spec.engine.chatTemplate"),
    "tokenizer_path": Policy(FlagClass.MUST_MATCH, field="spec.engine.tokenizerPath"),
    "speculative_token_map": Policy(FlagClass.MUST_MATCH, field="spec.speculative.tokenMap"),
}
"""MUST_MATCH options that also have a typed field (rendered on both pools when set); spec.engine.extraArgs may hold
them instead, not as well."""

MUST_MATCH: Final[frozenset[str]] = frozenset(
    {
        # The model, its weights, their format and config (a different model on one pool).
        "load_format",
        "json_model_override_args",
        "model_impl",
        "model_loader_extra_config",
        "model_config_parser",
        "custom_weight_loader",
        "decrypted_config_file",
        "decrypted_draft_config_file",
        "is_embedding",
        "enable_multimodal",
        "language_model_only",
        "modelexpress_config",
        "checkpoint_engine_wait_weights_before_ready",
        "uno_lora_path",
        "forward_hooks",
        # Quantization and numeric precision.
        "torchao_config",
        "quantization_param_path",
        "quantize_and_serve",
        "rl_quant_profile",
        "enable_fp32_lm_head",
        "enable_tf32_matmul",
        "triton_attention_reduce_in_fp32",
        "flashinfer_mxfp4_moe_precision",
        "deepep_dispatcher_output_dtype",
        "flashinfer_a2a_dispatch_type",
        "enable_quant_communications",
        "prefill_kv_cache_dequant_dtype",
        "qsa_indexer_dtype",
        "enable_deepseek_v4_fp4_indexer",
        "enable_w4a4_mxfp4_megamoe",
        "enable_int8_mamba_checkpoint",
        "enable_deterministic_inference",
        "rl_on_policy_target",
        "enable_nan_detection",
        # Sparse or approximate attention: both pools must attend the same way.
        "enable_double_sparsity",
        "ds_channel_config_path",
        "ds_heavy_channel_num",
        "ds_heavy_channel_type",
        "ds_heavy_token_num",
        "ds_sparse_decode_threshold",
        "enable_hisparse",
        "hisparse_config",
        "enable_decoder_swa_bounded_replay",
        "enable_encoder_swa_bounded_replay",
        "enable_linear_replayssm",
        "enable_linear_replayssm_spec",
        "linear_replayssm_cache_len",
        # Tokenization, templates and request handling (each pool tokenizes every request itself).
        "tokenizer_mode",
        "tokenizer_backend",
        "skip_tokenizer_init",
        "completion_template",
        "hf_chat_template_name",
        "default_chat_template_kwargs",
        "trust_request_chat_template",
        "allow_auto_truncate",
        "image_processor_backend",
        "disable_fast_image_processor",
        "enable_precise_embedding_interpolation",
        "limit_mm_data_per_request",
        "mm_process_config",
        # Sampling, grammar and what a request may ask for.
        "preferred_sampling_params",
        "sampling_defaults",
        "sampling_backend",
        "random_seed",
        "grammar_backend",
        "constrained_json_whitespace_pattern",
        "constrained_json_disable_any_whitespace",
        "constrained_json_max_whitespace_cnt",
        "reasoning_parser",
        "tool_call_parser",
        "tool_server",
        "enable_strict_thinking",
        "enable_watermark",
        "watermark_config",
        "enable_custom_logit_processor",
        "enable_return_hidden_states",
        "return_hidden_states_mode",
        "enable_return_aux_hidden_states",
        "return_aux_hidden_state_layer_ids",
        "enable_return_routed_experts",
        "enable_return_indexer_topk",
        "enable_mis",
        "mlx_enable_sampling",
        "sampling_mask_max_tokens",
        # LoRA adapters: a request naming an adapter must find it on both pools.
        "enable_lora",
        "max_lora_rank",
        "max_loaded_loras",
        "max_loras_per_batch",
        "experts_shared_outer_loras",
        # Model-family switches that change the computation.
        "enable_scattered_sconv",
        "boundary_reduction",
        "enable_layernorm_sp",
        "enable_megamoe_for_layernorm_sp",
        "enable_dense_mlp_attn_tp",
        "enable_mamba_cache_stochastic_rounding",
        "mamba_cache_philox_rounds",
        "enable_nvidia_megakernel",
        "enable_amd_monokernel",
        "device",
    }
)
"""Single MUST_MATCH dests (families are in FAMILIES)."""

PER_POOL_SAFE: Final[dict[str, Policy]] = {
    # Ports the server binds besides its HTTP and bootstrap ports.
    "nccl_port": SAFE_PORT,
    "grpc_port": SAFE_PORT,
    "engine_info_bootstrap_port": SAFE_PORT,
    "smg_http_sidecar_port": SAFE_PORT,
    # Parallel sizes inside the pod's tensor-parallel group: each must divide tensorParallelSize (0.5.23
    # model_executor/model_runner_components/moe_ep_setup.py:150-153 and arg_groups/parallel_hook.py:157-173).
    "moe_dp_size": SAFE_DIVIDES_TP,
    "shared_experts_tp_size": SAFE_DIVIDES_TP,
    "attn_cp_size": SAFE_DIVIDES_TP,
    "dcp_size": SAFE_DIVIDES_TP,
    "dwdp_size": SAFE_DIVIDES_TP,
    # PD settings one side reads. disaggregation_decode_polling_interval: 0.5.23 disaggregation/decode.py:3475-3478
    # (the decode scheduler's transfer polling; prefill never reads it).
    "disaggregation_decode_polling_interval": SAFE,
    "disaggregation_decode_enable_radix_cache": SAFE,
    "disaggregation_decode_enable_offload_kvcache": SAFE,
    "disaggregation_decode_extra_slots": SAFE,
    "disaggregation_decode_host_receive_threshold": SAFE,
    "disaggregation_decode_retraction_backup": SAFE,
    "optimistic_prefill_attempts": SAFE,
    "num_reserved_decode_tokens": SAFE,
    # Capacity, scheduling and memory.
    "mem_fraction_static": SAFE,
    "max_running_requests": SAFE,
    "max_queued_requests": SAFE,
    "max_total_tokens": SAFE,
    "max_prefill_tokens": SAFE,
    "chunked_prefill_size": SAFE,
    "prefill_max_requests": SAFE,
    "max_micro_batch_size": SAFE,
    "schedule_policy": SAFE,
    "schedule_conservativeness": SAFE,
    "schedule_low_priority_values_first": SAFE,
    "enable_priority_scheduling": SAFE,
    "disable_priority_preemption": SAFE,
    "priority_scheduling_preemption_threshold": SAFE,
    "default_priority_value": SAFE,
    "abort_on_priority_when_disabled": SAFE,
    "retraction_policy": SAFE,
    "scheduler_recv_interval": SAFE,
    "num_continuous_decode_steps": SAFE,
    "prefill_decode_interval": SAFE,
    "prefill_decode_interval_min_bs": SAFE,
    "min_free_slots_delay": SAFE,
    "enable_mixed_chunk": SAFE,
    "enable_dynamic_chunking": SAFE,
    "disable_overlap_schedule": SAFE,
    "enable_single_batch_overlap": SAFE,
    "tbo_token_distribution_threshold": SAFE,
    "load_balance_method": SAFE,
    "sleep_on_idle": SAFE,
    "cpu_offload_gb": SAFE,
    "enable_memory_saver": SAFE,
    "enable_weights_cpu_backup": SAFE,
    "enable_draft_weights_cpu_backup": SAFE,
    "swa_full_tokens_ratio": SAFE,
    "swa_prefix_tails": SAFE,
    "disable_hybrid_swa_memory": SAFE,
    "hybrid_kvcache_ratio": SAFE,
    "enable_unified_memory": SAFE,
    "enable_page_major_kv_layout": SAFE,
    "enable_kv_cache_sharding": SAFE,
    "c128_page_size": SAFE,
    "prefill_only_disable_kv_cache": SAFE,
    "enable_paged_experts": SAFE,
    "paged_experts_num_resident": SAFE,
    "int8_mamba_ckpt_size": SAFE,
    "sm_group_num": SAFE,
    # Prefix caching and KV cache tiers (which tokens are recomputed, not what they compute).
    "disable_radix_cache": SAFE,
    "disable_chunked_prefix_cache": SAFE,
    "radix_cache_backend": SAFE,
    "radix_eviction_policy": SAFE,
    "radix_eviction_policy_config": SAFE,
    "enable_session_radix_cache": SAFE,
    "strip_thinking_cache": SAFE,
    "enable_hierarchical_cache": SAFE,
    "enable_lmcache": SAFE,
    "lmcache_config_file": SAFE,
    "enable_flexkv": SAFE,
    "flexkv_config_file": SAFE,
    "enable_unified_cache_external_linker": SAFE,
    "unified_cache_external_linker_backend": SAFE,
    "unified_cache_external_linker_config": SAFE,
    "enable_linker_mla_dedup": SAFE,
    "kv_events_config": SAFE,
    "enable_mm_global_cache": SAFE,
    "mm_global_cache_backend": SAFE,
    "enable_prefix_mm_cache": SAFE,
    "mm_preprocess_cache_size_mb": SAFE,
    # CUDA graphs, compilation and kernels of the same precision.
    "disable_cuda_graph": SAFE,
    "disable_cuda_graph_padding": SAFE,
    "disable_decode_cuda_graph": SAFE,
    "disable_prefill_cuda_graph": SAFE,
    "debug_cuda_graph": SAFE,
    "enable_cudagraph_gc": SAFE,
    "enable_profile_cuda_graph": SAFE,
    "enable_torch_compile": SAFE,
    "enable_torch_compile_debug_mode": SAFE,
    "torch_compile_max_bs": SAFE,
    "disable_custom_all_reduce": SAFE,
    "enable_mscclpp": SAFE,
    "enable_nccl_nvls": SAFE,
    "enable_symm_mem": SAFE,
    "enable_torch_symm_mem": SAFE,
    "pre_warm_nccl": SAFE,
    "enable_p2p_check": SAFE,
    "enable_flashinfer_allreduce_fusion": SAFE,
    "enforce_disable_flashinfer_allreduce_fusion": SAFE,
    "flashinfer_allreduce_fusion_backend": SAFE,
    "enable_aiter_allreduce_fusion": SAFE,
    "disable_aiter_allreduce_fusion_in_decode": SAFE,
    "disable_aiter_allreduce_fusion_in_prefill": SAFE,
    "enable_fused_moe_sum_all_reduce": SAFE,
    "enable_fused_qk_norm_rope": SAFE,
    "disable_flashinfer_autotune": SAFE,
    "flashinfer_autotune_skip_ops": SAFE,
    "disable_flashinfer_cutlass_moe_fp4_allgather": SAFE,
    "flashinfer_mla_disable_ragged": SAFE,
    "triton_attention_num_kv_splits": SAFE,
    "triton_attention_split_tile_size": SAFE,
    "enable_lean_attention": SAFE,
    "mm_attention_backend": SAFE,
    "bf16_gemm_backend": SAFE,
    "fp8_gemm_runner_backend": SAFE,
    "fp4_gemm_runner_backend": SAFE,
    "moe_runner_backend": SAFE,
    "deepep_v2_mode": SAFE,
    "deepep_config": SAFE,
    "fuseep_mode": SAFE,
    "mamba_backend": SAFE,
    "disable_shared_experts_fusion": SAFE,
    "enforce_shared_experts_fusion": SAFE,
    "enable_shared_experts_attn_tp": SAFE,
    "enable_waterfill": SAFE,
    "enable_tp_lm_head_all_to_all": SAFE,
    "enable_attn_tp_input_scattered": SAFE,
    "disable_attn_tp_gather": SAFE,
    "enable_dp_attention_local_control_broadcast": SAFE,
    "enable_cp_decode_attn_tp": SAFE,
    "enable_prefill_cp": SAFE,
    "cp_strategy": SAFE,
    "dcp_comm_backend": SAFE,
    "dcp_replicate_q_proj": SAFE,
    "enable_dsa_cache_layer_split": SAFE,
    "enable_dsa_fused_indexer": SAFE,
    "mm_enable_dp_encoder": SAFE,
    "mm_feature_transport": SAFE,
    "enable_broadcast_mm_inputs_process": SAFE,
    "startup_weight_load_mode": SAFE,
    "warmups": SAFE,
    "skip_server_warmup": SAFE,
    # Expert placement and balancing (which GPU holds an expert, not what it computes).
    "ep_dispatch_algorithm": SAFE,
    "init_expert_location": SAFE,
    "enable_elastic_expert_backup": SAFE,
    # Loading mechanics of the same weights.
    "download_dir": SAFE,
    "weight_version": SAFE,
    "model_checksum": SAFE,
    "delete_ckpt_after_loading": SAFE,
    "enable_lora_overlap_loading": SAFE,
    "lora_backend": SAFE,
    "max_lora_chunk_size": SAFE,
    "lora_eviction_policy": SAFE,
    "lora_drain_wait_threshold": SAFE,
    # The HTTP and tokenizer front end: workers, timeouts, streaming, storage.
    "tokenizer_worker_num": SAFE,
    "detokenizer_worker_num": SAFE,
    "enable_tokenizer_batch_encode": SAFE,
    "disable_tokenizer_batch_decode": SAFE,
    "enable_dynamic_batch_tokenizer": SAFE,
    "dynamic_batch_tokenizer_batch_size": SAFE,
    "dynamic_batch_tokenizer_batch_timeout": SAFE,
    "mm_io_worker_num": SAFE,
    "mm_processor_worker_num": SAFE,
    "media_url_max_file_size_mb": SAFE,
    "allowed_media_domains": SAFE,
    "trust_mm_content_hashes": SAFE,
    "stream_interval": SAFE,
    "stream_output": SAFE,
    "incremental_streaming_output": SAFE,
    "stream_response_default_include_usage": SAFE,
    "batch_notify_size": SAFE,
    "enable_streaming_session": SAFE,
    "enable_response_store": SAFE,
    "enable_cache_report": SAFE,
    "return_input_ids": SAFE,
    "return_output_ids": SAFE,
    "file_storage_path": SAFE,
    "fastapi_root_path": SAFE,
    "admin_api_key": SAFE,
    "enable_http2": SAFE,
    "http2_initial_connection_window_size": SAFE,
    "http2_max_concurrent_streams": SAFE,
    "enable_http_worker_reuseport": SAFE,
    "grpc_response_timeout_secs": SAFE,
    "sidecar": SAFE,
    "sidecar_args": SAFE,
    "asr_max_buffer_seconds": SAFE,
    "asr_max_concurrent_sessions": SAFE,
    "watchdog_timeout": SAFE,
    "soft_watchdog_timeout": SAFE,
    "dist_timeout": SAFE,
    "gc_threshold": SAFE,
    "gc_warning_threshold_secs": SAFE,
    "load_publish_endpoint": SAFE,
    "load_snapshot_publish_interval": SAFE,
    # Logging, metrics, tracing, profiling and debugging.
    "decode_log_interval": SAFE,
    "show_time_cost": SAFE,
    "crash_dump_folder": SAFE,
    "collect_tokens_histogram": SAFE,
    "prompt_tokens_buckets": SAFE,
    "generation_tokens_buckets": SAFE,
    "extra_metric_labels": SAFE,
    "export_metrics_to_file": SAFE,
    "export_metrics_to_file_dir": SAFE,
    "expert_balancedness_report_mode": SAFE,
    "enable_layerwise_nvtx_marker": SAFE,
    "kv_canary": SAFE,
    "kv_canary_real_data": SAFE,
    "kv_canary_sweep_interval": SAFE,
    "msprobe_dump_config": SAFE,
    "spec_trace_dir": SAFE,
    "forward_pass_metrics_ipc_name": SAFE,
    "forward_pass_metrics_worker_id": SAFE,
    "pp_async_batch_depth": SAFE,
    "pp_max_micro_batch_size": SAFE,
    "remote_instance_weight_loader_start_seed_via_transfer_engine": SAFE,
    "enable_prefill_delayer": SAFE,
    "enable_expert_distribution_metrics": SAFE,
    "enable_metrics_for_all_schedulers": SAFE,
    "enable_mfu_metrics": SAFE,
    "enable_forward_pass_metrics": SAFE,
    "enable_request_time_stats_logging": SAFE,
    "enable_trace": SAFE,
    "disable_outlines_disk_cache": SAFE,
    "max_mamba_cache_size": SAFE,
    # 0.5.2's deprecated MoE runner switch (its EP and DeepEP switches are OWNED by spec.<pool>.parallelism).
    "enable_triton_kernel_moe": SAFE,
}
"""Single PER_POOL_SAFE dests (and a few exceptions inside families), some with a value check."""

FAMILIES: Final[tuple[tuple[str, Policy], ...]] = (
    # The draft must be the same model computed the same way on both pools (typed ones are OWNED above).
    ("speculative_", MUST),
    ("dllm_", MUST),
    ("lora_", MUST),
    ("kt_", MUST),  # ktransformers: which experts run on CPU, in which quantization
    ("modelopt_", MUST),
    ("remote_instance_weight_loader_", MUST),  # where the weights come from
    ("mamba_", MUST),
    ("dsa_", MUST),
    ("dsv4_", MUST),
    ("linear_attn_", MUST),
    ("ple_offload_", SAFE),
    ("weight_loader_", SAFE),
    ("weight_cache_", SAFE),
    ("offload_", SAFE),
    ("hicache_", SAFE),
    ("cuda_graph_", SAFE),
    ("prefill_delayer_", SAFE),
    ("eplb_", SAFE),
    ("expert_distribution_", SAFE),
    ("debug_tensor_dump_", SAFE),
    ("log_", SAFE),
    ("bucket_", SAFE),
    ("trace_", SAFE),
    ("otlp_", SAFE),
    ("uvicorn_", SAFE),
    ("tokenizer_metrics_", SAFE),
    ("enable_flashinfer_", SAFE),  # 0.5.2's deprecated FlashInfer MoE backend switches
)
"""Prefix families, tried in order after the explicit tables."""


def classify(dest: str) -> Policy | None:
    """The policy of an argparse dest, or None when no entry or family covers it (a unit test keeps that empty for
    every supported release)."""
    for table in (OWNED, FORBIDDEN, TYPED_MUST_MATCH, PER_POOL_SAFE):
        if dest in table:
            return table[dest]
    if dest in MUST_MATCH:
        return MUST
    for prefix, policy in FAMILIES:
        if dest.startswith(prefix):
            return policy
    return None
