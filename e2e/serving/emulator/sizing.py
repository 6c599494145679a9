"""What an emulated server's capacity model is sized by: SGLang's scheduler limits from its arguments and GPU, and the
KV transfer bandwidth of its transfer backend. Pure functions of the parsed server arguments.

Defaults follow SGLang 0.5.2's `ServerArgs.__post_init__` and tp_worker (cited per line); 0.5.23 moved the memory
heuristic to `arg_groups/memory_hook.py` with a different formula (activation tokens x 1.5 + a per-rank share), which
is not modelled: both releases get 0.5.2's, and a pod that sets `--mem-fraction-static` gets its own value in either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from e2e.serving.emulator.capacity import Limits
from e2e.serving.emulator.profiles import Profile
from e2e.serving.emulator.sglang_args import ServerConfig

MIB: Final = 1 << 20
NUM_RESERVED_DECODE_TOKENS: Final = 512
"""0.5.2 server_args.py:384 (`--num-reserved-decode-tokens`)."""
MAX_PREFILL_TOKENS: Final = 16384
"""0.5.2 server_args.py:169 (`--max-prefill-tokens`)."""

RDMA_NIC_BYTES_PER_SECOND: Final = 400e9 / 8
"""A 400 Gb/s RDMA NIC (ConnectX-7 / the H100 HGX reference design: one per GPU): 50 GB/s."""
RDMA_EFFICIENCY: Final = 0.8
"""ASSUMPTION: share of the NICs' line rate a Mooncake RDMA transfer of KV pages achieves."""
TCP_BYTES_PER_SECOND: Final = 100e9 / 8 * 0.3
"""ASSUMPTION: Mooncake's TCP transport over a 100 Gb/s pod network reaches about 30% of line rate (3.75 GB/s)."""


def default_mem_fraction_static(cfg: ServerConfig, gpu_memory_bytes: int) -> float:
    """0.5.2 server_args.py:452-498: (GPU memory - reserved) / GPU memory, the reservation growing with the GPU class,
    the TP x PP size, a draft model and DP attention."""
    gpu_mem = gpu_memory_bytes / MIB
    parallel = cfg.tp_size * cfg.pp_size
    if gpu_mem < 35 * 1024:
        reserved = (2.8 + parallel / 10) * 1024
    elif gpu_mem < 90 * 1024:
        reserved = (9.5 + parallel / 2) * 1024
    elif gpu_mem < 160 * 1024:
        reserved = (12 + parallel / 2) * 1024
    else:
        reserved = 32 * 1024
    if cfg.speculative_algorithm is not None:
        reserved += (6 if cfg.speculative_algorithm == "STANDALONE" else 2) * 1024
    if cfg.enable_dp_attention or cfg.attn_dp_size_flag > 1:
        reserved += 4 * 1024
    return round((gpu_mem - reserved) / gpu_mem, 3)


def default_chunked_prefill_size(gpu_memory_bytes: int, attn_dp: int) -> int:
    """0.5.2 server_args.py:509-518 (by GPU memory: 2k below 35 GB, 8k up to 160 GB, else 16k) and :641 (divided by
    the DP size with DP attention)."""
    gpu_mem = gpu_memory_bytes / MIB
    size = 2048 if gpu_mem < 35 * 1024 else 8192 if gpu_mem < 160 * 1024 else 16384
    return size // max(1, attn_dp)


def _given(cfg: ServerConfig, flag: str) -> str | None:
    value = cfg.given.get(flag)
    return None if value is None else str(value)


@dataclass(frozen=True)
class Sizing:
    limits: Limits
    """Per DP rank."""
    ranks: int
    transfer_bytes_per_second: float


def size_server(
    cfg: ServerConfig,
    profile: Profile,
    *,
    ranks: int,
    pool_tokens: int | None = None,
    context_length: int,
) -> Sizing:
    """The scheduler limits of each of the server's `ranks` DP ranks, and its KV transfer bandwidth."""
    gpu = profile.gpu
    fraction_flag = _given(cfg, "--mem-fraction-static")
    fraction = float(fraction_flag) if fraction_flag else default_mem_fraction_static(cfg, gpu.memory_bytes)
    if pool_tokens is None:
        pool_tokens = profile_pool_tokens(profile, fraction, cfg.page_size)
    # model_runner.py:1252-1261 (0.5.2): request slots = min(max(pool / context x 512, 2048), 4096).
    slots = min(max(int(pool_tokens / max(1, context_length) * 512), 2048), 4096)
    running_flag = _given(cfg, "--max-running-requests")
    # tp_worker.py:137-145: max_running_requests = min(pool // 2 or the flag (per DP rank), request slots).
    running = pool_tokens // 2 if running_flag is None else int(running_flag) // max(1, ranks)
    running = max(1, min(running, slots))
    chunk_flag = _given(cfg, "--chunked-prefill-size")
    chunk: int | None = int(chunk_flag) if chunk_flag else default_chunked_prefill_size(gpu.memory_bytes, ranks)
    if chunk is not None and chunk <= 0:
        chunk = None  # -1 disables chunked prefill (server_args.py help)
    limits = Limits(
        max_total_num_tokens=pool_tokens,
        max_running_requests=running,
        chunked_prefill_size=chunk,
        max_prefill_tokens=int(_given(cfg, "--max-prefill-tokens") or MAX_PREFILL_TOKENS),
        num_reserved_decode_tokens=int(_given(cfg, "--num-reserved-decode-tokens") or NUM_RESERVED_DECODE_TOKENS),
        page_size=cfg.page_size,
        max_num_reqs=slots,
    )
    return Sizing(limits, ranks, transfer_bytes_per_second(cfg))


def profile_pool_tokens(profile: Profile, mem_fraction_static: float, page_size: int) -> int:
    """KV pool tokens of one DP rank from the memory model (weights and KV heads split over the server's GPUs)."""
    return max(profile.max_total_num_tokens(mem_fraction_static, page_size), 0)


def transfer_bytes_per_second(cfg: ServerConfig) -> float:
    """RDMA when `--disaggregation-ib-device` names NICs (each TP rank sends its share of the KV over its own NIC, so
    up to one NIC per rank works in parallel), else Mooncake's TCP transport."""
    devices = [d for d in (_given(cfg, "--disaggregation-ib-device") or "").split(",") if d.strip()]
    if not devices:
        return TCP_BYTES_PER_SECOND
    return min(len(devices), max(1, cfg.tp_size)) * RDMA_NIC_BYTES_PER_SECOND * RDMA_EFFICIENCY
