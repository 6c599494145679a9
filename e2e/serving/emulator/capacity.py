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
from e2e.serving.emulator.profiles import Profile

Role = Literal["prefill", "decode"]

_S = "sglang/srt/"
CAPACITY_FACTS: Final[tuple[Fact, ...]] = (
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
    max_num_reqs: int | None = None
    """Request slots (req_to_token_pool.size): what a PD decode pre-allocates into; None: max_running_requests."""

    @property
    def request_slots(self) -> int:
        return self.max_num_reqs if self.max_num_reqs is not None else self.max_running_requests


@dataclass(eq=False)
class Request:
    arrival: float
    prompt: int
    output: int
    """Tokens this server produces: 1 on a prefill (the first token), the rest of the output on a decode."""
    prefilled: int = 0
    generated: float = 0.0
    admitted: float | None = None
    first_token: float | None = None
    finished: float | None = None
    retractions: int = 0
    steps: int = 0
    """Decode steps (verify steps with speculation) the request took part in."""

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
    """One scheduler of `role`, stepped on a simulated clock.

    Pure use (`run`): the KV transfer is instant, a prefill frees a request's KV when its last chunk is done and a
    decode runs a request the moment it is pre-allocated. Live use (`live=True`, driven by the emulator's
    `batching.Scheduler`): a prefill holds the KV of a finished request in `inflight` until `release`, a decode holds
    a pre-allocated request in `transferring` until `kv_arrived`; each `step` returns its duration and lists what it
    emitted in `emitted` (request, tokens) for the caller to deliver when that time has passed.
    """

    profile: Profile
    role: Role
    limits: Limits
    live: bool = False
    clock: float = 0.0
    free_tokens: int = field(init=False)
    waiting: deque[Request] = field(default_factory=deque)
    """Prefill: bootstrapped requests not yet prefilled. Decode: the pre-allocation queue."""
    running: list[Request] = field(default_factory=list)
    retracted: deque[Request] = field(default_factory=deque)
    chunked: Request | None = None
    inflight: list[Request] = field(default_factory=list)
    """Prefill, live: prefilled requests whose KV is being sent (SGLang's inflight queue)."""
    transferring: list[Request] = field(default_factory=list)
    """Decode, live: pre-allocated requests waiting for their KV (SGLang's transfer queue)."""
    ready: deque[Request] = field(default_factory=deque)
    """Decode: requests whose KV arrived, waiting for a place in the running batch (SGLang's waiting_queue)."""
    done: list[Request] = field(default_factory=list)
    emitted: list[tuple[Request, int]] = field(default_factory=list)
    allocated: list[Request] = field(default_factory=list)
    """Decode, live: the requests the last step pre-allocated."""
    last_batch: int = 0
    steps: int = 0
    retractions: int = 0
    min_free_tokens: int = field(init=False)

    def __post_init__(self) -> None:
        self.free_tokens = self.limits.max_total_num_tokens
        self.min_free_tokens = self.free_tokens

    @property
    def used_tokens(self) -> int:
        return self.limits.max_total_num_tokens - self.free_tokens

    @property
    def running_count(self) -> int:
        """`sglang:num_running_reqs`: the batch a prefill last ran, a decode's running batch."""
        return self.last_batch if self.role == "prefill" else len(self.running)

    @property
    def queued_count(self) -> int:
        """`sglang:num_queue_reqs` (SGLang's waiting_queue): bootstrapped prefills not yet run (the chunked one
        included), or decodes whose KV arrived that wait for a place in the running batch."""
        if self.role == "prefill":
            return len(self.waiting) + (self.chunked is not None)
        return len(self.ready)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running or self.retracted or self.chunked or self.ready)

    def run(self, arrivals: list[Request], until: float) -> None:
        """Step until `until` (simulated seconds), or until every arrival is done."""
        pending = deque(sorted(arrivals, key=lambda r: r.arrival))
        while self.clock < until:
            while pending and pending[0].arrival <= self.clock:
                self.waiting.append(pending.popleft())
            if not self.has_work():
                if not pending:
                    return
                self.clock = pending[0].arrival
                continue
            if self.step() == 0.0:
                raise RuntimeError(
                    f"{self.role} server stalled: nothing can be scheduled with {self.free_tokens} free tokens"
                )

    def step(self) -> float:
        """One scheduler iteration; returns its duration (0.0: nothing could run, wait for an event)."""
        self.emitted = []
        self.allocated = []
        before = self.clock
        if self.role == "prefill":
            self._prefill_step()
        else:
            self._decode_step()
        if self.clock > before:
            self.steps += 1
        self.min_free_tokens = min(self.min_free_tokens, self.free_tokens)
        assert self.free_tokens >= 0, f"negative free tokens {self.free_tokens}"
        return self.clock - before

    # --- live events -------------------------------------------------------------------------------------------------

    def release(self, req: Request) -> None:
        """Prefill, live: the request's KV transfer is over (done or failed): its KV and reserved token are freed."""
        if req in self.inflight:
            self.inflight.remove(req)
            self.free_tokens += req.prompt + 1

    def kv_arrived(self, req: Request) -> None:
        """Decode, live: the request's KV is here; it waits for a place in the running batch."""
        if req in self.transferring:
            self.transferring.remove(req)
            self.ready.append(req)

    def cancel(self, req: Request) -> None:
        """The request failed or its client left: it leaves whatever queue holds it and gives back its KV."""
        if req in self.waiting:
            self.waiting.remove(req)
            if self.role == "prefill" and req.prefilled:
                self.free_tokens += req.prefilled + 1  # a chunked request held its chunks and reserved token
            return
        if self.chunked is req:
            self.chunked = None
            self.free_tokens += req.prefilled + 1
            return
        if req in self.inflight:
            self.release(req)
            return
        if req in self.retracted:
            self.retracted.remove(req)  # its KV was offloaded: nothing held on the GPU
            return
        for queue in (self.transferring, self.ready, self.running):
            if req in queue:
                queue.remove(req)
                self.free_tokens += req.kv_tokens
                return

    # --- prefill: the PrefillAdder of a PD prefill (no running decode batch, one output token reserved) ---------------

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
        self.last_batch = len(batch)
        if not batch:
            return
        tokens = sum(take for _, take in batch)
        self.free_tokens -= tokens
        self.min_free_tokens = min(self.min_free_tokens, self.free_tokens)
        self.clock += self.profile.prefill_step_seconds(tokens)
        for req, take in batch:
            req.prefilled += take
            if req.prefilled == req.prompt:  # the first token is out
                req.generated = 1.0
                req.first_token = req.finished = self.clock
                self.done.append(req)
                self.emitted.append((req, 1))
                if self.live:
                    self.inflight.append(req)  # the KV stays until its transfer is over (`release`)
                else:
                    self.free_tokens += req.prompt + 1

    # --- decode: pre-allocation, the running batch, retraction -------------------------------------------------------

    def _allocatable(self) -> int:
        """decode.py:439-497 (0.5.2): free tokens minus the reservation of every request holding a slot, or the space
        one request needs to finish alone, and minus what the retracted requests need to come back."""
        reserved = self.limits.num_reserved_decode_tokens
        retractable = sum(r.kv_tokens for r in self.running)
        single = max(
            (min(r.output, CLIP_MAX_NEW_TOKENS) + r.prompt - retractable for r in self.running),
            default=0,
        )
        holders = len(self.running) + len(self.transferring) + len(self.ready)
        retracted = sum(r.kv_tokens + reserved for r in self.retracted)
        return self.free_tokens - max(reserved * holders, single) - retracted

    def _slots_free(self) -> int:
        held = len(self.running) + len(self.transferring) + len(self.ready) + len(self.retracted)
        return self.limits.request_slots - held

    def _admit(self) -> None:
        """Resume retracted requests first; while any remains, admit nothing new (decode.py:882-890). Then
        pre-allocate waiting requests in order while their prompt and reservation fit (decode.py:368-400)."""
        lim = self.limits
        while self.retracted and len(self.running) < lim.max_running_requests:
            req = self.retracted[0]
            need = req.kv_tokens + lim.num_reserved_decode_tokens
            if need > self._allocatable() + sum(r.kv_tokens + lim.num_reserved_decode_tokens for r in self.retracted):
                break
            self.retracted.popleft()
            self.free_tokens -= req.kv_tokens  # its KV comes back from the host
            self.running.append(req)
        if self.retracted:
            return
        allocatable = self._allocatable()
        retractable = sum(r.kv_tokens for r in self.running)
        while self.waiting and self._slots_free() > 0:
            req = self.waiting[0]
            need = req.prompt + lim.num_reserved_decode_tokens
            if max(need, req.prompt + min(req.output, CLIP_MAX_NEW_TOKENS) - retractable) > allocatable:
                break
            self.waiting.popleft()
            allocatable -= need
            req.admitted = self.clock
            req.prefilled = req.prompt
            self.free_tokens -= req.prompt
            if self.live:
                self.transferring.append(req)
                self.allocated.append(req)
            else:
                self.ready.append(req)

    def _join_running(self) -> None:
        """get_new_prebuilt_batch (decode.py:833-860): arrived requests join up to max_running_requests."""
        while self.ready and len(self.running) < self.limits.max_running_requests:
            req = self.ready.popleft()
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
        self._join_running()
        self.last_batch = len(self.running)
        if not self.running:
            return
        per_request = math.ceil(self.profile.tokens_per_decode_step)
        if self.free_tokens < per_request * len(self.running):
            self._retract(per_request)
        context = sum(r.prefilled + int(r.generated) for r in self.running)
        self.clock += self.profile.decode_step_seconds(len(self.running), context)
        per_step = self.profile.tokens_per_decode_step
        emitted = self.emitted
        still: list[Request] = []
        for req in self.running:  # the hot loop of a saturated decode: plain arithmetic, no properties
            before = int(req.generated)
            generated = min(req.generated + per_step, float(req.output))
            req.generated = generated
            req.steps += 1
            grown = int(generated) - before
            self.free_tokens -= grown
            emitted.append((req, grown))
            if req.first_token is None:
                req.first_token = self.clock
            if generated >= req.output:
                req.finished = self.clock
                self.free_tokens += req.prefilled + int(generated)
                self.done.append(req)
            else:
                still.append(req)
        self.running = still


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
