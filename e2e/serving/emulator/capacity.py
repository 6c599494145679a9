"""A discrete-time model of one SGLang server's capacity (issue 31 item 1, first increment): memory, cost and scheduler.

Three pure pieces, no clock, no threads, no I/O. The memory model gives `max_total_num_tokens` the way SGLang's
model runner profiles it; the cost model (`Profile`) gives the time of one scheduler step (one batch) from named
hardware and model numbers; `Server` steps a prefill or a decode server of a PD pair through a list of arrivals on a
simulated clock, following the scheduler rules listed in `CAPACITY_FACTS` (each cites the pinned wheel, checked by
tests/test_emulator_capacity.py). `prefill_capacity` and `decode_capacity` are the analytic requests/s the same
profile sustains, for comparison with the stepped simulation. Nothing here drives the emulated servers yet
(engine.py still advances each request at its own `tokens_per_second`).

Simplifications, stated so that nobody mistakes them for SGLang's: tensor/data parallelism, the radix cache (no prefix
hits), the colocated ("null") mode and its `new_token_ratio` estimate, hybrid/SWA pools and the PD transfer queue are
not modelled (a decode receives a request's KV the moment it is pre-allocated, and a prefill frees it when the step
ends); KV is counted in tokens (pages only round the pool size); prefill FLOPs are 2 x parameters per token (attention
FLOPs ignored); a speculative step grows each request's KV by its accepted tokens only.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Final, Literal

from e2e.serving.emulator.dp import Fact

Role = Literal["prefill", "decode"]

_S = "sglang/srt/"
CAPACITY_FACTS: Final[tuple[Fact, ...]] = (
    # --- memory model ------------------------------------------------------------------------------------------------
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
    # --- prefill: PrefillAdder ---------------------------------------------------------------------------------------
    Fact(
        "0.5.2",
        _S + "disaggregation/prefill.py:190",
        "Set max_new_tokens = 1, so PrefillAdder memory estimation is accurate",
        "a PD prefill reserves its prompt and one output token",
    ),
    Fact(
        "0.5.2",
        _S + "managers/schedule_policy.py:511",
        "if total_tokens >= self.rem_total_tokens:",
        "a request whose prompt + reserved output reaches the free pool stops the batch (NO_TOKEN)",
    ),
    Fact(
        "0.5.2",
        _S + "managers/schedule_policy.py:514",
        "if real_input_tokens >= self.rem_input_tokens and len(self.can_run_list) != 0:",
        "max_prefill_tokens bounds a batch's input tokens, except for its first request",
    ),
    Fact(
        "0.5.2",
        _S + "managers/schedule_policy.py:535",
        "if self.rem_chunk_tokens is None or input_tokens <= self.rem_chunk_tokens:",
        "a prompt that fits the chunk budget is taken whole",
    ),
    Fact(
        "0.5.2",
        _S + "managers/schedule_policy.py:553",
        "trunc_len = self.rem_chunk_tokens // self.page_size * self.page_size",
        "otherwise it is truncated to the rest of the budget and continues next step (chunked prefill)",
    ),
    Fact(
        "0.5.2",
        _S + "managers/scheduler.py:1600",
        'res = global_server_args_dict["max_micro_batch_size"] - running_bs',
        "max_running_requests bounds the batch",
    ),
    Fact("0.5.2", _S + "server_args.py:169", "max_prefill_tokens: int = 16384", "default --max-prefill-tokens"),
    # --- decode: pre-allocation and retraction -----------------------------------------------------------------------
    Fact(
        "0.5.2",
        _S + "server_args.py:384",
        "num_reserved_decode_tokens: int = 512",
        "a PD decode reserves 512 tokens per request for its future output",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/decode.py:375",
        "if self.req_to_token_pool.available_size() <= 0:",
        "pre-allocation stops when max_running_requests request slots are taken",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/decode.py:385",
        "required_tokens_for_request = (",
        "pre-allocate a request only when prompt + reserved tokens fit the allocatable ones (FIFO, stop at first)",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/decode.py:464",
        "allocatable_tokens = available_size - max(",
        "allocatable = free - max(reserved x requests in flight, the space one request needs to finish alone)",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/decode.py:882",
        "resumed_reqs = self.disagg_decode_prealloc_queue.resume_retracted_reqs()",
        "retracted requests resume first; while any remains retracted no new request is admitted",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/decode.py:286",
        "required_tokens_for_request = (",
        "a retracted request resumes when prompt + output so far + reserved fit",
    ),
    Fact(
        "0.5.2",
        _S + "managers/scheduler.py:1768",
        "if not batch.check_decode_mem(self.decode_mem_cache_buf_multiplier) or (",
        "before each decode step: when the pool cannot hold the step's new tokens, retract",
    ),
    Fact(
        "0.5.2",
        _S + "managers/schedule_batch.py:1416",
        "if not server_args.speculative_algorithm:",
        "retraction order: by (output length, -prompt length) descending, popped from the back; spec: from the back",
    ),
    Fact(
        "0.5.2",
        _S + "managers/schedule_batch.py:1427",
        "while first_iter or (",
        "retract at least one, then until the rest fit; never the last one",
    ),
    Fact(
        "0.5.2",
        _S + "disaggregation/decode.py:238",
        "self.retracted_queue.append(req)",
        "a retracted PD decode request waits in the prealloc queue's retracted list with its KV offloaded",
    ),
    Fact(
        "0.5.23",
        _S + "managers/scheduler.py:4526",
        '"KV cache pool is full. Retract requests. "',
        "0.5.23 still retracts when the pool is full",
    ),
    Fact(
        "0.5.23",
        _S + "managers/schedule_batch.py:3451",
        "def retract_decode(self)",
        "0.5.23's retract_decode",
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


# --- the stepped scheduler -------------------------------------------------------------------------------------------

CLIP_MAX_NEW_TOKENS: Final = 4096
"""managers/schedule_policy.py:39 (0.5.2), disaggregation/decode.py:62; 0.5.23 environ.py:650."""


@dataclass(frozen=True)
class Limits:
    """The server arguments the scheduler obeys."""

    max_total_num_tokens: int
    max_running_requests: int
    chunked_prefill_size: int | None = 8192
    max_prefill_tokens: int = 16384
    num_reserved_decode_tokens: int = 512
    page_size: int = 1


@dataclass
class Request:
    arrival: float
    prompt: int
    output: int
    prefilled: int = 0
    generated: float = 0.0
    admitted: float | None = None
    first_token: float | None = None
    finished: float | None = None
    retractions: int = 0

    @property
    def kv_tokens(self) -> int:
        return self.prefilled + int(self.generated)

    @property
    def wait(self) -> float:
        assert self.admitted is not None
        return self.admitted - self.arrival

    @property
    def ttft(self) -> float:
        assert self.first_token is not None
        return self.first_token - self.arrival


@dataclass
class Server:
    """One scheduler of `role`, stepped on a simulated clock (`run`)."""

    profile: Profile
    role: Role
    limits: Limits
    clock: float = 0.0
    free_tokens: int = field(init=False)
    waiting: deque[Request] = field(default_factory=deque)
    running: list[Request] = field(default_factory=list)
    retracted: deque[Request] = field(default_factory=deque)
    chunked: Request | None = None
    done: list[Request] = field(default_factory=list)
    steps: int = 0
    retractions: int = 0
    min_free_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.free_tokens = self.limits.max_total_num_tokens
        self.min_free_tokens = self.free_tokens

    def run(self, arrivals: list[Request], until: float) -> None:
        """Step until `until` (simulated seconds), or until every arrival is done."""
        pending = deque(sorted(arrivals, key=lambda r: r.arrival))
        while self.clock < until:
            while pending and pending[0].arrival <= self.clock:
                self.waiting.append(pending.popleft())
            if not (self.waiting or self.running or self.retracted or self.chunked):
                if not pending:
                    return
                self.clock = pending[0].arrival
                continue
            self.step()

    def step(self) -> None:
        if self.role == "prefill":
            self._prefill_step()
        else:
            self._decode_step()
        self.steps += 1
        self.min_free_tokens = min(self.min_free_tokens, self.free_tokens)
        assert self.free_tokens >= 0, f"negative free tokens {self.free_tokens}"

    # The PrefillAdder of a PD prefill: no running decode batch, one output token reserved per request.
    def _prefill_step(self) -> None:
        lim = self.limits
        rem_chunk = lim.chunked_prefill_size
        rem_input = lim.max_prefill_tokens
        batch: list[tuple[Request, int]] = []
        if self.chunked is not None:  # the chunked request goes first (add_chunked_req)
            req, self.chunked = self.chunked, None
            take = req.prompt - req.prefilled
            if rem_chunk is not None and take > rem_chunk:
                take, self.chunked = rem_chunk // lim.page_size * lim.page_size, req
            batch.append((req, take))
            rem_input -= take
            rem_chunk = None if rem_chunk is None else rem_chunk - take
        while self.waiting and self.chunked is None and len(batch) < lim.max_running_requests:
            req = self.waiting[0]
            remaining = req.prompt - req.prefilled
            if remaining + 1 >= self.free_tokens - sum(take for _, take in batch):  # NO_TOKEN (rem_total_tokens)
                break
            if remaining >= rem_input and batch:  # OTHER
                break
            if rem_chunk is None or remaining <= rem_chunk:
                take = remaining
            else:
                take = rem_chunk // lim.page_size * lim.page_size
                if take <= 0:
                    break
                self.chunked = req
            self.waiting.popleft()
            req.admitted = self.clock if req.admitted is None else req.admitted
            batch.append((req, take))
            self.free_tokens -= 1  # the reserved output token, held while the request is in flight
            rem_input -= take
            rem_chunk = None if rem_chunk is None else rem_chunk - take
        if not batch:
            return self._idle()
        tokens = sum(take for _, take in batch)
        self.free_tokens -= tokens
        self.min_free_tokens = min(self.min_free_tokens, self.free_tokens)
        self.clock += self.profile.prefill_step_seconds(tokens)
        for req, take in batch:
            req.prefilled += take
            if req.prefilled == req.prompt:  # the first token is out; the KV leaves with the (instant) transfer
                req.generated = 1.0
                req.first_token = req.finished = self.clock
                self.free_tokens += req.prompt + 1
                self.done.append(req)

    def _allocatable(self) -> int:
        """decode.py:439-497 (0.5.2), without the transfer queue (transfers are instant here)."""
        reserved = self.limits.num_reserved_decode_tokens
        retractable = sum(r.kv_tokens for r in self.running)
        single = max(
            (min(r.output, CLIP_MAX_NEW_TOKENS) + r.prompt - retractable for r in self.running),
            default=0,
        )
        return self.free_tokens - max(reserved * len(self.running), single)

    def _admit(self) -> None:
        lim = self.limits
        allocatable = self._allocatable()
        while self.retracted and len(self.running) < lim.max_running_requests:
            req = self.retracted[0]
            need = req.kv_tokens + lim.num_reserved_decode_tokens
            if need > allocatable:
                break
            self.retracted.popleft()
            allocatable -= need
            self.free_tokens -= req.kv_tokens  # its KV comes back from the host
            self.running.append(req)
        if self.retracted:
            return
        retractable = sum(r.kv_tokens for r in self.running)
        while self.waiting and len(self.running) < lim.max_running_requests:
            req = self.waiting[0]
            need = req.prompt + lim.num_reserved_decode_tokens
            if max(need, req.prompt + min(req.output, CLIP_MAX_NEW_TOKENS) - retractable) > allocatable:
                break
            self.waiting.popleft()
            allocatable -= need
            req.admitted = self.clock
            req.prefilled = req.prompt
            self.free_tokens -= req.prompt
            self.running.append(req)

    def _retract(self, per_request: int) -> None:
        """schedule_batch.py:1407-1500 (0.5.2): retract at least one request, then until the rest fit."""
        if self.profile.speculative is None:
            self.running.sort(key=lambda r: (int(r.generated), -r.prompt), reverse=True)
        first = True
        while first or self.free_tokens < per_request * len(self.running):
            if len(self.running) == 1:
                break
            first = False
            req = self.running.pop()
            self.free_tokens += req.kv_tokens
            req.retractions += 1
            self.retractions += 1
            self.retracted.append(req)

    def _decode_step(self) -> None:
        self._admit()
        if not self.running:
            return self._idle()
        per_request = math.ceil(self.profile.tokens_per_decode_step)
        if self.free_tokens < per_request * len(self.running):
            self._retract(per_request)
        context = sum(r.kv_tokens for r in self.running)
        self.clock += self.profile.decode_step_seconds(len(self.running), context)
        still: list[Request] = []
        for req in self.running:
            before = req.kv_tokens
            req.generated = min(req.generated + self.profile.tokens_per_decode_step, float(req.output))
            self.free_tokens -= req.kv_tokens - before
            if req.first_token is None:
                req.first_token = self.clock
            if req.generated >= req.output:
                req.finished = self.clock
                self.free_tokens += req.kv_tokens
                self.done.append(req)
            else:
                still.append(req)
        self.running = still

    def _idle(self) -> None:
        """Work is queued but none can run (the pool is held by others): wait for the next event."""
        raise RuntimeError(f"{self.role} server stalled: nothing can be scheduled with {self.free_tokens} free tokens")


# --- analytic capacity -----------------------------------------------------------------------------------------------


def prefill_capacity(profile: Profile, limits: Limits, prompt: int) -> float:
    """Requests/s a PD prefill sustains: every step a full chunk (chunking fills the budget exactly)."""
    tokens = limits.chunked_prefill_size or limits.max_prefill_tokens
    tokens = min(tokens, limits.max_running_requests * prompt)
    return tokens / profile.prefill_step_seconds(tokens) / prompt


def decode_batch(limits: Limits, prompt: int, output: int) -> int:
    """Requests running at saturation: max_running_requests, or what the pool holds with each request's reservation
    (the pre-allocation rule keeps `num_reserved_decode_tokens` per running request free)."""
    per_request = prompt + output / 2 + limits.num_reserved_decode_tokens
    by_memory = int((limits.max_total_num_tokens - prompt) // per_request)
    return max(1, min(limits.max_running_requests, by_memory))


def decode_capacity(profile: Profile, limits: Limits, prompt: int, output: int) -> float:
    """Requests/s a PD decode sustains: `decode_batch` requests, each needing ceil(output / accept length) steps."""
    batch = decode_batch(limits, prompt, output)
    steps = math.ceil(output / profile.tokens_per_decode_step)
    step = profile.decode_step_seconds(batch, round(batch * (prompt + output / 2)))
    return batch / (steps * step)


def poisson_arrivals(rate: float, duration: float, prompt: int, output: int, seed: int) -> list[Request]:
    """Requests arriving as a Poisson process of `rate` per second over [0, duration)."""
    rng = random.Random(seed)
    arrivals: list[Request] = []
    t = rng.expovariate(rate)
    while t < duration:
        arrivals.append(Request(arrival=t, prompt=prompt, output=output))
        t += rng.expovariate(rate)
    return arrivals
