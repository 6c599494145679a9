"""Cost and memory profiles of one GPU x model x server shape for the emulator's capacity model (issue 31 item 2).

`max_total_num_tokens` is the KV pool SGLang profiles at start-up; `Profile` gives the time of one scheduler step
(one batch of one scheduler, i.e. one DP rank) from named hardware and model numbers, split over the server's tensor,
DP-attention and expert parallel sizes (`Profile.for_server`); `select_profile` picks one from a pod's own command
line and GPU node label. Every number says where it comes from: a datasheet, a model's config.json, a published
SGLang figure (URL and sentence in PROFILE_SOURCES), the pinned wheel (PROFILE_FACTS), or "ASSUMPTION" with the
published figure it was chosen to reproduce. The scheduler that uses them is capacity.py.

Simplifications, stated so that nobody mistakes them for measurements: a step is a roofline (the larger of the bytes
read over the achieved HBM bandwidth and the FLOPs over the achieved peak) plus a fixed per-step overhead and a fixed
per-layer collective time; FLOPs are 2 x active parameters per token (attention FLOPs ignored); a MoE step reads the
dense (non-expert) weights plus the share of routed experts its tokens touch under uniform routing; the DP ranks of a
DP-attention server step in lockstep with equal batches; the speculative draft's weights and KV pool are not taken
off the target's pool.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Final

from e2e.serving.emulator.dp import Fact

_S = "sglang/srt/"
PROFILE_FACTS: Final[tuple[Fact, ...]] = (
    Fact(
        "0.5.2",
        _S + "model_executor/model_runner.py:1109",
        "if self.use_mla_backend:",
        "MLA: bytes per token = (kv_lora_rank + qk_rope_head_dim) x layers x dtype bytes",
    ),
    Fact(
        "0.5.2",
        _S + "model_executor/model_runner.py:1116",
        "cell_size = (",
        "MHA/GQA: bytes per token = kv heads x head dim x layers x 2 (K and V) x dtype bytes",
    ),
    Fact(
        "0.5.2",
        _S + "model_executor/model_runner.py:1117",
        "self.model_config.get_num_kv_heads(get_attention_tp_size())",
        "MHA/GQA: the KV heads are split over the attention TP ranks (the MLA cell is not: replicated)",
    ),
    Fact(
        "0.5.2",
        _S + "configs/model_config.py:407",
        "return max(1, total_num_kv_heads // tensor_parallel_size)",
        "KV heads per GPU = max(1, heads // attention TP size)",
    ),
    Fact(
        "0.5.2",
        _S + "layers/dp_attention.py:157",
        "attn_tp_size = tp_size // dp_size",
        "attention TP size = tp / dp under DP attention",
    ),
    Fact(
        "0.5.2",
        _S + "model_executor/model_runner.py:1123",
        "rest_memory = available_gpu_memory - total_gpu_memory * (",
        "pool bytes = memory free after loading the weights - total x (1 - mem_fraction_static)",
    ),
    Fact("0.5.2", _S + "model_executor/model_runner.py:1132", "max_num_token = int(", "tokens = pool bytes // cell"),
    Fact(
        "0.5.2",
        _S + "model_executor/model_runner.py:1297",
        "self.max_total_num_tokens = (",
        "rounded down to a multiple of page_size",
    ),
    Fact(
        "0.5.2",
        _S + "model_executor/model_runner.py:1231",
        'if self.server_args.kv_cache_dtype == "auto":',
        "--kv-cache-dtype auto: the KV cache takes the model dtype",
    ),
    Fact(
        "0.5.2",
        _S + "configs/model_config.py:624",
        'config_dtype = getattr(config, "torch_dtype", None)',
        "--dtype auto: the model dtype is config.json's torch_dtype (bfloat16 for DeepSeek-R1, whose weights are FP8)",
    ),
    Fact(
        "0.5.23",
        _S + "model_executor/pool_configurator.py:641",
        "max_total_num_tokens = (",
        "0.5.23: the same division and page rounding (pool_configurator)",
    ),
    Fact(
        "0.5.23",
        _S + "mem_cache/kv_cache_dtype.py:49",
        'if server_args_kv_cache_dtype == "auto":',
        "0.5.23 auto: FP8 KV only when the checkpoint's quant config names kv_cache_quant_algo FP8, else model dtype",
    ),
    Fact(
        "0.5.23",
        _S + "configs/model_config.py:191",
        "def is_deepseek_dsa(config) -> bool:",
        "0.5.23's DeepSeek FP8-KV default is for DSA models (config has index_topk: V3.2), not R1/V3",
    ),
    Fact(
        "0.5.23",
        _S + "model_executor/pool_configurator.py:438",
        "kv_heads = model_config.get_num_kv_heads(get_parallel().attn_tp_size)",
        "0.5.23: KV heads per GPU still follow the attention TP size",
    ),
)

PROFILE_SOURCES: Final[dict[str, str]] = {
    "h100": "NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100/): H100 SXM 80 GB HBM3, 3.35 TB/s, BF16 Tensor "
    "Core 1,979 TFLOPS and FP8 3,958 TFLOPS, both 'with sparsity' (dense: half)",
    "h200": "NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200/): H200 SXM 141 GB HBM3e, 4.8 TB/s, the same "
    "Tensor Core figures as H100 SXM (BF16 1,979 / FP8 3,958 TFLOPS with sparsity)",
    "llama": "meta-llama/Llama-3.1-8B-Instruct config.json: 32 layers, 8 KV heads, head dim 4096/32 = 128, bfloat16; "
    "model card: 8.03B parameters",
    "deepseek": "deepseek-ai/DeepSeek-R1 config.json (same architecture as DeepSeek-V3): hidden 7168, 61 layers "
    "(first_k_dense_replace 3), 256 routed experts (moe_intermediate_size 2048, 8 per token, 1 shared), "
    "kv_lora_rank 512, qk_rope_head_dim 64, vocab 129280, num_nextn_predict_layers 1, torch_dtype bfloat16, FP8 "
    "(e4m3, 128x128 blocks) weights; DeepSeek-V3 report: 671B total, 37B activated per token",
    "eagle3": "docs.sglang.io/advanced_features/speculative_decoding.html, Performance Highlights: 'LLaMA-Instruct 3.1 "
    "8B tested on MT bench': SGLang (w/o speculative, 1x H100) 158.34 tokens/s; SGLang + EAGLE-3 (1x H100) 373.25 "
    "tokens/s (no steps/topk/draft tokens or accept length given)",
    "large-ep": "lmsys.org/blog/2025-05-05-large-scale-ep/ (SGLang team, May 2025): 'Prefill Phase: On 4 nodes "
    "(4x8xH100, EP32) ... 54,543 ... tokens per second for prompt lengths of ... 2K'; 'Decode Phase: ... 9 nodes "
    "(9x8xH100, EP72) ... 22,282 tokens/sec per node for 2K inputs'; decode table: batch size 256, KV cache length "
    "2,000; prefill profile: 16,384 tokens per device; headline 52.3k input / 22.3k output tokens/s per node",
    "mtp-h200": "SGLang DeepSeek usage docs (docs.sglang.ai basic_usage/deepseek.html, Multi-token Prediction): 'the "
    "decoding speed can be improved by 1.8x for batch size 1 and 1.5x for batch size 32 respectively on H200 TP8 "
    "setting'; 'The minimum configuration is --speculative-num-steps 1 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 2'",
    "mtp-accept": "DeepSeek-V3 Technical Report (arXiv 2412.19437, 5.4.3): 'the acceptance rate of the second token "
    "prediction ranges between 85% and 90%'",
}

# --- hardware and models ---------------------------------------------------------------------------------------------

GIB: Final = 1 << 30


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int
    peak_flops: float
    """Dense (no sparsity) BF16 FLOP/s."""
    hbm_bytes_per_second: float
    fp8_peak_flops: float = 0.0
    """Dense FP8 FLOP/s (0: no FP8 tensor cores); used for FP8-weight models."""


@dataclass(frozen=True)
class Model:
    name: str
    params: float
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    """The model dtype (config.json torch_dtype under --dtype auto), which --kv-cache-dtype auto gives the KV cache."""
    mla_kv_dim: int | None = None
    """kv_lora_rank + qk_rope_head_dim for an MLA model (DeepSeek), else None."""
    weight_bytes_per_param: float | None = None
    """Bytes per stored weight when they differ from the dtype (FP8 checkpoints: 1); None: dtype_bytes."""
    kv_dtype_bytes: int | None = None
    """KV cache element bytes when --kv-cache-dtype is not auto (fp8_e4m3/e5m2: 1); None: dtype_bytes."""
    active_params: float | None = None
    """Parameters one token goes through (MoE: dense part + its experts); None: params (a dense model)."""
    routed_expert_params: float = 0.0
    """MoE: the parameters of all routed experts (the part a token touches only 1/num_experts of, per expert)."""
    num_experts: int = 0
    experts_per_token: int = 0
    moe_layers: int = 0

    @property
    def weight_bytes(self) -> float:
        return self.params * self._weight_bytes_per_param

    @property
    def _weight_bytes_per_param(self) -> float:
        return self.dtype_bytes if self.weight_bytes_per_param is None else self.weight_bytes_per_param

    @property
    def fp8(self) -> bool:
        return self._weight_bytes_per_param == 1

    @property
    def flops_params(self) -> float:
        return self.params if self.active_params is None else self.active_params

    @property
    def dense_params(self) -> float:
        return self.params - self.routed_expert_params

    @property
    def _kv_dtype_bytes(self) -> int:
        return self.dtype_bytes if self.kv_dtype_bytes is None else self.kv_dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """model_runner.py:1109-1122 (0.5.2): SGLang's `cell_size` on one GPU with attention TP 1."""
        return self.kv_bytes_per_token_per_gpu(1)

    def kv_bytes_per_token_per_gpu(self, attention_tp: int) -> int:
        """The cell with attention TP `attention_tp`: an MLA cell is whole on every rank, MHA/GQA KV heads are split
        (model_runner.py:1117 get_num_kv_heads(get_attention_tp_size()); model_config.py:407)."""
        if self.mla_kv_dim is not None:
            return self.mla_kv_dim * self.layers * self._kv_dtype_bytes
        heads = max(1, self.kv_heads // attention_tp)
        return heads * self.head_dim * self.layers * 2 * self._kv_dtype_bytes

    def touched_expert_fraction(self, tokens: float) -> float:
        """Expected share of a MoE layer's routed experts that `tokens` tokens touch, each picking experts_per_token
        of num_experts uniformly (SIMPLIFICATION: real routing is skewed, which EPLB counters): 1 - (1 - k/E)^tokens.
        A dense model has no routed experts (the value is then unused)."""
        if self.num_experts == 0:
            return 1.0
        return 1.0 - float((1.0 - self.experts_per_token / self.num_experts) ** max(tokens, 0.0))


def _pool_tokens(
    gpu: Gpu,
    weight_bytes: float,
    cell_bytes: int,
    mem_fraction_static: float,
    page_size: int,
    runtime_bytes: float,
) -> int:
    available = gpu.memory_bytes - weight_bytes - runtime_bytes
    rest = available - gpu.memory_bytes * (1 - mem_fraction_static)
    tokens = max(int(rest // cell_bytes), 0)
    return tokens // page_size * page_size


def max_total_num_tokens(
    gpu: Gpu, model: Model, mem_fraction_static: float, page_size: int = 1, runtime_bytes: float = 0.0
) -> int:
    """The KV pool SGLang profiles on one GPU holding the whole model (model_runner.py:1123-1132, :1297; 0.5.23
    pool_configurator.py:641-646); `Profile.max_total_num_tokens` is the same for a sharded server.

    SGLang measures the memory still free after loading the weights (`available_gpu_memory`), so its pool is
    total x fraction - weights - whatever else the process holds then (CUDA context, NCCL buffers): `runtime_bytes`,
    which the caller must supply (0 by default: no claim).
    """
    return _pool_tokens(
        gpu, model.weight_bytes, model.kv_bytes_per_token, mem_fraction_static, page_size, runtime_bytes
    )


# --- cost model ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Speculative:
    """EAGLE-style decoding: `num_steps` draft passes then one verify pass emit `accept_length` tokens per request."""

    accept_length: float
    """Mean tokens emitted per request per verify step (accepted drafts + the bonus token). No default: it depends
    on the draft model and the data, and is the parameter an experiment varies."""
    num_steps: int
    num_draft_tokens: int
    draft_params: float
    """Dense parameters one draft pass reads (for a MoE draft: besides its routed experts)."""
    draft_routed_expert_params: float = 0.0
    """A MoE draft's routed experts (the NEXTN layer of DeepSeek), touched like the target's."""
    algorithm: str = "EAGLE3"


@dataclass(frozen=True)
class Profile:
    """Step-time cost model of one GPU x model x server shape: a roofline per step plus fixed overheads.

    The step functions take one scheduler's batch: with DP attention (`dp` > 1) each of the dp ranks is a scheduler
    with its own KV pool (`max_total_num_tokens`), and the server holds dp x that (`server_pool_tokens`)."""

    gpu: Gpu
    model: Model
    mfu: float
    """ASSUMPTION: fraction of peak FLOP/s a compute-bound step achieves."""
    bandwidth_efficiency: float
    """ASSUMPTION: fraction of HBM bandwidth a memory-bound step achieves."""
    step_overhead_seconds: float
    """ASSUMPTION: per-step CPU scheduling and kernel-launch time."""
    speculative: Speculative | None = None
    tp: int = 1
    dp: int = 1
    """DP-attention size (1: none); divides tp. Plain data-parallel replicas are separate profiles of dp 1."""
    ep: int = 1
    tp_layer_seconds: float = 0.0
    """ASSUMPTION: collective time per layer per step when attention TP > 1 (the all-reduces)."""
    ep_layer_seconds: float = 0.0
    """ASSUMPTION: time per MoE layer per step outside the roofline under DP attention (the EP dispatch and combine,
    MLA attention compute, imbalance), calibrated on DP attention + EP; `ep` itself moves no bytes (experts are split
    over the tp GPUs whether sliced or dealt out), so it only describes the shape."""

    def for_server(self, *, tp: int = 1, dp: int = 1, ep: int = 1) -> Profile:
        """This profile on a server of tensor parallel size `tp`, DP-attention size `dp` and expert parallel size
        `ep` (SGLang's --tp, --dp with --enable-dp-attention, --ep)."""
        if tp < 1 or dp < 1 or ep < 1 or tp % dp != 0:
            raise ValueError(f"invalid server shape tp={tp} dp={dp} ep={ep}: dp must divide tp")
        return dataclasses.replace(self, tp=tp, dp=dp, ep=ep)

    @property
    def attention_tp(self) -> int:
        """dp_attention.py:157 (0.5.2): attn_tp_size = tp_size // dp_size."""
        return self.tp // self.dp

    @property
    def gpus(self) -> int:
        return self.tp

    @property
    def weight_bytes_per_gpu(self) -> float:
        """The dense part split over the attention TP group (replicated across DP ranks), the routed experts over
        all tp GPUs (MoE TP slices them, EP deals them out: the same bytes per GPU)."""
        m = self.model
        return (m.dense_params / self.attention_tp + m.routed_expert_params / self.tp) * m._weight_bytes_per_param

    @property
    def kv_bytes_per_token_per_gpu(self) -> int:
        return self.model.kv_bytes_per_token_per_gpu(self.attention_tp)

    def max_total_num_tokens(self, mem_fraction_static: float, page_size: int = 1, runtime_bytes: float = 0.0) -> int:
        """One scheduler's (DP rank's) pool: every GPU of its attention TP group holds the same tokens."""
        cell = self.kv_bytes_per_token_per_gpu
        return _pool_tokens(self.gpu, self.weight_bytes_per_gpu, cell, mem_fraction_static, page_size, runtime_bytes)

    def server_pool_tokens(self, mem_fraction_static: float, page_size: int = 1, runtime_bytes: float = 0.0) -> int:
        return self.dp * self.max_total_num_tokens(mem_fraction_static, page_size, runtime_bytes)

    @property
    def _bandwidth(self) -> float:
        return self.gpu.hbm_bytes_per_second * self.bandwidth_efficiency

    @property
    def _flops(self) -> float:
        peak = self.gpu.fp8_peak_flops if self.model.fp8 and self.gpu.fp8_peak_flops else self.gpu.peak_flops
        return peak * self.mfu

    def _collectives(self, layers: int, moe_layers: int) -> float:
        seconds = self.tp_layer_seconds * layers if self.attention_tp > 1 else 0.0
        if self.dp > 1:  # the calibrated setting is DP attention with DeepEP; ep alone changes no bytes per GPU
            seconds += self.ep_layer_seconds * moe_layers
        return seconds

    def _weights_read(self, dense: float, routed: float, tokens: float) -> float:
        """Bytes of weights one GPU reads in a pass of `tokens` tokens per DP rank (the experts see all ranks')."""
        touched = self.model.touched_expert_fraction(tokens * self.dp)
        return (dense / self.attention_tp + touched * routed / self.tp) * self.model._weight_bytes_per_param

    def _pass(self, tokens: float, context_tokens: int) -> float:
        """One target forward pass of `tokens` new tokens per DP rank over `context_tokens` KV tokens."""
        m = self.model
        read = self._weights_read(m.dense_params, m.routed_expert_params, tokens)
        read += context_tokens * self.kv_bytes_per_token_per_gpu
        compute = tokens * self.dp * 2 * m.flops_params / self.tp / self._flops
        return (
            self.step_overhead_seconds
            + self._collectives(m.layers, m.moe_layers)
            + max(read / self._bandwidth, compute)
        )

    def prefill_step_seconds(self, tokens: int) -> float:
        """One prefill batch of `tokens` tokens: 2 x active params FLOPs per token, never faster than reading the
        weights once."""
        return self._pass(tokens, 0)

    def decode_step_seconds(self, batch: int, context_tokens: int) -> float:
        """One decode step (or, with speculation, `num_steps` draft passes and one verify pass) of `batch` requests
        holding `context_tokens` KV tokens in all: the weights and every request's KV are read once per pass."""
        if batch == 0:
            return 0.0
        spec = self.speculative
        if spec is None:
            return self._pass(batch, context_tokens)
        verify = self._pass(batch * spec.num_draft_tokens, context_tokens)
        draft_read = self._weights_read(spec.draft_params, spec.draft_routed_expert_params, batch)
        moe = 1 if spec.draft_routed_expert_params else 0
        draft = self.step_overhead_seconds + self._collectives(1, moe) + draft_read / self._bandwidth
        return spec.num_steps * draft + verify

    @property
    def tokens_per_decode_step(self) -> float:
        return 1.0 if self.speculative is None else self.speculative.accept_length


# --- the GPUs and models ---------------------------------------------------------------------------------------------

H100_SXM: Final = Gpu(
    "H100 SXM 80GB",
    memory_bytes=80 * GIB,  # datasheet: 80 GB HBM3 (HBM capacity is binary: 80 GiB)
    peak_flops=989e12,  # datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity, 989 dense
    hbm_bytes_per_second=3.35e12,  # datasheet: 3.35 TB/s
    fp8_peak_flops=1979e12,  # datasheet: FP8 Tensor Core 3,958 TFLOPS with sparsity, 1,979 dense
)
H200_SXM: Final = Gpu(
    "H200 SXM 141GB",
    memory_bytes=141 * GIB,  # datasheet: 141 GB HBM3e (read as GiB like the H100's 80 GB)
    peak_flops=989e12,  # datasheet: the H100 SXM's Tensor Core figures (same GH100 compute)
    hbm_bytes_per_second=4.8e12,  # datasheet: 4.8 TB/s
    fp8_peak_flops=1979e12,
)
GPUS: Final[tuple[Gpu, ...]] = (H100_SXM, H200_SXM)

LLAMA_3_1_8B: Final = Model(
    "meta-llama/Llama-3.1-8B-Instruct",
    params=8.03e9,  # model card: 8.03B parameters
    layers=32,  # config.json: num_hidden_layers
    kv_heads=8,  # config.json: num_key_value_heads
    head_dim=128,  # config.json: hidden_size 4096 / num_attention_heads 32
    dtype_bytes=2,  # config.json: torch_dtype bfloat16
)

# DeepSeek-V3/R1 config.json, counted by hand (the totals match the published 671B / 37B to 0.1% / 2%):
_HIDDEN, _EXPERT = 7168, 3 * 7168 * 2048  # an expert is gate, up and down projections of moe_intermediate_size 2048
_MLA = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168  # q_a, q_b, kv_a, kv_b, o
_DENSE_FFN = 3 * 7168 * 18432  # the first_k_dense_replace = 3 layers' MLP (intermediate_size 18432)
_EMBED = 129280 * 7168  # vocab x hidden, once for the embedding and once for the LM head
DEEPSEEK_ROUTED_PARAMS: Final = 58 * 256 * _EXPERT  # 58 MoE layers x 256 routed experts: 653.8e9
DEEPSEEK_DENSE_PARAMS: Final = 61 * _MLA + 3 * _DENSE_FFN + 58 * _EXPERT + 2 * _EMBED  # attention, dense MLPs, shared
DEEPSEEK_R1: Final = Model(
    "deepseek-ai/DeepSeek-R1",
    params=671e9,  # DeepSeek-V3 report / model card: 671B total (the count above: 670.8e9)
    layers=61,  # config.json: num_hidden_layers
    kv_heads=128,  # config.json: num_attention_heads (unused: MLA)
    head_dim=128,  # config.json: v_head_dim (unused: MLA)
    dtype_bytes=2,  # config.json: torch_dtype bfloat16 -> the KV cache is bf16 under auto (PROFILE_FACTS)
    mla_kv_dim=512 + 64,  # config.json: kv_lora_rank + qk_rope_head_dim
    weight_bytes_per_param=1,  # config.json quantization_config: fp8 e4m3 (scales and the bf16 head ignored)
    active_params=37e9,  # DeepSeek-V3 report: 37B activated per token (the count: 17.0e9 dense + 20.4e9 experts)
    routed_expert_params=DEEPSEEK_ROUTED_PARAMS,
    num_experts=256,  # config.json: n_routed_experts
    experts_per_token=8,  # config.json: num_experts_per_tok
    moe_layers=58,  # config.json: num_hidden_layers 61 - first_k_dense_replace 3
)
# ESTIMATE of the NEXTN (MTP) draft, num_nextn_predict_layers 1: one MoE decoder layer plus its eh_proj (2 x 7168 ->
# 7168) and the shared LM head it runs; its embedding is a lookup. Dense part 1.26e9, routed experts 11.27e9.
NEXTN_DENSE_PARAMS: Final = _MLA + _EXPERT + 2 * _HIDDEN * _HIDDEN + _EMBED
NEXTN_ROUTED_PARAMS: Final = 256 * _EXPERT
MODELS: Final[tuple[Model, ...]] = (LLAMA_3_1_8B, DEEPSEEK_R1)

# --- calibrated profiles ---------------------------------------------------------------------------------------------

H100_LLAMA_3_1_8B: Final = Profile(
    H100_SXM,
    LLAMA_3_1_8B,
    mfu=0.5,  # ASSUMPTION, not measured.
    # ASSUMPTION, chosen with the overhead so that a batch-1 decode step takes 6.3 ms, i.e. the 158.34 tokens/s SGLang
    # publishes for Llama-3.1-8B-Instruct without speculation on 1x H100 (MT-bench; docs.sglang.io
    # advanced_features/speculative_decoding.html, "Performance Highlights"). The split between the two is not known.
    bandwidth_efficiency=0.8,
    step_overhead_seconds=0.3e-3,
    # ASSUMPTION, not calibrated: two NVLink all-reduces per layer at ~5 us each for tp > 1.
    tp_layer_seconds=10e-6,
)
# ASSUMPTION: the accept length that reproduces SGLang's published 373.25 tokens/s (1x H100, MT-bench) with the
# docs' default EAGLE settings (5 steps, 8 draft tokens); the docs give neither the settings of that row nor its
# accept length.
EAGLE3_MT_BENCH: Final = {"accept_length": 3.48, "num_steps": 5, "num_draft_tokens": 8}

H100_DEEPSEEK_R1: Final = Profile(
    H100_SXM,
    DEEPSEEK_R1,
    # ASSUMPTION, chosen (with ep_layer_seconds) so that the blog's prefill, 16,384 tokens per GPU on EP32 with DP
    # attention, gives 54,543 input tokens/s per node at 2K prompts (lmsys.org/blog/2025-05-05-large-scale-ep/).
    mfu=0.26,
    bandwidth_efficiency=0.8,  # ASSUMPTION: the Llama figure (memory-bound reads are not what the blog measures)
    step_overhead_seconds=0.3e-3,  # ASSUMPTION: the Llama figure
    # ASSUMPTION, chosen so that 256 requests per GPU with 2,000 KV tokens each on EP72 give the blog's 22,282 output
    # tokens/s per node. 0.94 ms per MoE layer is the same order as the blog's kernel breakdown (dispatch ~0.17 ms
    # per layer, combine about twice DeepSeek's), but it also stands for MLA attention compute the roofline ignores.
    ep_layer_seconds=0.94e-3,
    # ASSUMPTION, chosen so that NEXTN on H200 TP8 gives the 1.8x (batch 1) and 1.5x (batch 32) decoding speedups
    # SGLang publishes, with DeepSeek's 85-90% second-token acceptance (accept length 1.875).
    tp_layer_seconds=0.2e-3,
)
# The DeepSeek-V3 report's 85-90% second-token acceptance of its one MTP module, as an accept length (1 + 0.875).
NEXTN_ACCEPT_LENGTH: Final = 1.875


def _on(gpu: Gpu, profile: Profile) -> Profile:
    """`profile` on another Hopper GPU: the same efficiencies (ASSUMPTION: nothing published for H200 fixes them), so
    memory-bound steps scale with the datasheet bandwidth and the pool with its memory."""
    return dataclasses.replace(profile, gpu=gpu)


H200_LLAMA_3_1_8B: Final = _on(H200_SXM, H100_LLAMA_3_1_8B)
H200_DEEPSEEK_R1: Final = _on(H200_SXM, H100_DEEPSEEK_R1)
PROFILES: Final[tuple[Profile, ...]] = (H100_LLAMA_3_1_8B, H200_LLAMA_3_1_8B, H100_DEEPSEEK_R1, H200_DEEPSEEK_R1)


def with_eagle3(profile: Profile, accept_length: float, num_steps: int, num_draft_tokens: int) -> Profile:
    """`profile` with EAGLE3 speculation. The draft is one decoder layer plus a draft LM head: about 0.4e9 parameters
    for Llama-3.1-8B (ESTIMATE from the architecture: a 4096x14336 layer is ~0.22e9, a 32k-vocabulary head ~0.13e9)."""
    spec = Speculative(accept_length, num_steps, num_draft_tokens, draft_params=0.4e9)
    return dataclasses.replace(profile, speculative=spec)


def with_nextn(profile: Profile, accept_length: float, num_steps: int, num_draft_tokens: int) -> Profile:
    """`profile` (DeepSeek) with NEXTN/MTP speculation: each draft pass runs the one MTP layer (ESTIMATE:
    NEXTN_DENSE_PARAMS + NEXTN_ROUTED_PARAMS, from the config; not a published size)."""
    spec = Speculative(
        accept_length,
        num_steps,
        num_draft_tokens,
        draft_params=NEXTN_DENSE_PARAMS,
        draft_routed_expert_params=NEXTN_ROUTED_PARAMS,
        algorithm="NEXTN",
    )
    return dataclasses.replace(profile, speculative=spec)


# --- selection from the pod's command line ---------------------------------------------------------------------------

_QUANTIZED = re.compile(r"fp8|fp4|int4|int8|awq|gptq|gguf|w4a|w8a|bnb|nvfp")
_MODEL_PATTERNS: Final[tuple[tuple[re.Pattern[str], Profile, Profile], ...]] = (
    (re.compile(r"llama-?3\.1-8b"), H100_LLAMA_3_1_8B, H200_LLAMA_3_1_8B),
    # R1, R1-0528, V3, V3-0324, V3.1 share the architecture; V3.2 (DSA, index_topk) and the distilled or Lite models
    # do not.
    (re.compile(r"deepseek-(r1|v3)(?!\.2)(?!.*(distill|lite|nextn))"), H100_DEEPSEEK_R1, H200_DEEPSEEK_R1),
)


def gpu_for_product(product: str | None) -> Gpu | None:
    """The GPU a `nvidia.com/gpu.product` node label names ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H200"); None: unknown
    (PCIe and NVL boards have other bandwidths). No label: H100 SXM, the hardware the published figures used."""
    if product is None:
        return H100_SXM
    p = product.lower()
    if "nvl" in p or "pcie" in p:
        return None
    if "h200" in p:
        return H200_SXM
    if "h100" in p and ("hbm3" in p or "sxm" in p):
        return H100_SXM
    return None


def select_profile(
    model_path: str,
    gpu_product: str | None,
    *,
    tp: int = 1,
    dp: int = 1,
    ep: int = 1,
    speculative_algorithm: str | None = None,
    num_steps: int | None = None,
    num_draft_tokens: int | None = None,
    accept_length: float | None = None,
    kv_cache_dtype: str = "auto",
) -> Profile | None:
    """The profile of a server launched with these arguments, or None when the model, the GPU or the speculative
    algorithm is unknown (the emulator then keeps its per-request pace).

    `dp` is the DP-attention size (--dp with --enable-dp-attention; 1 without it: SGLang's plain --dp replicas each
    run the whole model on their own tp GPUs, each a server of this profile with dp 1). Speculative steps and draft
    tokens default to SGLang's EAGLE defaults for Llama (5, 8) and to the minimum MTP configuration for DeepSeek
    (1, 2); `accept_length` defaults to the calibrated figure (EAGLE3_MT_BENCH, NEXTN_ACCEPT_LENGTH).
    """
    name = model_path.lower().rstrip("/")
    gpu = gpu_for_product(gpu_product)
    if gpu is None or _QUANTIZED.search(name.rsplit("/", 1)[-1]):
        return None
    matches = [(h100, h200) for pattern, h100, h200 in _MODEL_PATTERNS if pattern.search(name)]
    if not matches:
        return None
    base = matches[0][1] if gpu is H200_SXM else matches[0][0]
    profile = base.for_server(tp=tp, dp=dp, ep=ep)
    if kv_cache_dtype.startswith("fp8"):
        profile = dataclasses.replace(profile, model=dataclasses.replace(profile.model, kv_dtype_bytes=1))
    elif kv_cache_dtype not in ("auto", "bf16", "bfloat16"):
        return None
    algorithm = (speculative_algorithm or "").upper()
    if not algorithm:
        return profile
    deepseek = profile.model.mla_kv_dim is not None
    if deepseek and algorithm in ("NEXTN", "EAGLE"):  # SGLang runs NEXTN as EAGLE with the MTP layer as draft
        return with_nextn(
            profile,
            NEXTN_ACCEPT_LENGTH if accept_length is None else accept_length,
            num_steps or 1,
            num_draft_tokens or 2,
        )
    if not deepseek and algorithm == "EAGLE3":
        return with_eagle3(
            profile,
            float(EAGLE3_MT_BENCH["accept_length"]) if accept_length is None else accept_length,
            num_steps or int(EAGLE3_MT_BENCH["num_steps"]),
            num_draft_tokens or int(EAGLE3_MT_BENCH["num_draft_tokens"]),
        )
    return None


def describe(profile: Profile) -> str:
    """One line for the docs table: hardware, model, shape and the sources of its numbers."""
    m, g = profile.model, profile.gpu
    sources = ["h200" if g is H200_SXM else "h100", "deepseek" if m.mla_kv_dim else "llama"]
    sources += ["large-ep", "mtp-h200", "mtp-accept"] if m.mla_kv_dim else ["eagle3"]
    spec = profile.speculative
    spec_text = (
        f", {spec.algorithm} steps {spec.num_steps} draft tokens {spec.num_draft_tokens} accept {spec.accept_length}"
        if spec
        else ""
    )
    return (
        f"{g.name} x {m.name} (tp {profile.tp}, dp {profile.dp}, ep {profile.ep}{spec_text}): "
        f"{profile.weight_bytes_per_gpu / 1e9:.1f} GB weights and {profile.kv_bytes_per_token_per_gpu} B KV per token "
        f"per GPU, MFU {profile.mfu}, HBM efficiency {profile.bandwidth_efficiency} (ASSUMPTIONS); sources: "
        + "; ".join(PROFILE_SOURCES[s] for s in sources)
    )
