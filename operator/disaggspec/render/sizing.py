"""Default resource requests of pool and router pods, sized from a pod's GPUs; pure.

Without requests a pool pod is BestEffort: the scheduler packs it beside anything, and under memory pressure the
kubelet evicts it first, with hours of warm KV cache. So every pool pod requests cpu and memory sized from its GPU
count (and ephemeral storage when it downloads its weights), which makes it Burstable; a user's request or limit of a
resource replaces the default for that resource, and limits equal to the requests make it Guaranteed.

The formula (`pool_requests`), per pod with G GPUs and a /dev/shm of S GiB:

- cpu = 4 + 4 G. An SGLang server runs an HTTP server with the tokenizer manager, a detokenizer and (prefill) the
  bootstrap server: about 4 busy cores under load. Each tensor-parallel rank is a scheduler process that spins a core
  on its event loop, plus its CUDA launch and NCCL proxy threads and the KV transfer engine's workers: about 4 more.
  On an 8-GPU server (112-224 cores) that is 36 of them; a 1-GPU pod (8) still fits the 12 cores per GPU of the
  smallest datacenter GPU shapes.
- memory = S + 16Gi + 24Gi G. /dev/shm is a memory-backed emptyDir, charged to the pod's memory once written, so it
  is reserved in full. 16Gi covers the per-pod processes (tokenizer and detokenizer load the tokenizer and keep
  per-request state). Each rank holds a CUDA context, its pinned host buffers (transfer metadata, the draft
  proposal of transferDraftProbs, CUDA-graph inputs) and the page cache of the weight shards it reads while loading:
  24Gi per GPU, a tenth of the 240+ GiB per GPU of an HGX H100/H200 node, and within the 85 GB of the smallest
  single-A100 shape.
- ephemeral-storage = 16Gi + 96Gi G, only when spec.model.volume is unset: the weights are then downloaded into the
  container's writable layer. A model served on G GPUs has at most about G x 96 GiB of weights (what fits an H200
  beside its KV cache), plus the draft model and the tokenizer. The request makes the scheduler pick a node with
  that much disk instead of failing the download half-way.

The router requests cpu 1 and memory 1Gi (`ROUTER_REQUESTS`): it proxies requests, and with cache_aware keeps a
prefix tree per worker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

SHM_GIB: Final = 32
"""Memory-backed /dev/shm per pool pod, in GiB: NCCL and the CUDA IPC of tensor parallelism need far more than the
64 MiB default."""
SHM_SIZE: Final = f"{SHM_GIB}Gi"

POOL_CPU_BASE: Final = 4
POOL_CPU_PER_GPU: Final = 4
POOL_MEMORY_BASE_GIB: Final = 16
POOL_MEMORY_PER_GPU_GIB: Final = 24
POOL_STORAGE_BASE_GIB: Final = 16
POOL_STORAGE_PER_GPU_GIB: Final = 96

ROUTER_REQUESTS: Final[Mapping[str, str]] = {"cpu": "1", "memory": "1Gi"}
"""Default requests of a router pod."""

SIZED: Final = ("cpu", "memory", "ephemeral-storage")
"""The resources a default request is rendered for."""


def pool_requests(gpus: int, shm_gib: int = SHM_GIB, downloads_weights: bool = True) -> dict[str, str]:
    """Default requests of a pool pod with `gpus` GPUs and a /dev/shm of `shm_gib` GiB (see the module docstring);
    ephemeral-storage only when the weights are downloaded into the container."""
    requests = {
        "cpu": str(POOL_CPU_BASE + POOL_CPU_PER_GPU * gpus),
        "memory": f"{shm_gib + POOL_MEMORY_BASE_GIB + POOL_MEMORY_PER_GPU_GIB * gpus}Gi",
    }
    if downloads_weights:
        requests["ephemeral-storage"] = f"{POOL_STORAGE_BASE_GIB + POOL_STORAGE_PER_GPU_GIB * gpus}Gi"
    return requests


def with_defaults(
    defaults: Mapping[str, str], requests: Mapping[str, int | str], limits: Mapping[str, int | str]
) -> dict[str, int | str]:
    """`requests` plus each default whose resource the user neither requested nor limited. A limit alone counts as
    given: Kubernetes then requests the limit, and a default request above the user's limit would be refused."""
    merged: dict[str, int | str] = dict(requests)
    for name, value in defaults.items():
        if name not in requests and name not in limits:
            merged[name] = value
    return merged
