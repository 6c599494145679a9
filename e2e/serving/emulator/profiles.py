"""Cost and memory profiles of one GPU x model for the emulator's capacity model (issue 31 item 2).

`max_total_num_tokens` is the KV pool SGLang profiles at start-up; `Profile` gives the time of one scheduler step
(one batch) from named hardware and model numbers. Every number says where it comes from: a datasheet, a model's
config.json, a published SGLang figure, or "ASSUMPTION" when nothing published fixes it. The scheduler that uses them
is capacity.py.
"""

from __future__ import annotations

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
        "0.5.23",
        _S + "model_executor/pool_configurator.py:641",
        "max_total_num_tokens = (",
        "0.5.23: the same division and page rounding (pool_configurator)",
    ),
)

# --- memory model ----------------------------------------------------------------------------------------------------

GIB: Final = 1 << 30


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_bytes: int
    peak_flops: float
    """Dense (no sparsity) FLOP/s at the model's dtype."""
    hbm_bytes_per_second: float


@dataclass(frozen=True)
class Model:
    name: str
    params: float
    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    mla_kv_dim: int | None = None
    """kv_lora_rank + qk_rope_head_dim for an MLA model (DeepSeek), else None."""

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """model_runner.py:1109-1122 (0.5.2): SGLang's `cell_size`, the KV cache dtype taken as the model's."""
        if self.mla_kv_dim is not None:
            return self.mla_kv_dim * self.layers * self.dtype_bytes
        return self.kv_heads * self.head_dim * self.layers * 2 * self.dtype_bytes


def max_total_num_tokens(
    gpu: Gpu, model: Model, mem_fraction_static: float, page_size: int = 1, runtime_bytes: float = 0.0
) -> int:
    """The KV pool SGLang profiles (model_runner.py:1123-1132, :1297; 0.5.23 pool_configurator.py:641-646).

    SGLang measures the memory still free after loading the weights (`available_gpu_memory`), so its pool is
    total x fraction - weights - whatever else the process holds then (CUDA context, NCCL buffers): `runtime_bytes`,
    which the caller must supply (0 by default: no claim).
    """
    available = gpu.memory_bytes - model.weight_bytes - runtime_bytes
    rest = available - gpu.memory_bytes * (1 - mem_fraction_static)
    tokens = max(int(rest // model.kv_bytes_per_token), 0)
    return tokens // page_size * page_size


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
    """Parameters one draft pass reads."""


@dataclass(frozen=True)
class Profile:
    """Step-time cost model of one GPU x model: prefill compute-bound, decode memory-bound, plus a fixed overhead."""

    gpu: Gpu
    model: Model
    mfu: float
    """ASSUMPTION: fraction of peak FLOP/s a prefill batch achieves."""
    bandwidth_efficiency: float
    """ASSUMPTION: fraction of HBM bandwidth a decode step achieves."""
    step_overhead_seconds: float
    """ASSUMPTION: per-step CPU scheduling and kernel-launch time."""
    speculative: Speculative | None = None

    @property
    def _bandwidth(self) -> float:
        return self.gpu.hbm_bytes_per_second * self.bandwidth_efficiency

    def prefill_step_seconds(self, tokens: int) -> float:
        """One prefill batch: its tokens x 2 x params FLOPs, never faster than reading the weights once."""
        compute = tokens * 2 * self.model.params / (self.gpu.peak_flops * self.mfu)
        return self.step_overhead_seconds + max(compute, self.model.weight_bytes / self._bandwidth)

    def decode_step_seconds(self, batch: int, context_tokens: int) -> float:
        """One decode step (or, with speculation, `num_steps` draft passes and one verify pass) of `batch` requests
        holding `context_tokens` KV tokens in all: the weights and every request's KV are read once per pass."""
        if batch == 0:
            return 0.0
        read = (self.model.weight_bytes + context_tokens * self.model.kv_bytes_per_token) / self._bandwidth
        spec = self.speculative
        if spec is None:
            return self.step_overhead_seconds + read
        verify_compute = batch * spec.num_draft_tokens * 2 * self.model.params / (self.gpu.peak_flops * self.mfu)
        verify = self.step_overhead_seconds + max(read, verify_compute)
        draft = self.step_overhead_seconds + spec.draft_params * self.model.dtype_bytes / self._bandwidth
        return spec.num_steps * draft + verify

    @property
    def tokens_per_decode_step(self) -> float:
        return 1.0 if self.speculative is None else self.speculative.accept_length


H100_SXM: Final = Gpu(
    "H100 SXM 80GB",
    memory_bytes=80 * GIB,  # datasheet: 80 GB HBM3 (HBM capacity is binary: 80 GiB)
    peak_flops=989e12,  # datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity, 989 dense
    hbm_bytes_per_second=3.35e12,  # datasheet: 3.35 TB/s
)
LLAMA_3_1_8B: Final = Model(
    "meta-llama/Llama-3.1-8B-Instruct",
    params=8.03e9,  # model card: 8.03B parameters
    layers=32,  # config.json: num_hidden_layers
    kv_heads=8,  # config.json: num_key_value_heads
    head_dim=128,  # config.json: hidden_size 4096 / num_attention_heads 32
    dtype_bytes=2,  # config.json: torch_dtype bfloat16
)
H100_LLAMA_3_1_8B: Final = Profile(
    H100_SXM,
    LLAMA_3_1_8B,
    mfu=0.5,  # ASSUMPTION, not measured.
    # ASSUMPTION, chosen with the overhead so that a batch-1 decode step takes 6.3 ms, i.e. the 158.34 tokens/s SGLang
    # publishes for Llama-3.1-8B-Instruct without speculation on 1x H100 (MT-bench; docs.sglang.io
    # advanced_features/speculative_decoding.html, "Performance Highlights"). The split between the two is not known.
    bandwidth_efficiency=0.8,
    step_overhead_seconds=0.3e-3,
)


def with_eagle3(profile: Profile, accept_length: float, num_steps: int, num_draft_tokens: int) -> Profile:
    """`profile` with EAGLE3 speculation. The draft is one decoder layer plus a draft LM head: about 0.4e9 parameters
    for Llama-3.1-8B (ESTIMATE from the architecture: a 4096x14336 layer is ~0.22e9, a 32k-vocabulary head ~0.13e9)."""
    spec = Speculative(accept_length, num_steps, num_draft_tokens, draft_params=0.4e9)
    return Profile(
        profile.gpu, profile.model, profile.mfu, profile.bandwidth_efficiency, profile.step_overhead_seconds, spec
    )
