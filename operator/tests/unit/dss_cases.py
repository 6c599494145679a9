"""The shared case table of invalid DisaggSpecServices: one valid base object and, per case, the edits that break it
and the rule (or schema error) that must reject it. The unit tests run the Python rule table over these cases; the
integration tests send the same manifests to a real API server and expect the CEL/schema rejection."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

REPO_ROOT: Final = Path(__file__).resolve().parents[3]
EXAMPLES: Final = sorted((REPO_ROOT / "examples").glob("*.yaml"))

DELETE: Final = object()
"""Marks a path to remove."""

BASE: Final[dict[str, Any]] = {
    "apiVersion": "disaggspec.io/v1alpha1",
    "kind": "DisaggSpecService",
    "metadata": {"name": "base"},
    "spec": {
        "sglang": {"image": "example.invalid/sglang:test", "version": "0.5.23"},
        "model": {"path": "meta-llama/Llama-3.1-8B-Instruct"},
        "speculative": {
            "algorithm": "EAGLE3",
            "draftModel": {"path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"},
            "numSteps": 3,
            "eagleTopk": 1,
        },
        "prefill": {"tensorParallelSize": 1},
        "decode": {"tensorParallelSize": 1},
    },
}

DP8: Final[dict[str, Any]] = {"tensorParallelSize": 8, "parallelism": {"dataParallelAttention": {"size": 8}}}
"""A pool of one 8-GPU server with 8 attention DP ranks."""


def _par(tp: int, **parallelism: Any) -> dict[str, Any]:
    """A pool of one tp-GPU server with the given parallelism block."""
    return {"tensorParallelSize": tp, "parallelism": parallelism}


_PLANNER: Final[dict[str, Any]] = {"ttftMilliseconds": 2000, "itlMilliseconds": 50}


def _scaling(mode: str = "External", **blocks: Any) -> dict[str, Any]:
    """A spec.autoscaling block: both pools 1..4 unless `blocks` says otherwise (a planner block too)."""
    return {"mode": mode, "prefill": {"maxReplicas": 4}, "decode": {"maxReplicas": 4}, **blocks}


def edited(edits: Mapping[str, Any], base: Mapping[str, Any] = BASE) -> dict[str, Any]:
    """A deep copy of `base` with each dotted path set to its value (or removed when the value is DELETE)."""
    obj = copy.deepcopy(dict(base))
    for path, value in edits.items():
        *parents, leaf = path.split(".")
        node = obj
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = copy.deepcopy(value)
    return obj


@dataclass(frozen=True)
class Case:
    """One invalid manifest and what rejects it."""

    name: str
    edits: Mapping[str, Any]
    rule: str | None = None
    """The rule-table id that must fire (and, for CEL rules, whose message the API server must return)."""
    schema_error: str | None = None
    """For schema-level cases: a substring of the API server's error (pydantic rejects the object too)."""
    also: frozenset[str] = field(default_factory=frozenset)
    """Other rule ids the same edit legitimately trips."""

    def manifest(self) -> dict[str, Any]:
        return edited(self.edits)


V052 = {"spec.sglang.version": "0.5.2"}
TREE = {"spec.speculative.eagleTopk": 2, "spec.speculative.numDraftTokens": 4}
WHOLE_1GPU_NODES = {"spec.prefill.gpusPerNode": 1, "spec.decode.gpusPerNode": 1}
"""The base's 1-GPU pods as whole nodes, which a static per-GPU ib device map needs."""
MULTI_NODE = {"tensorParallelSize": 16, "nodesPerInstance": 2}
"""A pool of servers over two 8-GPU nodes (gpusPerNode defaults to 8)."""

PARALLELISM_CASES: Final[tuple[Case, ...]] = (
    Case(
        "parallelism-dp-not-dividing-tp",
        {"spec.prefill": _par(8, dataParallelAttention={"size": 3})},
        "parallelism-dp-attention-divides-tp",
    ),
    Case(
        "parallelism-ep-not-dividing-tp",
        {"spec.decode": _par(8, expertParallel={"size": 3})},
        "parallelism-ep-divides-tp",
    ),
    Case(
        "parallelism-deepep-ep-not-tp",
        {"spec.decode": _par(8, expertParallel={"size": 4, "backend": "deepep"})},
        "parallelism-deepep-ep-equals-tp",
    ),
    Case(
        "parallelism-deepep-mode-without-deepep",
        {"spec.prefill": _par(8, expertParallel={"size": 8, "deepepMode": "normal"})},
        "parallelism-deepep-mode-needs-deepep",
    ),
    Case(
        "parallelism-dp-lm-head-without-dp-attention",
        {"spec.prefill": _par(8, dpLmHead=True)},
        "parallelism-dp-lm-head-needs-dp-attention",
    ),
    Case(
        "parallelism-two-batch-overlap-without-a2a-or-dp",
        {"spec.decode": _par(8, expertParallel={"size": 8}, twoBatchOverlap=True)},
        "parallelism-two-batch-overlap-needs-communication",
    ),
    Case("parallelism-eplb-without-ep", {"spec.prefill": _par(8, eplb={})}, "parallelism-eplb-needs-ep"),
    Case(
        "parallelism-dense-tp-equal-tp-on-0.5.2",
        {"spec.sglang.version": "0.5.2", "spec.prefill": _par(8, denseMlpTpSize=8)},
        "parallelism-dense-mlp-tp-size",
    ),
    Case(
        "parallelism-dense-tp-neither-1-nor-tp",
        {"spec.decode": _par(8, denseMlpTpSize=2)},
        "parallelism-dense-mlp-tp-size",
    ),
    Case(
        "parallelism-bootstrap-port-in-dp-zmq-range",
        {"spec.prefill": DP8, "spec.transfer": {"bootstrapPort": 30241}},
        "parallelism-dp-attention-ports",
    ),
    Case(
        "parallelism-bootstrap-port-in-multi-node-dp-range",
        {
            "spec.decode": {**DP8, "tensorParallelSize": 16, "nodesPerInstance": 2},
            "spec.transfer": {"bootstrapPort": 20010},
        },
        "parallelism-dp-attention-ports",
    ),
    Case(
        "parallelism-dp-chunk-not-whole-pages",
        {"spec.engine": {"pageSize": 64}, "spec.prefill": {**DP8, "extraArgs": ["--chunked-prefill-size", "2112"]}},
        "parallelism-dp-attention-chunk-pages",
    ),
    Case(
        "parallelism-dp-default-chunk-not-whole-pages",
        {"spec.engine": {"pageSize": 64}, "spec.prefill": _par(6, dataParallelAttention={"size": 3})},
        "parallelism-dp-attention-chunk-pages",
    ),
    Case(
        "parallelism-dp-decode-chunk-on-0.5.2",
        {
            "spec.sglang.version": "0.5.2",
            "spec.engine": {"pageSize": 64, "extraArgs": ["--chunked-prefill-size", "2112"]},
            "spec.decode": DP8,
        },
        "parallelism-dp-attention-chunk-pages",
    ),
    Case(
        "parallelism-prefill-dp-dispatch-on-0.5.2",
        {
            "spec.sglang.version": "0.5.2",
            "spec.prefill": {**DP8, "extraArgs": ["--load-balance-method", "minimum_tokens"]},
        },
        "parallelism-prefill-dp-dispatch",
    ),
)
"""The parallelism family's invalid cases (part of RULE_CASES)."""

