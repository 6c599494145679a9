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
        {**V052, "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0"}}}},
        "transfer-rdma-ib-map-version",
    ),
    Case(
        "ib-map-misses-a-gpu",
        {
            "spec.prefill": {"tensorParallelSize": 2, "resources": {"limits": {"nvidia.com/gpu": 2}}},
            "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0"}}},
        },
        "transfer-rdma-ib-map-covers-gpus",
    ),
    Case(
        "ib-map-misses-gpus-beyond-tp",
        {
            "spec.decode": {"tensorParallelSize": 1, "resources": {"limits": {"nvidia.com/gpu": "2"}}},
            "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0"}}},
        },
        "transfer-rdma-ib-map-covers-gpus",
    ),
    Case(
        "ib-list-and-map",
        {"spec.transfer": {"rdma": {"ibDevices": ["mlx5_0"], "ibDevicesPerGpu": {"0": "mlx5_0"}}}},
        "transfer-rdma-ib-devices-exclusive",
    ),
    Case("rdma-with-fake-backend", {"spec.transfer": {"backend": "fake", "rdma": {}}}, "transfer-rdma-backend"),
    Case("bootstrap-port-is-http-port", {"spec.transfer": {"bootstrapPort": 30000}}, "transfer-bootstrap-port-free"),
    Case(
        "hf-token-twice",
        {
            "spec.model.hfTokenSecretRef": {"name": "hf"},
            "spec.decode.env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "x", "key": "y"}}}],
        },
        "model-hf-token-env",
    ),
    Case(
        "gpu-limit-fractional",
        {"spec.prefill": {"resources": {"limits": {"nvidia.com/gpu": "500m"}}}},
        "pool-gpu-count-whole",
    ),
    Case(
        "gpus-below-tp",
        {"spec.decode": {"tensorParallelSize": 2, "resources": {"limits": {"nvidia.com/gpu": 1}}}},
        "pool-gpus-cover-tp",
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
    # Python-only (webhook/reconcile): the API server accepts these.
    Case("extra-args-unknown-flag", {"spec.prefill.extraArgs": ["--no-such-flag"]}, "pool-extra-args-known"),
    Case("extra-args-abbreviated-flag", {"spec.decode.extraArgs": ["--chunked-prefill", "8"]}, "pool-extra-args-known"),
    Case(
        "extra-args-flag-of-other-release",
        {**V052, "spec.decode.extraArgs": ["--enable-multi-layer-eagle-foo"]},
        "pool-extra-args-known",
    ),
)

SCHEMA_CASES: Final[tuple[Case, ...]] = (
    Case("algorithm-unknown", {"spec.speculative.algorithm": "MEDUSA"}, schema_error='Unsupported value: "MEDUSA"'),
    Case("version-unsupported", {"spec.sglang.version": "0.5.9"}, schema_error='Unsupported value: "0.5.9"'),
    Case("topk-zero", {"spec.speculative.eagleTopk": 0}, schema_error="should be greater than or equal to 1"),
    Case("steps-zero", {"spec.speculative.numSteps": 0}, schema_error="should be greater than or equal to 1"),
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
        "network-bad-name",
        {"spec.transfer": {"rdma": {"networks": ["Bad_Name"]}}},
        schema_error="should match",
    ),
    Case("tp-too-large", {"spec.prefill.tensorParallelSize": 32}, schema_error="less than or equal to 16"),
)

VALID_CASES: Final[tuple[Case, ...]] = (
    Case("base", {}),
    Case("cache-aware-router-on-0.5.23", {"spec.router": {"policy": "cache_aware"}}),
    Case("round-robin-router-on-0.5.2", {**V052, "spec.router": {"policy": "round_robin"}}),
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
            "spec.prefill": {"tensorParallelSize": 2},
            "spec.transfer": {"rdma": {"ibDevicesPerGpu": {"0": "mlx5_0", "1": "mlx5_1"}}},
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
