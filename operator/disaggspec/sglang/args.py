"""Builds each pool's SGLang server command line from the typed spec; pure.

The command is `python3 -m sglang.launch_server` followed by flags in a fixed order: model, parallelism (with the
node count, rank and rendezvous address of a multi-node pool, then the pool's `parallelism` block and the peer-layout
hints of `sglang/parallelism.py`), network,
disaggregation (mode, bootstrap port, transfer backend, ib devices), engine, speculative, then the user's shared
`spec.engine.extraArgs` and the pool's own `extraArgs` last. Only typed flags the pinned release's parser knows are
emitted (the profile says which exist), and the rules check both extraArgs lists against that parser, so a rendered
command never fails on an unknown option; the conformance test parses every rendered command with the real parser of
each release.
"""

from __future__ import annotations

import json
from typing import Final

from disaggspec import constants as c
from disaggspec.api import DisaggSpecService, PoolName, effective_speculative, pool
from disaggspec.api.effective import EffectiveSpeculative
from disaggspec.api.v1alpha1 import EngineSpec, RdmaSpec
from disaggspec.sglang.parallelism import pool_parallelism_args
from disaggspec.sglang.profiles import SGLangProfile, profile_for

SERVER_PORT: Final = 30000
"""Port of the SGLang HTTP server inside a pool pod (the router's --service-discovery-port)."""
LAUNCH: Final = ("python3", "-m", "sglang.launch_server")
DIST_INIT_PORT: Final = 20000
"""Port on a multi-node server's leader pod where its ranks rendezvous (`--dist-init-addr <leader>:20000`: the
torch.distributed TCPStore, 0.5.2 sglang/srt/model_executor/model_runner.py:619-620, 0.5.23
sglang/srt/distributed/bootstrap.py:241-243), as in SGLang's own LeaderWorkerSet examples. Clear of every port the
server binds: the HTTP and metrics port 30000 (SERVER_PORT), the NCCL port (30000 + 100..1000 on 0.5.2,
server_args.py:2597; a free port on 0.5.23; either is the rendezvous only without --dist-init-addr), the bootstrap
port (8998 by default; a rule keeps spec.transfer.bootstrapPort off it, another keeps extraArgs ports off it), and
the ports SGLang derives from the dist-init port (+1..+5, and one per DP rank from +6 on 0.5.2, server_args.py:
2634-2642), which only DP attention uses: a rule (parallelism-dp-attention-ports) keeps the bootstrap port off them."""
NODE_RANK_LEADER: Final = "0"
"""`--node-rank` of a group's leader: the rank that runs the HTTP server, the tokenizer and the bootstrap server."""
NODE_RANK_WORKER: Final = f"$({c.LWS_ENV_WORKER_INDEX})"
"""`--node-rank` of a group's worker: its worker index (1..nodesPerInstance-1), which the kubelet substitutes from the
environment the LeaderWorkerSet pod webhook injects."""


def gpu_key_order(key: str) -> tuple[int, int, str]:
    """Sort key of an ibDevicesPerGpu key: canonical decimal indexes by value, anything else after them by text.
    Validation refuses non-canonical keys; rendering must still not raise on one (int('gpu0') would), since a
    service is rendered to report on it even when it is refused."""
    if key.isascii() and key.isdigit():
        return (0, int(key), key)
    return (1, 0, key)


def ib_device_arg(rdma: RdmaSpec | None) -> str | None:
    """`--disaggregation-ib-device` of a Static mapping: a comma list, or a per-GPU JSON map with sorted GPU keys.
    Auto renders none: the start-time wrapper (disaggspec.render.rdma.launcher) appends the flag it computes."""
    if rdma is None or rdma.effective_mapping() != "Static":
        return None
    if rdma.ib_devices_per_gpu:
        ordered = dict(sorted(rdma.ib_devices_per_gpu.items(), key=lambda item: gpu_key_order(item[0])))
        return json.dumps(ordered, separators=(",", ":"))
    if rdma.ib_devices:
        return ",".join(rdma.ib_devices)
    return None


def speculative_args(eff: EffectiveSpeculative, profile: SGLangProfile) -> list[str]:
    args = ["--speculative-algorithm", eff.algorithm]
    if eff.draft_model is not None:
        args += ["--speculative-draft-model-path", eff.draft_model.path]
        if eff.draft_model.revision:
            args += ["--speculative-draft-model-revision", eff.draft_model.revision]
    args += ["--speculative-num-steps", str(eff.num_steps), "--speculative-eagle-topk", str(eff.eagle_topk)]
    if eff.num_draft_tokens is not None:
        args += ["--speculative-num-draft-tokens", str(eff.num_draft_tokens)]
    if eff.rejection_sampling and profile.has_rejection_sampling:
        args.append("--speculative-use-rejection-sampling")
    if eff.multi_layer and profile.has_multi_layer_eagle:
        args.append("--enable-multi-layer-eagle")
    if eff.draft_kv_cache_dtype is not None and profile.draft_kv_cache_dtypes:
        args += ["--speculative-draft-kv-cache-dtype", eff.draft_kv_cache_dtype]
    return args