RULE_CASES: Final[tuple[Case, ...]] = (
    Case("name-too-long", {"metadata.name": "a" * 45}, "name-length"),
    Case("name-with-dot", {"metadata.name": "my.service"}, "name-dns-label"),
    Case("name-leading-digit", {"metadata.name": "1service"}, "name-dns-label"),
    Case("algorithm-override-differs", {"spec.decode.speculative": {"algorithm": "EAGLE"}}, "spec-algorithm-match"),
    Case(
        "draft-path-override-differs",
        {"spec.decode.speculative": {"draftModel": {"path": "someone/other-draft"}}},
        "spec-draft-model-match",
    ),
    Case(
        "draft-revision-override-differs",
        {
            "spec.prefill.speculative": {
                "draftModel": {"path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B", "revision": "v2"}
            }
        },
        "spec-draft-model-match",
    ),
    Case(
        "topk-override-differs",
        {"spec.decode.speculative": {"eagleTopk": 2, "numDraftTokens": 4}},
        "spec-topk-match",
    ),
    Case("multi-layer-override-differs", {"spec.prefill.speculative": {"multiLayer": True}}, "spec-multi-layer-match"),
    Case(
        "num-steps-differs-with-multi-layer",
        {"spec.speculative.multiLayer": True, "spec.decode.speculative": {"numSteps": 2}},
        "spec-num-steps-match",
    ),
    Case(
        "rejection-sampling-override-differs",
        {"spec.decode.speculative": {"rejectionSampling": True}},
        "spec-rejection-sampling-match",
    ),
    Case(
        "draft-kv-dtype-override-differs",
        {"spec.prefill.speculative": {"draftKvCacheDtype": "fp8_e4m3"}},
        "spec-draft-kv-dtype-match",
    ),
    Case("eagle3-without-draft", {"spec.speculative.draftModel": DELETE}, "spec-draft-model-required"),
    Case(
        "eagle-without-draft",
        {"spec.speculative.algorithm": "EAGLE", "spec.speculative.draftModel": DELETE},
        "spec-draft-model-required",
    ),
    Case("backend-mori-on-0.5.2", {**V052, "spec.transfer": {"backend": "mori"}}, "transfer-backend-supported"),
    Case(
        "backend-mooncake-tcp-on-0.5.2",
        {**V052, "spec.transfer": {"backend": "mooncake_tcp"}},
        "transfer-backend-supported",
    ),
    Case("kv-bf16-on-0.5.2", {**V052, "spec.engine": {"kvCacheDtype": "bf16"}}, "engine-kv-cache-dtype-supported"),
    Case("cache-aware-router-on-0.5.2", {**V052, "spec.router": {"policy": "cache_aware"}}, "router-policy-supported"),
    Case("chain-draft-tokens-wrong", {"spec.speculative.numDraftTokens": 5}, "spec-num-draft-tokens-chain"),
    Case(
        "chain-draft-tokens-wrong-in-pool",
        {"spec.decode.speculative": {"numDraftTokens": 2}},
        "spec-num-draft-tokens-chain",
    ),
    Case("tree-without-draft-tokens", {"spec.speculative.eagleTopk": 4}, "spec-num-draft-tokens-required"),
    Case(
        "expected-accept-length-one",
        {"spec.speculative.expectedAcceptLength": 1.0},
        "spec-expected-accept-length-reachable",
    ),
    Case(
        "expected-accept-length-above-chain",
        {"spec.speculative.expectedAcceptLength": 4.5},
        "spec-expected-accept-length-reachable",
    ),
    Case(
        "expected-accept-length-above-tree-depth",
        {**TREE, "spec.speculative.expectedAcceptLength": 3.5, "spec.speculative.numSteps": 2},
        "spec-expected-accept-length-reachable",
    ),
    Case(
        "rejection-sampling-with-tree",
        {**TREE, "spec.speculative.rejectionSampling": True},
        "spec-rejection-sampling-topk",
    ),
    Case(
        "rejection-sampling-on-0.5.2",
        {**V052, "spec.speculative.rejectionSampling": True},
        "spec-rejection-sampling-version",
    ),
    Case("multi-layer-on-0.5.2", {**V052, "spec.speculative.multiLayer": True}, "spec-multi-layer-version"),
    Case(
        "draft-kv-dtype-on-0.5.2",
        {**V052, "spec.speculative.draftKvCacheDtype": "fp8_e4m3"},
        "spec-draft-kv-dtype-version",
    ),
    Case(
        "topk-over-buffer",
        {"spec.speculative.eagleTopk": 17, "spec.speculative.numDraftTokens": 32},
        "spec-topk-buffer-width",
    ),
    Case(
        "multi-layer-topk-times-steps-over-buffer",
        {
            "spec.speculative.multiLayer": True,
            "spec.speculative.eagleTopk": 4,
            "spec.speculative.numSteps": 5,
            "spec.speculative.numDraftTokens": 16,
        },
        "spec-topk-buffer-width",
    ),
    Case(
        "topk-over-declared-buffer-on-0.5.2",
        {
            **V052,
            "spec.sglang.topkBufferWidth": 8,
            "spec.speculative.eagleTopk": 10,
            "spec.speculative.numDraftTokens": 32,
        },
        "spec-topk-buffer-width",
    ),
    Case(
        "topk-over-declared-buffer",
        {"spec.sglang.topkBufferWidth": 8, "spec.speculative.eagleTopk": 10, "spec.speculative.numDraftTokens": 32},
        "spec-topk-buffer-width",
    ),
    Case("tree-with-trtllm-mha", {**TREE, "spec.engine": {"attentionBackend": "trtllm_mha"}}, "engine-topk-trtllm-mha"),
    Case("tree-paged-without-backend", {**TREE, "spec.engine": {"pageSize": 16}}, "engine-topk-paged-attention"),
    Case(
        "tree-paged-fa3-on-0.5.2",
        {**V052, **TREE, "spec.engine": {"pageSize": 16, "attentionBackend": "fa3"}},
        "engine-topk-paged-attention",
    ),
    Case("kv-checksum-on-0.5.2", {**V052, "spec.engine": {"kvChecksum": True}}, "engine-option-version"),
    Case(
        "allocation-policy-on-0.5.2",
        {**V052, "spec.engine": {"decodeAllocationPolicy": "early"}},
        "engine-option-version",
    ),
    Case(
        "ib-map-on-0.5.2",
        {**V052, **WHOLE_1GPU_NODES, "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0"}}}},
        "transfer-rdma-ib-map-version",
    ),
    Case(
        "ib-map-misses-a-gpu",
        {
            "spec.prefill": {"tensorParallelSize": 2, "resources": {"limits": {"nvidia.com/gpu": 2}}, "gpusPerNode": 2},
            "spec.decode.gpusPerNode": 1,
            "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0"}}},
        },
        "transfer-rdma-ib-map-covers-gpus",
    ),
    Case(
        "ib-map-misses-gpus-beyond-tp",
        {
            "spec.decode": {
                "tensorParallelSize": 1,
                "resources": {"limits": {"nvidia.com/gpu": "2"}},
                "gpusPerNode": 2,
            },
            "spec.prefill.gpusPerNode": 1,
            "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0"}}},
        },
        "transfer-rdma-ib-map-covers-gpus",
    ),
    Case(
        "ib-list-and-map",
        {**WHOLE_1GPU_NODES, "spec.transfer": {"rdma": {"ibDevices": ["mlx5_0"], "ibDevicesPerGpu": {"0": "mlx5_0"}}}},
        "transfer-rdma-ib-devices-exclusive",
    ),
    Case(
        # A 1-GPU pod on an 8-GPU node: container GPU 0 may be any of the node's GPUs.
        "ib-map-on-part-of-a-node",
        {"spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0"}}}},
        "transfer-rdma-ib-map-whole-node",
    ),
    Case(
        "ib-map-on-part-of-a-node-decode-only",
        {
            "spec.prefill.gpusPerNode": 1,
            "spec.decode": {"tensorParallelSize": 1, "gpusPerNode": 2},
            "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0", "1": "mlx5_1"}}},
        },
        "transfer-rdma-ib-map-whole-node",
    ),
    Case(
        "ib-map-with-auto-mapping",
        {
            **WHOLE_1GPU_NODES,
            "spec.transfer": {"rdma": {"ibDeviceMapping": "Auto", "ibDevicesPerGpu": {"0": "mlx5_0"}}},
        },
        "transfer-rdma-ib-map-static",
    ),
    Case("rdma-with-fake-backend", {"spec.transfer": {"backend": "fake", "rdma": {}}}, "transfer-rdma-backend"),
    Case("bootstrap-port-is-http-port", {"spec.transfer": {"bootstrapPort": 30000}}, "transfer-bootstrap-port-free"),
    Case(
        "hf-token-twice",
        {
            "spec.model.hfTokenSecretRef": {"name": "hf"},
            "spec.decode.env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k"}}}],
        },
        "model-hf-token-env",
    ),
    Case(
        "gpu-limit-fractional",
        {"spec.prefill": {"resources": {"limits": {"nvidia.com/gpu": "500m"}}}},
        "pool-gpu-count-whole",
        also=frozenset({"resource-quantities"}),
    ),
    Case(
        "gpus-below-tp",
        {"spec.decode": {"tensorParallelSize": 2, "resources": {"limits": {"nvidia.com/gpu": 1}}}},
        "pool-gpus-cover-tp",
    ),
    Case("tp-above-node", {"spec.prefill.tensorParallelSize": 16}, "pool-gpus-per-node"),
    # ---- multi-node pools (LeaderWorkerSet) ------------------------------------------------------------------------
    Case(
        "multi-node-tp-below-nodes-x-gpus",
        {"spec.prefill": {"tensorParallelSize": 8, "nodesPerInstance": 2}},
        "pool-multi-node-tp",
    ),
    Case(
        "multi-node-tp-above-nodes-x-gpus",
        {"spec.decode": {"tensorParallelSize": 16, "nodesPerInstance": 2, "gpusPerNode": 4}},
        "pool-multi-node-tp",
    ),
    Case(
        "multi-node-gpu-limit-is-the-server",
        {"spec.prefill": {**MULTI_NODE, "resources": {"limits": {"nvidia.com/gpu": 16}}}},
        "pool-multi-node-gpu-limit",
    ),
    Case(
        "multi-node-gpu-limit-below-node",
        {"spec.decode": {**MULTI_NODE, "resources": {"limits": {"nvidia.com/gpu": "4"}}}},
        "pool-multi-node-gpu-limit",
    ),
    Case(
        "multi-node-prefill-name-too-long",
        {"metadata.name": "a" * 31, "spec.prefill": MULTI_NODE},
        "name-length-multi-node",
    ),
    Case(
        "multi-node-decode-name-too-long",
        {"metadata.name": "a" * 32, "spec.decode": MULTI_NODE},
        "name-length-multi-node",
    ),
    Case(
        "multi-node-bootstrap-port-on-rendezvous",
        {"spec.prefill": MULTI_NODE, "spec.transfer": {"bootstrapPort": 20000}},
        "transfer-bootstrap-port-dist-init",
    ),
    Case(
        "host-network-0-5-2-two-pool-pods-on-one-node",
        {
            **V052,
            "spec.transfer": {"rdma": {"hostNetwork": True}},
            "spec.prefill.nodeSelector": {"kubernetes.io/hostname": "gpu-node-0"},
            "spec.decode.nodeSelector": {"kubernetes.io/hostname": "gpu-node-0"},
        },
        "transfer-host-network-shared-node",
    ),
    Case(
        "host-network-0-5-2-pool-replicas-on-one-node",
        {
            **V052,
            "spec.transfer": {"rdma": {"hostNetwork": True}},
            "spec.decode.replicas": 2,
            "spec.decode.nodeSelector": {"kubernetes.io/hostname": "gpu-node-0"},
        },
        "transfer-host-network-shared-node",
    ),
    Case(
        "multi-node-extra-args-port-on-rendezvous",
        {"spec.decode": {**MULTI_NODE, "extraArgs": ["--nccl-port", "20000"]}},
        "pool-extra-args-port",
    ),
    Case(
        "multi-node-nnodes-in-extra-args",
        {"spec.prefill": {**MULTI_NODE, "extraArgs": ["--nnodes", "2"]}},
        "pool-extra-args-forbidden",
    ),
    Case("max-unavailable-words", {"spec.decode.disruption": {"maxUnavailable": "half"}}, "disruption-max-unavailable"),
    Case(
        "max-unavailable-over-100", {"spec.router.disruption": {"maxUnavailable": "150%"}}, "disruption-max-unavailable"
    ),
    Case("max-unavailable-negative", {"spec.prefill.disruption": {"maxUnavailable": -1}}, "disruption-max-unavailable"),
    Case(
        "gpu-limit-above-node",
        {"spec.decode": {"tensorParallelSize": 4, "resources": {"limits": {"nvidia.com/gpu": 12}}}},
        "pool-gpus-per-node",
    ),
    Case(
        "tp-above-declared-node",
        {"spec.decode": {"tensorParallelSize": 8, "gpusPerNode": 4}},
        "pool-gpus-per-node",
    ),
    Case(
        "extra-args-speculative",
        {"spec.prefill.extraArgs": ["--speculative-num-steps", "4"]},
        "pool-extra-args-owned",
    ),
    Case("extra-args-tp-size-equals", {"spec.decode.extraArgs": ["--tp-size=2"]}, "pool-extra-args-owned"),
    Case("extra-args-model-path", {"spec.decode.extraArgs": ["--model-path", "x"]}, "pool-extra-args-owned"),
    Case(
        "extra-args-disaggregation",
        {"spec.prefill.extraArgs": ["--disaggregation-bootstrap-port=9000"]},
        "pool-extra-args-owned",
    ),
    Case("extra-args-port", {"spec.prefill.extraArgs": ["--port", "8080"]}, "pool-extra-args-owned"),
    Case(
        "env-sampling-mask",
        {"spec.decode.env": [{"name": "SGLANG_ENABLE_DISAGG_SAMPLING_MASK", "value": "1"}]},
        "pool-env-owned",
    ),
    Case(
        "env-value-and-value-from",
        {"spec.prefill.env": [{"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
        "env-value-exclusive",
    ),
    Case("volume-without-source", {"spec.model.volume": {"mountPath": "/models"}}, "model-volume-one-source"),
    Case(
        "volume-two-sources",
        {"spec.model.volume": {"hostPath": {"path": "/data"}, "persistentVolumeClaim": {"claimName": "w"}}},
        "model-volume-one-source",
    ),
    Case("absolute-path-without-volume", {"spec.model.path": "/models/llama"}, "model-local-path-volume"),
    # ---- caches (issue 17) -------------------------------------------------------------------------------------------
    Case("model-cache-without-source", {"spec.model.cache": {}}, "cache-one-source"),
    Case(
        "compile-cache-two-sources",
        {
            "spec.engine": {
                "compileCache": {"hostPath": {"path": "/nvme/jit"}, "persistentVolumeClaim": {"claimName": "j"}}
            }
        },
        "cache-one-source",
    ),
    Case(
        "model-cache-and-volume",
        {
            "spec.model.cache": {"persistentVolumeClaim": {"claimName": "hf-cache"}},
            "spec.model.volume": {"persistentVolumeClaim": {"claimName": "weights"}},
        },
        "model-cache-volume-exclusive",
    ),
    Case(
        "model-cache-hf-home-in-env",
        {
            "spec.model.cache": {"persistentVolumeClaim": {"claimName": "hf-cache"}},
            "spec.decode.env": [{"name": "HF_HUB_OFFLINE", "value": "0"}],
        },
        "model-cache-env",
    ),
    Case(
        "model-cache-modules-cache-in-env",
        {
            "spec.model.cache": {"hostPath": {"path": "/nvme/hf"}},
            "spec.prefill.env": [{"name": "HF_MODULES_CACHE", "value": "/model-cache/modules"}],
        },
        "model-cache-env",
    ),
    Case(
        "compile-cache-triton-in-env",
        {
            "spec.engine": {"compileCache": {"hostPath": {"path": "/nvme/jit"}}},
            "spec.prefill.env": [{"name": "TRITON_CACHE_DIR", "value": "/tmp/triton"}],
        },
        "compile-cache-env",
    ),
    Case(
        "model-cache-claim-uppercase",
        {"spec.model.cache": {"persistentVolumeClaim": {"claimName": "HF-Cache"}}},
        "object-name-form",
    ),
    Case(
        "compile-cache-relative-host-path",
        {"spec.engine": {"compileCache": {"hostPath": {"path": "nvme/jit"}}}},
        "model-host-path-form",
    ),
    # Python-only (webhook/reconcile): the API server accepts these.
    Case("extra-args-unknown-flag", {"spec.prefill.extraArgs": ["--no-such-flag"]}, "pool-extra-args-known"),
    Case("extra-args-abbreviated-flag", {"spec.decode.extraArgs": ["--chunked-prefill", "8"]}, "pool-extra-args-known"),
    Case(
        "extra-args-flag-of-other-release",
        {**V052, "spec.decode.extraArgs": ["--enable-multi-layer-eagle-foo"]},
        "pool-extra-args-known",
    ),
    # ---- content and shape (issue 15 B) ----------------------------------------------------------------------------
    Case("image-uppercase", {"spec.sglang.image": "DisaggSpec/SGLang:v0.5.23"}, "image-reference"),
    Case("image-short-digest", {"spec.sglang.image": "disaggspec/sglang@sha256:1234"}, "image-reference"),
    Case("router-image-space", {"spec.router": {"image": "sglang router:latest"}}, "image-reference"),
    Case("model-path-flag", {"spec.model.path": "-h"}, "model-path-form"),
    Case("model-path-url", {"spec.model.path": "https://huggingface.co/meta-llama/Llama-3.1-8B"}, "model-path-form"),
    Case(
        "model-path-dot-dot",
        {"spec.model.path": "/models/../etc", "spec.model.volume": {"persistentVolumeClaim": {"claimName": "w"}}},
        "model-path-form",
    ),
    Case(
        "draft-path-override-flag",
        {"spec.decode.speculative": {"draftModel": {"path": "--trust-remote-code"}}},
        "model-path-form",
        also=frozenset({"spec-draft-model-match"}),
    ),
    Case("model-revision-flag", {"spec.model.revision": "--port=1"}, "model-revision-form"),
    Case(
        "draft-revision-dot-dot",
        {"spec.speculative.draftModel": {"path": "a/b", "revision": "../main"}},
        "model-revision-form",
    ),
    Case("served-name-flag", {"spec.model.servedModelName": "-h"}, "model-served-name-form"),
    Case("pull-secret-name", {"spec.sglang.imagePullSecrets": [{"name": "Registry_Creds"}]}, "object-name-form"),
    Case(
        "claim-name",
        {"spec.model.volume": {"persistentVolumeClaim": {"claimName": "Model_Weights"}}},
        "object-name-form",
    ),
    Case("hf-secret-name", {"spec.model.hfTokenSecretRef": {"name": "HF_Token"}}, "object-name-form"),
    Case(
        "env-secret-name",
        {"spec.decode.env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "My_Secret", "key": "k"}}}]},
        "object-name-form",
    ),
    Case("host-path-dot-dot", {"spec.model.volume": {"hostPath": {"path": "/data/../etc"}}}, "model-host-path-form"),
    Case(
        "mount-at-dev-shm",
        {"spec.model.volume": {"persistentVolumeClaim": {"claimName": "w"}, "mountPath": "/dev/shm"}},
        "model-mount-path-form",
    ),
    Case(
        "mount-trailing-slash",
        {"spec.model.volume": {"persistentVolumeClaim": {"claimName": "w"}, "mountPath": "/models/"}},
        "model-mount-path-form",
    ),
    Case(
        "mount-at-root",
        {"spec.model.volume": {"persistentVolumeClaim": {"claimName": "w"}, "mountPath": "/"}},
        "model-mount-path-form",
    ),
    Case("rdma-resource-no-domain", {"spec.transfer": {"rdma": {"resources": {"rdma": 1}}}}, "transfer-rdma-resources"),
    Case(
        "rdma-resource-is-gpu",
        {"spec.transfer": {"rdma": {"resources": {"nvidia.com/gpu": 1}}}},
        "transfer-rdma-resources",
    ),
    Case(
        "rdma-resource-fraction",
        {"spec.transfer": {"rdma": {"resources": {"rdma/hca_shared_devices_a": "1.5"}}}},
        "transfer-rdma-resources",
    ),
    Case(
        "rdma-resource-zero",
        {"spec.transfer": {"rdma": {"resources": {"rdma/hca_shared_devices_a": 0}}}},
        "transfer-rdma-resources",
    ),
    Case(
        "ib-map-key-leading-zero",
        {**WHOLE_1GPU_NODES, "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0", "00": "mlx5_1"}}}},
        "transfer-rdma-ib-map-keys",
    ),
    Case(
        "ib-map-key-word",
        {**WHOLE_1GPU_NODES, "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0", "gpu1": "mlx5_1"}}}},
        "transfer-rdma-ib-map-keys",
    ),
    Case(
        "env-cuda-visible-devices",
        {"spec.decode.env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "1"}]},
        "pool-env-owned",
    ),
    Case(
        "env-nvidia-visible-devices",
        {"spec.prefill.env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
        "pool-env-owned",
    ),
    Case(
        "env-mooncake-with-rdma",
        {"spec.transfer": {"rdma": {}}, "spec.decode.env": [{"name": "MC_FORCE_TCP", "value": "true"}]},
        "pool-env-rdma-owned",
    ),
    Case(
        "env-ucx-with-rdma",
        {
            "spec.transfer": {"backend": "nixl", "rdma": {}},
            "spec.prefill.env": [{"name": "UCX_NET_DEVICES", "value": "eth0"}],
        },
        "pool-env-rdma-owned",
    ),
    Case(
        "env-nccl-ib-with-rdma",
        {"spec.transfer": {"rdma": {}}, "spec.prefill.env": [{"name": "NCCL_IB_HCA", "value": "mlx5_9"}]},
        "pool-env-rdma-owned",
    ),
    Case("env-value-from-empty", {"spec.prefill.env": [{"name": "FOO", "valueFrom": {}}]}, "env-value-from-one-source"),
    Case(
        "env-value-from-two-sources",
        {
            "spec.decode.env": [
                {
                    "name": "FOO",
                    "valueFrom": {
                        "secretKeyRef": {"name": "s", "key": "k"},
                        "configMapKeyRef": {"name": "c", "key": "k"},
                    },
                }
            ]
        },
        "env-value-from-one-source",
    ),
    Case(
        "tp-not-dividing",
        {"spec.prefill": {"tensorParallelSize": 2}, "spec.decode": {"tensorParallelSize": 3}},
        "transfer-tp-divisible",
    ),
    Case(
        "tp-attention-not-dividing",
        {"spec.prefill": _par(4, dataParallelAttention={"size": 2}), "spec.decode": _par(3)},
        "transfer-tp-divisible",
    ),
    Case(
        "tp-whole-not-dividing-on-0.5.2",
        {
            "spec.sglang.version": "0.5.2",
            "spec.engine": {"pageSize": 64},
            "spec.prefill": {
                **_par(32, dataParallelAttention={"size": 32}),
                "nodesPerInstance": 4,
                "extraArgs": ["--load-balance-method", "round_robin", "--chunked-prefill-size", "393216"],
            },
            "spec.decode": {
                **_par(72, dataParallelAttention={"size": 72}),
                "nodesPerInstance": 9,
                "extraArgs": ["--chunked-prefill-size", "294912"],
            },
            "spec.transfer": {"bootstrapPort": 30400},
        },
        "transfer-tp-divisible",
    ),
    Case("router-port-is-metrics-port", {"spec.router": {"port": 29000}}, "router-port-free"),
    Case("resource-name-space", {"spec.prefill.resources": {"limits": {"fast gpu": 1}}}, "resource-names"),
    Case(
        "resource-kubernetes-io",
        {"spec.decode.resources": {"requests": {"kubernetes.io/x": 1}}},
        "resource-names",
        also=frozenset({"resource-extended-request-limited"}),
    ),
    Case("limit-not-a-quantity", {"spec.prefill.resources": {"limits": {"memory": "lots"}}}, "resource-quantities"),
    Case("limit-negative", {"spec.prefill.resources": {"limits": {"cpu": "-1"}}}, "resource-quantities"),
    Case(
        "router-limit-not-a-quantity",
        {"spec.router": {"resources": {"limits": {"memory": "1.5.5Gi"}}}},
        "resource-quantities",
    ),
    Case(
        "extended-limit-fraction",
        {"spec.decode.resources": {"limits": {"example.com/fpga": "0.5"}}},
        "resource-quantities",
    ),
    Case(
        "request-above-limit",
        {"spec.decode.resources": {"limits": {"memory": "1Gi"}, "requests": {"memory": "10Gi"}}},
        "resource-request-within-limit",
    ),
    Case(
        "router-request-above-limit",
        {"spec.router": {"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "4"}}}},
        "resource-request-within-limit",
    ),
    Case(
        "extended-request-without-limit",
        {"spec.prefill.resources": {"requests": {"example.com/nic": 1}}},
        "resource-extended-request-limited",
    ),
    Case(
        "hugepages-without-cpu-or-memory",
        {"spec.prefill.resources": {"limits": {"hugepages-2Mi": "1Gi"}}},
        "resource-hugepages-cpu-memory",
    ),
    Case("pod-label-key-space", {"spec.prefill.podLabels": {"team name": "infra"}}, "pool-pod-labels"),
    Case("pod-label-value-dash", {"spec.decode.podLabels": {"team": "-infra"}}, "pool-pod-labels"),
    Case("pod-annotation-key-space", {"spec.prefill.podAnnotations": {"my note": "x"}}, "pool-pod-annotations"),
    Case(
        "node-selector-value-slash",
        {"spec.prefill.nodeSelector": {"kubernetes.io/hostname": "rack/1"}},
        "pool-node-selector",
    ),
    Case("node-selector-key-empty", {"spec.decode.nodeSelector": {"": "x"}}, "pool-node-selector"),
    Case(
        "toleration-key-space",
        {"spec.prefill.tolerations": [{"key": "gpu type", "operator": "Exists"}]},
        "pool-toleration-key",
    ),
    Case(
        "toleration-exists-with-value",
        {"spec.decode.tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "value": "true"}]},
        "pool-toleration-exists-value",
    ),
    Case(
        "toleration-empty-key-equal",
        {"spec.prefill.tolerations": [{"operator": "Equal", "value": "x"}]},
        "pool-toleration-empty-key",
    ),
    Case(
        "toleration-seconds-without-no-execute",
        {
            "spec.prefill.tolerations": [
                {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}
            ]
        },
        "pool-toleration-seconds",
    ),
    Case(
        "affinity-in-without-values",
        {
            "spec.prefill.affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In"}]}]
                    }
                }
            }
        },
        "pool-affinity-values",
    ),
    Case(
        "anti-affinity-exists-with-values",
        {
            "spec.decode.affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]
                            },
                        }
                    ]
                }
            }
        },
        "pool-affinity-values",
    ),
    Case(
        "affinity-key-space",
        {
            "spec.prefill.affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "preference": {"matchExpressions": [{"key": "gpu type", "operator": "Exists"}]}}
                    ]
                }
            }
        },
        "pool-affinity-key",
    ),
    # ---- extraArgs against the parser (issue 15 A) ----------------------------------------------------------------
    # One case per hole of e2e/adversarial/corpus.py's classes owned-side-door (its extraArgs entries),
    # per-pool-compute and gpu-port-arithmetic (its extraArgs entries). Of these rules only pool-extra-args-owned has
    # CEL (on both pools and spec.engine); the others need the flag tables and run in the webhook and reconcile.
    Case(
        "extra-args-alias-of-owned",
        {"spec.decode.extraArgs": ["--speculative-draft-model", "x/y"]},
        "pool-extra-args-owned",
    ),
    Case("extra-args-owned-in-engine", {"spec.engine.extraArgs": ["--tp-size", "2"]}, "pool-extra-args-owned"),
    Case(
        "extra-args-tokenizer-path-has-a-field",
        {"spec.decode.extraArgs": ["--tokenizer-path", "t/t"]},
        "pool-extra-args-must-match",
    ),
    Case(
        "extra-args-context-length-has-a-field",
        {"spec.decode.extraArgs": ["--context-length", "2048"]},
        "pool-extra-args-must-match",
    ),
    Case(
        "extra-args-token-map-has-a-field",
        {"spec.prefill.extraArgs": ["--speculative-token-map", "m/freq.pt"]},
        "pool-extra-args-must-match",
    ),
    Case(
        "extra-args-alias-of-forbidden",
        {"spec.prefill.extraArgs": ["--nccl-init-addr", "10.0.0.1:5000"]},
        "pool-extra-args-forbidden",
    ),
    Case("extra-args-single-dash-help", {"spec.prefill.extraArgs": ["-h"]}, "pool-extra-args-known"),
    Case("extra-args-lone-dash", {"spec.decode.extraArgs": ["-"]}, "pool-extra-args-known"),
    Case(
        "extra-args-positional",
        {"spec.prefill.extraArgs": ["meta-llama/Llama-3.1-70B-Instruct"]},
        "pool-extra-args-known",
    ),
    Case(
        "extra-args-option-smuggled-in-a-value",
        {"spec.prefill.extraArgs": ["--chunked-prefill-size=4096 --tp-size=2"]},
        "pool-extra-args-known",
    ),
    Case(
        "extra-args-value-not-a-choice",
        {"spec.engine.extraArgs": ["--tokenizer-mode", "fastest"]},
        "pool-extra-args-known",
    ),
    Case(
        "extra-args-value-read-as-option",
        {"spec.engine.extraArgs": ["--load-format", "--skip-tokenizer-init"]},
        "pool-extra-args-known",
    ),
    Case(
        "extra-args-config-file",
        {"spec.prefill.extraArgs": ["--config", "/models/override.yaml"]},
        "pool-extra-args-forbidden",
    ),
    Case(
        "extra-args-tokenizer-mode-in-a-pool",
        {"spec.prefill.extraArgs": ["--tokenizer-mode", "slow"]},
        "pool-extra-args-must-match",
    ),
    Case(
        "extra-args-load-format-in-a-pool",
        {"spec.decode.extraArgs": ["--load-format=dummy"]},
        "pool-extra-args-must-match",
    ),
    Case(
        "extra-args-model-override-in-a-pool",
        {"spec.decode.extraArgs": ['--json-model-override-args={"num_key_value_heads": 4}']},
        "pool-extra-args-must-match",
    ),
    Case(
        "extra-args-fp32-lm-head-in-a-pool",
        {"spec.prefill.extraArgs": ["--enable-fp32-lm-head"]},
        "pool-extra-args-must-match",
    ),
    Case(
        "extra-args-per-phase-attention-backend",
        {"spec.decode.extraArgs": ["--decode-attention-backend", "triton"]},
        "pool-extra-args-forbidden",
    ),
    Case("extra-args-dp-attention", {"spec.decode.extraArgs": ["--enable-dp-attention"]}, "pool-extra-args-owned"),
    Case(
        "extra-args-pipeline-size-alias",
        {"spec.decode.extraArgs": ["--pipeline-parallel-size", "2"]},
        "pool-extra-args-forbidden",
    ),
    Case("extra-args-base-gpu-id", {"spec.decode.extraArgs": ["--base-gpu-id", "1"]}, "pool-extra-args-forbidden"),
    Case(
        "extra-args-data-parallel-alias",
        {"spec.prefill.extraArgs": ["--data-parallel-size", "2"]},
        "pool-extra-args-forbidden",
    ),
    Case("extra-args-ep-owned", {"spec.decode.extraArgs": ["--ep", "2"]}, "pool-extra-args-owned"),
    Case(
        "extra-args-moe-dp-not-dividing-tp",
        {"spec.decode.extraArgs": ["--moe-dp-size", "2"]},
        "pool-extra-args-parallel-size",
    ),
    Case(
        "extra-args-cp-not-dividing-tp",
        {"spec.prefill": {"tensorParallelSize": 4, "extraArgs": ["--attention-context-parallel-size", "3"]}},
        "pool-extra-args-parallel-size",
    ),
    Case(
        "extra-args-nccl-port-is-bootstrap-port",
        {"spec.prefill.extraArgs": ["--nccl-port", "8998"]},
        "pool-extra-args-port",
    ),
    Case(
        "extra-args-grpc-port-is-http-port", {"spec.decode.extraArgs": ["--grpc-port", "30000"]}, "pool-extra-args-port"
    ),
    Case(
        "extra-args-two-ports-clash",
        {
            "spec.engine.extraArgs": ["--nccl-port", "9000"],
            "spec.decode.extraArgs": ["--engine-info-bootstrap-port=9000"],
        },
        "pool-extra-args-port",
    ),
    Case(
        "extra-args-beside-its-typed-field",
        {"spec.speculative.tokenMap": "m/freq.pt", "spec.engine.extraArgs": ["--speculative-token-map", "m/freq.pt"]},
        "pool-extra-args-must-match",
    ),
    Case("engine-quantization-unknown", {"spec.engine.quantization": "int3-magic"}, "engine-quantization-supported"),
    # ---- issue 16: the draft-proposal opt-in and the Rust bootstrap registry ------------------------------------
    Case(
        "transfer-draft-probs-without-rejection-sampling",
        {"spec.speculative.transferDraftProbs": True},
        "spec-transfer-draft-probs-rejection-sampling",
    ),
    Case(
        "env-transfer-draft-probs",
        {"spec.prefill.env": [{"name": "SGLANG_DISAGG_TRANSFER_DRAFT_PROBS", "value": "1"}]},
        "pool-env-owned",
    ),
    Case("env-rust-server", {"spec.decode.env": [{"name": "SGLANG_RUST_SERVER", "value": "1"}]}, "pool-env-owned"),
    # ---- rollout -------------------------------------------------------------------------------------------------
    Case("rollout-no-budget", {"spec.rollout": {"maxSurge": 0, "maxUnavailable": 0}}, "rollout-budget"),
    Case("rollout-no-surge-default-unavailable", {"spec.rollout": {"maxSurge": 0}}, "rollout-budget"),
    # ---- autoscaling ---------------------------------------------------------------------------------------------
    Case(
        "autoscaling-min-above-max",
        {"spec.autoscaling": _scaling(decode={"minReplicas": 4, "maxReplicas": 2})},
        "autoscaling-limits-ordered",
        also=frozenset({"autoscaling-initial-replicas"}),
    ),
    Case("autoscaling-planner-missing", {"spec.autoscaling": _scaling(mode="Planner")}, "autoscaling-planner-mode"),
    Case(
        "autoscaling-planner-with-external",
        {"spec.autoscaling": _scaling(planner=_PLANNER)},
        "autoscaling-planner-mode",
    ),
    Case(
        "autoscaling-ratio-band-inverted",
        {
            "spec.autoscaling": _scaling(
                mode="Planner", planner={**_PLANNER, "prefillDecodeRatio": {"min": 2, "max": 1}}
            )
        },
        "autoscaling-ratio-band",
    ),
    Case(
        "autoscaling-initial-replicas-above-max",
        {"spec.autoscaling": _scaling(decode={"maxReplicas": 2}), "spec.decode.replicas": 3},
        "autoscaling-initial-replicas",
    ),
    Case(
        "autoscaling-initial-replicas-below-min",
        {"spec.autoscaling": _scaling(prefill={"minReplicas": 2, "maxReplicas": 4})},
        "autoscaling-initial-replicas",
    ),
    *PARALLELISM_CASES,
)