def multi_node_args(nodes: int, node_rank: str) -> list[str]:
    """`--nnodes`, `--node-rank` and `--dist-init-addr` of one pod of a multi-node server (empty for one node).

    `node_rank` is NODE_RANK_LEADER or NODE_RANK_WORKER; `$(VAR)` is expanded by the kubelet from the container's
    environment, where the LeaderWorkerSet pod webhook puts LWS_LEADER_ADDRESS and LWS_WORKER_INDEX. Both releases
    split the ranks evenly: tp_size must be divisible by nnodes (0.5.2 sglang/srt/server_args.py:2251-2253, 0.5.23
    sglang/srt/arg_groups/validation_hook.py:178-181) and node r runs ranks tp/nnodes x r .. tp/nnodes x (r+1) - 1
    on its GPUs 0..tp/nnodes-1 (0.5.2 sglang/srt/entrypoints/engine.py:754-772, 0.5.23 engine.py:2070-2075), which
    is why a rule makes tensorParallelSize exactly nodesPerInstance x gpusPerNode (pipeline parallelism and
    data-parallel replicas are forbidden in extraArgs, and DP attention splits the tensor-parallel ranks)."""
    if nodes == 1:
        return []
    return [
        "--nnodes",
        str(nodes),
        "--node-rank",
        node_rank,
        "--dist-init-addr",
        f"$({c.LWS_ENV_LEADER_ADDRESS}):{DIST_INIT_PORT}",
    ]


def server_args(service: DisaggSpecService, role: PoolName, node_rank: str = NODE_RANK_LEADER) -> list[str]:
    """The full argv of one pool's SGLang server container; for a multi-node pool, that of the pod of `node_rank`
    (the leader by default)."""
    spec = service.spec
    pool_spec = pool(spec, role)
    profile = profile_for(spec.sglang.version)
    model = spec.model
    args = [*LAUNCH, "--model-path", model.path]
    if model.revision:
        args += ["--revision", model.revision]
    args += ["--dtype", model.dtype]
    if model.trust_remote_code:
        args.append("--trust-remote-code")
    if model.served_model_name:
        args += ["--served-model-name", model.served_model_name]
    args += ["--tp-size", str(pool_spec.tensor_parallel_size)]
    args += multi_node_args(pool_spec.nodes_per_instance, node_rank)
    args += pool_parallelism_args(service, role, profile)
    args += ["--host", "0.0.0.0", "--port", str(SERVER_PORT), "--enable-metrics"]

    transfer = spec.transfer
    args += ["--disaggregation-mode", role]
    args += ["--disaggregation-bootstrap-port", str(transfer.bootstrap_port)]
    args += ["--disaggregation-transfer-backend", transfer.backend]
    ib_devices = ib_device_arg(transfer.rdma)
    if ib_devices is not None:
        args += ["--disaggregation-ib-device", ib_devices]

    engine = spec.engine
    args += ["--page-size", str(engine.page_size), "--kv-cache-dtype", engine.kv_cache_dtype]
    if engine.attention_backend:
        args += ["--attention-backend", engine.attention_backend]
    if engine.decode_allocation_policy is not None and profile.has_decode_allocation_policy:
        args += ["--disaggregation-decode-allocation-policy", engine.decode_allocation_policy]
    if engine.kv_checksum and profile.has_kv_checksum:
        args.append("--disaggregation-enable-kv-checksum")
    args += _known(profile, engine_typed_args(engine))

    args += speculative_args(effective_speculative(spec, role), profile)
    if spec.speculative.token_map is not None:
        args += _known(profile, ["--speculative-token-map", spec.speculative.token_map])
    # Shared extra arguments before the pool's own: argparse keeps the last value, so a pool's per-pool-safe option
    # overrides the shared one (the rules keep options that must match out of a pool's list).
    return args + list(engine.extra_args) + list(pool_spec.extra_args)


def engine_typed_args(engine: EngineSpec) -> list[str]:
    """The must-match engine options that have typed fields, each `[flag, value]`, in a fixed order."""
    args: list[str] = []
    if engine.context_length is not None:
        args += ["--context-length", str(engine.context_length)]
    if engine.quantization is not None:
        args += ["--quantization", engine.quantization]
    if engine.tokenizer_path is not None:
        args += ["--tokenizer-path", engine.tokenizer_path]
    if engine.chat_template is not None:
        args += ["--chat-template", engine.chat_template]
    return args


def _known(profile: SGLangProfile, pairs: list[str]) -> list[str]:
    """`pairs` (flag, value, flag, value, ...) without the flags the release does not register."""
    kept: list[str] = []
    for flag, value in zip(pairs[::2], pairs[1::2], strict=True):
        if profile.knows_flag(flag):
            kept += [flag, value]
    return kept