SCHEMA_CASES: Final[tuple[Case, ...]] = (
    Case(
        "autoscaling-ratio-above-bound",
        {"spec.autoscaling": _scaling(mode="Planner", planner={**_PLANNER, "prefillDecodeRatio": {"min": 65}})},
        schema_error="less than or equal to 64",
    ),
    Case("autoscaling-mode-unknown", {"spec.autoscaling": _scaling(mode="Keda")}, schema_error="Unsupported value"),
    Case(
        "autoscaling-max-missing",
        {"spec.autoscaling": {"mode": "External", "prefill": {}, "decode": {}}},
        schema_error="Required value",
    ),
    Case(
        "parallelism-dp-size-one",
        {"spec.prefill": _par(8, dataParallelAttention={"size": 1})},
        schema_error="should be greater than or equal to 2",
    ),
    Case(
        "parallelism-backend-unknown",
        {"spec.decode": _par(8, expertParallel={"size": 8, "backend": "pplx"})},
        schema_error='Unsupported value: "pplx"',
    ),
    Case("algorithm-unknown", {"spec.speculative.algorithm": "MEDUSA"}, schema_error='Unsupported value: "MEDUSA"'),
    Case("version-unsupported", {"spec.sglang.version": "0.5.9"}, schema_error='Unsupported value: "0.5.9"'),
    Case("topk-zero", {"spec.speculative.eagleTopk": 0}, schema_error="should be greater than or equal to 1"),
    Case("steps-zero", {"spec.speculative.numSteps": 0}, schema_error="should be greater than or equal to 1"),
    Case(
        "expected-accept-length-below-one",
        {"spec.speculative.expectedAcceptLength": 0.9},
        schema_error="should be greater than or equal to 1",
    ),
    Case(
        "bootstrap-port-high", {"spec.transfer": {"bootstrapPort": 70000}}, schema_error="less than or equal to 65535"
    ),
    Case("model-missing", {"spec.model": DELETE}, schema_error="Required value"),
    Case("speculative-missing", {"spec.speculative": DELETE}, schema_error="Required value"),
    Case(
        "unknown-field",
        {"spec.speculative.draftTokens": 3},
        schema_error='unknown field "spec.speculative.draftTokens"',
    ),
    Case(
        "router-policy-unknown",
        {"spec.router": {"policy": "least_load"}},
        schema_error='Unsupported value: "least_load"',
    ),
    Case("backend-unknown", {"spec.transfer": {"backend": "tcp"}}, schema_error='Unsupported value: "tcp"'),
    Case("replicas-negative", {"spec.decode.replicas": -1}, schema_error="greater than or equal to 0"),
    Case(
        "startup-seconds-too-short",
        {"spec.prefill.lifecycle": {"startupSeconds": 10}},
        schema_error="greater than or equal to 60",
    ),
    Case(
        "drain-seconds-too-short",
        {"spec.decode.lifecycle": {"drainSeconds": 5}},
        schema_error="greater than or equal to 30",
    ),
    Case("spread-unknown", {"spec.router.spread": "Always"}, schema_error='Unsupported value: "Always"'),
    Case(
        "priority-class-not-a-name",
        {"spec.prefill.priorityClassName": "High_Priority"},
        schema_error="should match",
    ),
    Case(
        "network-bad-name",
        {"spec.transfer": {"rdma": {"networks": ["Bad_Name"]}}},
        schema_error="should match",
    ),
    Case("tp-too-large", {"spec.prefill.tensorParallelSize": 2048}, schema_error="less than or equal to 1024"),
    Case("nodes-per-instance-zero", {"spec.decode.nodesPerInstance": 0}, schema_error="greater than or equal to 1"),
    Case("nodes-per-instance-too-many", {"spec.prefill.nodesPerInstance": 65}, schema_error="less than or equal to 64"),
    # ---- content and shape (issue 15 B) ----------------------------------------------------------------------------
    # Env names: what the API server accepts (printable ASCII but '='), so '=', a control character, a non-ASCII
    # letter and the empty name are refused at the CRD.
    Case("env-name-equals", {"spec.prefill.env": [{"name": "A=B", "value": "1"}]}, schema_error="should match"),
    Case("env-name-tab", {"spec.decode.env": [{"name": "A\tB", "value": "1"}]}, schema_error="should match"),
    Case("env-name-non-ascii", {"spec.decode.env": [{"name": "CAF\u00c9", "value": "1"}]}, schema_error="should match"),
    Case("env-name-empty", {"spec.prefill.env": [{"name": "", "value": "1"}]}, schema_error="at least 1 chars long"),
    Case(
        "env-value-from-unknown-source",
        {"spec.prefill.env": [{"name": "FOO", "valueFrom": {"vaultRef": {"path": "x"}}}]},
        schema_error='unknown field "spec.prefill.env[0].valueFrom.vaultRef"',
    ),
    Case(
        "env-field-ref-path",
        {"spec.decode.env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.gpuName"}}}]},
        schema_error="should match",
    ),
    Case(
        "env-resource-field-ref-gpu",
        {"spec.prefill.env": [{"name": "G", "valueFrom": {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}}}]},
        schema_error='Unsupported value: "limits.nvidia.com/gpu"',
    ),
    Case(
        "env-config-map-ref-no-key",
        {"spec.prefill.env": [{"name": "F", "valueFrom": {"configMapKeyRef": {"name": "c"}}}]},
        schema_error="Required value",
    ),
    Case(
        "env-secret-key-space",
        {"spec.decode.env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "key": "a key"}}}]},
        schema_error="should match",
    ),
    Case(
        "toleration-operator",
        {"spec.prefill.tolerations": [{"key": "g", "operator": "Contains"}]},
        schema_error="Unsupported value",
    ),
    Case(
        "toleration-effect",
        {"spec.decode.tolerations": [{"key": "g", "effect": "Sometimes"}]},
        schema_error="Unsupported value",
    ),
    Case(
        "toleration-unknown-field",
        {"spec.decode.tolerations": [{"keyy": "nvidia.com/gpu", "operator": "Exists"}]},
        schema_error='unknown field "spec.decode.tolerations[0].keyy"',
    ),
    Case(
        "toleration-seconds-string",
        {
            "spec.decode.tolerations": [
                {"key": "g", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "ten"}
            ]
        },
        schema_error="must be of type integer",
    ),
    Case(
        "affinity-unknown-kind",
        {"spec.decode.affinity": {"gpuAffinity": {"preferred": True}}},
        schema_error='unknown field "spec.decode.affinity.gpuAffinity"',
    ),
    Case(
        "affinity-not-an-object",
        {"spec.prefill.affinity": {"nodeAffinity": ["h100"]}},
        schema_error="must be of type object",
    ),
    Case("ib-device-flag", {"spec.transfer": {"rdma": {"ibDevices": ["-h"]}}}, schema_error="should match"),
    Case(
        "affinity-no-terms",
        {
            "spec.prefill.affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
            }
        },
        schema_error="should have at least 1 items",
    ),
    Case(
        "anti-affinity-without-topology-key",
        {
            "spec.decode.affinity": {
                "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}
            }
        },
        schema_error="Required value",
    ),
    Case(
        "affinity-weight-zero",
        {
            "spec.decode.affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}
                    ]
                }
            }
        },
        schema_error="should be greater than or equal to 1",
    ),
    Case("node-selector-value-too-long", {"spec.prefill.nodeSelector": {"k": "v" * 64}}, schema_error="Too long"),
    Case("rollout-surge-negative", {"spec.rollout": {"maxSurge": -1}}, schema_error="greater than or equal to 0"),
    Case("rollout-skew-over-one", {"spec.rollout": {"maxSkew": 1.5}}, schema_error="less than or equal to 1"),
    Case(
        "rollout-deadline-too-short",
        {"spec.rollout": {"progressDeadlineSeconds": 10}},
        schema_error="greater than or equal to 30",
    ),
    Case(
        "rollout-unknown-field",
        {"spec.rollout": {"strategy": "Recreate"}},
        schema_error='unknown field "spec.rollout.strategy"',
    ),
)

VALID_CASES: Final[tuple[Case, ...]] = (
    Case("base", {}),
    Case("autoscaling-external", {"spec.autoscaling": _scaling(), "spec.decode.replicas": 4}),
    Case(
        "autoscaling-planner",
        {
            "spec.autoscaling": _scaling(
                mode="Planner", planner={**_PLANNER, "prefillDecodeRatio": {"min": 0.25, "max": 1}}
            )
        },
    ),
    Case(
        "parallelism-dp-ep-different-layouts",
        {
            "spec.engine": {"pageSize": 64},
            "spec.prefill": _par(
                8,
                dataParallelAttention={"size": 8},
                expertParallel={"size": 8, "backend": "deepep", "deepepMode": "normal"},
                denseMlpTpSize=8,
                dpLmHead=True,
                twoBatchOverlap=True,
                eplb={"redundantExperts": 16},
            ),
            "spec.decode": _par(
                4, dataParallelAttention={"size": 2}, expertParallel={"size": 4}, denseMlpTpSize=1, twoBatchOverlap=True
            ),
        },
    ),
    # The SGLang team's 4 + 9 node deployment: attention TP 1 on both sides, whole TPs 32 and 72 (0.5.23 only).
    Case(
        "parallelism-blog-layout-4-plus-9-nodes",
        {
            "spec.engine": {"pageSize": 64},
            "spec.prefill": {**_par(32, dataParallelAttention={"size": 32}), "nodesPerInstance": 4},
            "spec.decode": {**_par(72, dataParallelAttention={"size": 72}), "nodesPerInstance": 9},
            "spec.transfer": {"bootstrapPort": 30400},
        },
    ),
    Case(
        "parallelism-dp-on-0.5.2-round-robin",
        {
            "spec.sglang.version": "0.5.2",
            "spec.engine": {"pageSize": 64},
            "spec.prefill": {**DP8, "extraArgs": ["--load-balance-method", "round_robin"]},
            "spec.decode": _par(8, dataParallelAttention={"size": 4}, expertParallel={"size": 8, "backend": "deepep"}),
            "spec.transfer": {"bootstrapPort": 30250},
        },
    ),
    # Env names Kubernetes accepts (1.32+; the first two on every supported release) but a C identifier would not.
    Case(
        "env-names-beyond-c-identifiers",
        {
            "spec.prefill.env": [{"name": "my.dotted-name", "value": "1"}, {"name": "MY-VAR", "value": "2"}],
            "spec.decode.env": [{"name": "1st var (x)", "value": "3"}],
        },
    ),
    Case("expected-accept-length", {"spec.speculative.expectedAcceptLength": 3.2}),
    Case("expected-accept-length-tree", {**TREE, "spec.speculative.expectedAcceptLength": 4.0}),
    Case(
        "caches",
        {
            "spec.model.cache": {"persistentVolumeClaim": {"claimName": "hf-cache"}},
            "spec.engine": {"compileCache": {"hostPath": {"path": "/nvme/jit"}}},
            "spec.decode.env": [{"name": "HF_TOKEN_PATH", "value": "/x"}],
        },
    ),
    Case("node-local-model-cache", {"spec.model.cache": {"hostPath": {"path": "/nvme/hf"}}}),
    Case("sixteen-gpu-nodes", {"spec.prefill": {"tensorParallelSize": 16, "gpusPerNode": 16}}),
    Case(
        "production-pool-settings",
        {
            "spec.decode": {
                "tensorParallelSize": 1,
                "lifecycle": {"startupSeconds": 7200, "drainSeconds": 1800},
                "disruption": {"maxUnavailable": "25%"},
                "priorityClassName": "llm-serving",
                "spread": "Required",
            },
            "spec.router": {"disruption": {"maxUnavailable": 0}, "spread": "Off"},
        },
    ),
    Case(
        "transfer-draft-probs-with-rejection-sampling",
        {"spec.speculative.transferDraftProbs": True, "spec.speculative.rejectionSampling": True},
    ),
    Case("cache-aware-router-on-0.5.23", {"spec.router": {"policy": "cache_aware"}}),
    Case("round-robin-router-on-0.5.2", {**V052, "spec.router": {"policy": "round_robin"}}),
    Case("rollout-in-place", {"spec.rollout": {"maxSurge": 0, "maxUnavailable": 1}}),
    Case(
        "rollout-all-fields",
        {"spec.rollout": {"maxSurge": 2, "maxUnavailable": 1, "maxSkew": 0.5, "progressDeadlineSeconds": 1800}},
    ),
    Case("rollout-unavailable-only", {"spec.rollout": {"maxUnavailable": 1}}),
    Case("pool-restates-shared", {"spec.decode.speculative": {"algorithm": "EAGLE3", "numSteps": 3, "eagleTopk": 1}}),
    Case("nextn-without-draft", {"spec.speculative.algorithm": "NEXTN", "spec.speculative.draftModel": DELETE}),
    Case("num-steps-may-differ-without-multi-layer", {"spec.decode.speculative": {"numSteps": 2}}),
    Case(
        "wide-topk-on-patched-0.5.2", {**V052, "spec.speculative.eagleTopk": 17, "spec.speculative.numDraftTokens": 32}
    ),
    Case(
        "declared-buffer-fits",
        {"spec.sglang.topkBufferWidth": 32, "spec.speculative.eagleTopk": 17, "spec.speculative.numDraftTokens": 32},
    ),
    Case(
        "tree-paged-flashinfer-on-0.5.2",
        {**V052, **TREE, "spec.engine": {"pageSize": 16, "attentionBackend": "flashinfer"}},
    ),
    Case(
        "extra-args-unowned",
        {"spec.prefill.extraArgs": ["--chunked-prefill-size=8192", "--mem-fraction-static", "0.8"]},
    ),
    Case(
        "ib-map-covers",
        {
            "spec.prefill": {"tensorParallelSize": 2, "gpusPerNode": 2},
            "spec.decode.gpusPerNode": 1,
            "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0", "1": "mlx5_1"}}},
        },
    ),
    Case("ib-auto-among-allowed", {"spec.transfer": {"rdma": {"ibDeviceMapping": "Auto", "ibDevices": ["mlx5_0"]}}}),
    Case(
        "ib-static-list-on-part-of-a-node",
        {"spec.transfer": {"rdma": {"ibDeviceMapping": "Static", "ibDevices": ["mlx5_0"]}}},
    ),
    Case(
        "ib-static-map-explicit-on-whole-nodes",
        {
            **WHOLE_1GPU_NODES,
            "spec.transfer": {"rdma": {"ibDeviceMapping": "Static", "ibDevicesPerGpu": {"0": "mlx5_0"}}},
        },
    ),
    # ---- content and shape (issue 15 B) ----------------------------------------------------------------------------
    Case(
        "content-and-shape-in-range",
        {
            "spec.sglang": {
                "image": "registry.example.com:5000/team/sglang:v0.5.23-disaggspec@sha256:" + "a" * 64,
                "version": "0.5.23",
                "imagePullSecrets": [{"name": "registry-creds"}],
            },
            "spec.model": {
                "path": "/models/hub/models--meta-llama--Llama-3.1-8B-Instruct",
                "revision": "refs/pr/1",
                "servedModelName": "llama-3.1-8b",
                "volume": {"persistentVolumeClaim": {"claimName": "model-weights"}, "mountPath": "/models"},
                "hfTokenSecretRef": {"name": "hf-token", "key": "token"},
            },
            "spec.prefill": {
                "tensorParallelSize": 2,
                "gpusPerNode": 2,
                "resources": {
                    "limits": {"cpu": "8", "memory": "64Gi", "hugepages-2Mi": "1Gi", "example.com/nic": 1},
                    "requests": {"cpu": "500m", "memory": "32Gi", "example.com/nic": "1"},
                },
                "podLabels": {"example.com/team": "ml-infra", "tier": ""},
                "podAnnotations": {"Example.COM/Note": "anything goes here"},
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "tolerations": [
                    {"operator": "Exists"},
                    {"key": "nvidia.com/gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"},
                    {
                        "key": "node.kubernetes.io/unreachable",
                        "operator": "Exists",
                        "effect": "NoExecute",
                        "tolerationSeconds": 30,
                    },
                ],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]}
                                    ]
                                }
                            ]
                        }
                    },
                    "podAntiAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 100,
                                "podAffinityTerm": {
                                    "topologyKey": "kubernetes.io/hostname",
                                    "labelSelector": {"matchLabels": {"disaggspec.io/role": "prefill"}},
                                },
                            }
                        ]
                    },
                },
                "env": [
                    {"name": "NCCL_DEBUG", "value": "INFO"},
                    {
                        "name": "POD_TEAM",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['example.com/team']"}},
                    },
                    {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "CFG", "valueFrom": {"configMapKeyRef": {"name": "sglang.cfg", "key": "a.b-c_d"}}},
                ],
            },
            "spec.decode": {"tensorParallelSize": 4, "gpusPerNode": 4},
            "spec.transfer": {
                "rdma": {
                    "resources": {"rdma/hca_shared_devices_a": 1, "example.com/ib": "2"},
                    "ibDevicesPerGpu": {"0": "mlx5_0", "1": "mlx5_0", "2": "mlx5_1", "3": "mlx5_1"},
                }
            },
            "spec.router": {"port": 8080, "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "1500m"}}},
        },
    ),
    Case("env-mooncake-without-rdma", {"spec.decode.env": [{"name": "MC_TE_METRIC", "value": "1"}]}),
    Case("tp-multiples", {"spec.prefill": {"tensorParallelSize": 8}, "spec.decode": {"tensorParallelSize": 2}}),
    # ---- multi-node pools (LeaderWorkerSet) ------------------------------------------------------------------------
    Case("multi-node-prefill", {"metadata.name": "a" * 30, "spec.prefill": MULTI_NODE}),
    Case("multi-node-decode-name-at-its-limit", {"metadata.name": "a" * 31, "spec.decode": MULTI_NODE}),
    Case(
        "multi-node-both-with-whole-node-limits",
        {
            "spec.prefill": {**MULTI_NODE, "resources": {"limits": {"nvidia.com/gpu": 8}}},
            "spec.decode": {"tensorParallelSize": 32, "nodesPerInstance": 8, "gpusPerNode": 4},
        },
    ),
    Case(
        "multi-node-rdma-static-map-whole-nodes",
        {
            "spec.prefill": {"tensorParallelSize": 4, "nodesPerInstance": 2, "gpusPerNode": 2},
            "spec.decode": {"tensorParallelSize": 2, "gpusPerNode": 2},
            "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0", "1": "mlx5_1"}}},
        },
    ),
    Case("rendezvous-port-free-on-one-node", {"spec.transfer": {"bootstrapPort": 20000}}),
    Case("nccl-port-20000-on-one-node", {"spec.decode.extraArgs": ["--nccl-port", "20000"]}),
    # ---- extraArgs against the parser (issue 15 A) ----------------------------------------------------------------
    Case(
        "decode-polling-interval-per-pool", {"spec.decode.extraArgs": ["--disaggregation-decode-polling-interval", "4"]}
    ),
    Case("token-map-typed", {"spec.speculative.tokenMap": "thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt"}),
    Case(
        "token-map-in-engine-extra-args",
        {"spec.engine.extraArgs": ["--speculative-token-map", "thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt"]},
    ),
    Case(
        "must-match-in-engine-extra-args",
        {
            "spec.engine.extraArgs": [
                "--load-format",
                "dummy",
                '--json-model-override-args={"rope_theta": 500000}',
                "--tokenizer-mode",
                "slow",
            ]
        },
    ),
    Case(
        "engine-typed-must-match",
        {
            "spec.engine": {
                "contextLength": 8192,
                "quantization": "fp8",
                "tokenizerPath": "meta-llama/Llama-3.1-8B-Instruct",
                "chatTemplate": "llama-3",
            }
        },
    ),
    Case(
        "per-pool-safe-sizes-ports-and-lists",
        {
            "spec.decode": {
                "tensorParallelSize": 2,
                "extraArgs": ["--moe-dp-size", "2", "--nccl-port", "9000", "--chunked-prefill-size", "-1"],
            },
            "spec.prefill.extraArgs": ["--cuda-graph-bs-prefill", "1", "2", "4", "--enable-metrics-for-all-schedulers"],
        },
    ),
)

IMMUTABLE_CASES: Final[tuple[Case, ...]] = (
    Case("shared-algorithm", {"spec.speculative.algorithm": "NEXTN"}, "immutable-speculative-algorithm"),
    Case(
        "both-pool-overrides",
        {"spec.prefill.speculative": {"algorithm": "EAGLE"}, "spec.decode.speculative": {"algorithm": "EAGLE"}},
        "immutable-speculative-algorithm",
    ),
    Case("transfer-backend", {"spec.transfer": {"backend": "nixl"}}, "immutable-transfer-backend"),
)
"""Updates of BASE: each edit is valid on its own but changes an immutable field, so `rule` must reject the update
(the Python transition rule in the unit tests, its CEL transition rule on a real API server)."""
