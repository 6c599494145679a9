"""Issue 15's adversarial set: bad DisaggSpecService specs as data, written before the validation code changes.

Every entry is an edit of one of two valid examples (`examples/llama-3.1-8b-eagle3.yaml`, SGLang 0.5.2 on one GPU per
pool, and `examples/rdma-multus.yaml`, SGLang 0.5.23 with four GPUs per pod and an RDMA block), the class of issue 15
it belongs to, and one line saying why it would break serving. None is copied from the existing rule tests
(`operator/tests/unit/dss_cases.py`): each goes through a door those tests do not cover, so the set measures the
gaps rather than the known refusals. `measure.py` sends them to a real API server with the operator's webhook.

`LEGITIMATE` holds the two good specs issue 15 says are refused for want of a typed field; they are measured apart
and are not part of the bad set.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

EXAMPLES: Final = Path(__file__).resolve().parents[2] / "examples"


def _load(name: str) -> dict[str, Any]:
    loaded = yaml.safe_load((EXAMPLES / name).read_text())
    assert isinstance(loaded, dict), name
    return loaded


BASES: Final[dict[str, dict[str, Any]]] = {
    "llama": _load("llama-3.1-8b-eagle3.yaml"),
    "rdma": _load("rdma-multus.yaml"),
}
"""The valid specs every entry edits: `llama` (0.5.2, tp 1 per pool), `rdma` (0.5.23, tp 4, RDMA block)."""

DELETE: Final = object()
"""An edit value that removes the path."""


def apply_edits(base: Mapping[str, Any], edits: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of `base` with each dotted path set to its value (removed for `DELETE`). Keys that contain a dot
    (`nvidia.com/gpu`) cannot be addressed: set their parent map whole."""
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


SIDE_DOOR: Final = "owned-side-door"
PER_POOL: Final = "per-pool-compute"
ARITHMETIC: Final = "gpu-port-arithmetic"
CONTENT: Final = "content-unchecked"
POD_SHAPE: Final = "pod-shape"
CHILD_REFUSAL: Final = "child-refusal"

CLASSES: Final[dict[str, str]] = {
    SIDE_DOOR: "an owned flag or setting reached through an SGLang alias, a single-dash option, a smuggled value or "
    "an env/annotation the operator sets",
    PER_POOL: "an extra argument that changes what one pool computes while the other pool does not",
    ARITHMETIC: "GPU ids, parallel sizes and ports that do not add up in a pod sized for tp only",
    CONTENT: "content never checked: image references, model ids and revisions, RDMA resource names and "
    "quantities, per-GPU NIC map keys, owned RDMA env, volumes at owned paths",
    POD_SHAPE: "label keys and values, node selectors, tolerations and affinity of the wrong shape",
    CHILD_REFUSAL: "fields the API server validates on the child (env names and sources, resource quantities) but "
    "not on the DisaggSpecService",
}
"""Every class of the corpus and what it groups."""


@dataclass(frozen=True)
class Spec:
    """One adversarial spec: an edit of a base example."""

    id: str
    cls: str
    base: str
    edits: Mapping[str, Any]
    reason: str
    """One line: why it would break serving."""

    def manifest(self) -> dict[str, Any]:
        """The full object: the base with the edits applied (metadata.name is the base's)."""
        return apply_edits(BASES[self.base], self.edits)


L, R = "llama", "rdma"
PX, DX = "spec.prefill.extraArgs", "spec.decode.extraArgs"
PE, DE = "spec.prefill.env", "spec.decode.env"
TREE_052: Final = {
    "spec.speculative.eagleTopk": 2,
    "spec.speculative.numDraftTokens": 4,
    "spec.engine": {"pageSize": 16, "attentionBackend": "flashinfer"},
}
"""llama with a draft tree (topk 2) over 16-token pages: 0.5.2 allows only flashinfer for that."""
TREE_0523: Final = {
    "spec.speculative.eagleTopk": 2,
    "spec.speculative.numDraftTokens": 4,
    "spec.engine": {"pageSize": 16, "attentionBackend": "fa3", "kvChecksum": True},
}
"""rdma with a draft tree over 16-token pages: 0.5.23 allows flashinfer, fa3 and triton for that."""


def _tp(role: str, size: int) -> dict[str, Any]:
    """Edits giving pool `role` tensor parallel size `size` and exactly that many GPUs."""
    return {f"spec.{role}.tensorParallelSize": size, f"spec.{role}.resources": {"limits": {"nvidia.com/gpu": size}}}


def _rdma_map(*keys: str) -> dict[str, Any]:
    """An rdma block with a static per-GPU NIC map of the rdma example's four GPUs plus `keys` (the example itself
    now leaves the map to the start-time mapper)."""
    base = copy.deepcopy(BASES[R]["spec"]["transfer"]["rdma"])
    base.pop("ibDevices", None)
    base["ibDevicesPerGpu"] = {"0": "mlx5_0", "1": "mlx5_0", "2": "mlx5_1", "3": "mlx5_1"}
    base["ibDevicesPerGpu"].update({key: "mlx5_1" for key in keys})
    return {"spec.transfer.rdma": base}


def _rdma_resources(resources: dict[str, Any]) -> dict[str, Any]:
    base = copy.deepcopy(BASES[R]["spec"]["transfer"]["rdma"])
    base["resources"] = resources
    return {"spec.transfer.rdma": base}


def _volume(**fields: Any) -> dict[str, Any]:
    """rdma's model volume with `fields` changed."""
    volume = copy.deepcopy(BASES[R]["spec"]["model"]["volume"])
    volume.update(fields)
    return {"spec.model.volume": volume}


SIDE_DOOR_SPECS: Final[tuple[Spec, ...]] = (
    Spec(
        "alias-nccl-init-addr-052",
        SIDE_DOOR,
        L,
        {PX: ["--nccl-init-addr", "10.0.0.1:5000"]},
        "--nccl-init-addr is 0.5.2's alias of the owned --dist-init-addr: the prefill server waits for a rendezvous "
        "peer that never comes",
    ),
    Spec(
        "alias-nccl-init-addr-0523",
        SIDE_DOOR,
        R,
        {DX: ["--nccl-init-addr=10.0.0.1:5000"]},
        "--nccl-init-addr is 0.5.23's alias of the owned --dist-init-addr: decode ranks rendezvous at a foreign "
        "address",
    ),
    Spec(
        "single-dash-h-prefill",
        SIDE_DOOR,
        L,
        {PX: ["-h"]},
        "-h makes the prefill server print its help and exit 0: the pod restarts forever",
    ),
    Spec(
        "single-dash-h-decode-0523",
        SIDE_DOOR,
        R,
        {DX: ["-h"]},
        "-h makes the decode server print its help and exit 0: the pod restarts forever",
    ),
    Spec(
        "lone-dash",
        SIDE_DOOR,
        L,
        {DX: ["-"]},
        "a lone '-' is a positional argument the server parser does not take: it exits with a usage error",
    ),
    Spec(
        "positional-model",
        SIDE_DOOR,
        L,
        {PX: ["meta-llama/Llama-3.1-70B-Instruct"]},
        "a bare word is an unrecognized positional argument: the server exits at start",
    ),
    Spec(
        "smuggled-tp-size-in-value",
        SIDE_DOOR,
        L,
        {PX: ["--chunked-prefill-size=4096 --tp-size=2"]},
        "one argv element carrying a second flag: the int parser gets '4096 --tp-size=2' and the server exits",
    ),
    Spec(
        "smuggled-port-in-value",
        SIDE_DOOR,
        R,
        {DX: ["--max-running-requests=64 --port=8080"]},
        "an owned --port hidden after a space inside one argument: the server exits on the bad integer",
    ),
    Spec(
        "config-file-0523",
        SIDE_DOOR,
        R,
        {PX: ["--config", "/models/override.yaml"]},
        "--config loads server arguments from a file, where every owned flag can be set on one pool only",
    ),
    Spec(
        "owned-env-nccl-ib-hca",
        SIDE_DOOR,
        R,
        {DE: [{"name": "NCCL_IB_HCA", "value": "mlx5_9"}]},
        "NCCL_IB_HCA is rendered from the NIC map once rdma is set; the user's later entry wins on decode only",
    ),
    Spec(
        "owned-env-ucx-net-devices",
        SIDE_DOOR,
        R,
        {"spec.transfer.backend": "nixl", PE: [{"name": "UCX_NET_DEVICES", "value": "eth0"}]},
        "UCX_NET_DEVICES is rendered for nixl with rdma; prefill's own value sends its KV over eth0 only",
    ),
    Spec(
        "owned-env-mooncake-force-tcp",
        SIDE_DOOR,
        R,
        {DE: [{"name": "MC_FORCE_TCP", "value": "true"}]},
        "Mooncake env is owned once rdma is set; MC_FORCE_TCP on decode alone makes its engine skip the RDMA NICs",
    ),
    Spec(
        "owned-env-nccl-ib-hca-value-from",
        SIDE_DOOR,
        R,
        {PE: [{"name": "NCCL_IB_HCA", "valueFrom": {"configMapKeyRef": {"name": "nics", "key": "hca"}}}]},
        "NCCL_IB_HCA from a ConfigMap overrides the rendered NIC list on prefill only",
    ),
    Spec(
        "owned-env-mc-ib-port",
        SIDE_DOOR,
        R,
        {PE: [{"name": "MC_IB_PORT", "value": "2"}]},
        "a Mooncake MC_* variable the rdma block owns, on one pool: the two transfer engines disagree on the port",
    ),
    Spec(
        "cuda-visible-devices",
        SIDE_DOOR,
        L,
        {DE: [{"name": "CUDA_VISIBLE_DEVICES", "value": "1"}]},
        "overrides the device plugin's GPU: a 1-GPU pod sees no device 1 and CUDA init fails",
    ),
    Spec(
        "nvidia-visible-devices-all",
        SIDE_DOOR,
        R,
        {PE: [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
        "exposes every GPU of the node to the prefill pod, including GPUs allocated to other pods",
    ),
)

PER_POOL_SPECS: Final[tuple[Spec, ...]] = (
    Spec(
        "tokenizer-path-decode",
        PER_POOL,
        L,
        {DX: ["--tokenizer-path", "hf-internal-testing/llama-tokenizer"]},
        "decode detokenizes with another tokenizer than prefill used: output text is garbage",
    ),
    Spec(
        "tokenizer-path-prefill-0523",
        PER_POOL,
        R,
        {PX: ["--tokenizer-path", "/models/other-tokenizer"]},
        "prefill tokenizes with another vocabulary than decode: KV and token ids disagree",
    ),
    Spec(
        "tokenizer-mode-slow-prefill",
        PER_POOL,
        L,
        {PX: ["--tokenizer-mode", "slow"]},
        "slow and fast tokenizers can split the same prompt differently on the two pools",
    ),
    Spec(
        "skip-tokenizer-init-prefill",
        PER_POOL,
        L,
        {PX: ["--skip-tokenizer-init"]},
        "prefill expects token ids while the router sends text: prefill fails every request",
    ),
    Spec(
        "chat-template-prefill",
        PER_POOL,
        L,
        {PX: ["--chat-template", "chatml"]},
        "prefill renders chat prompts with ChatML, decode with Llama's template: the KV is of another prompt",
    ),
    Spec(
        "chat-template-decode-0523",
        PER_POOL,
        R,
        {DX: ["--chat-template", "/models/template.jinja"]},
        "a chat template on decode only: the two pools disagree on the prompt tokens",
    ),
    Spec(
        "hf-chat-template-name-0523",
        PER_POOL,
        R,
        {PX: ["--hf-chat-template-name", "tool_use"]},
        "prefill picks another named chat template of the tokenizer than decode",
    ),
    Spec(
        "load-format-dummy-decode",
        PER_POOL,
        L,
        {DX: ["--load-format", "dummy"]},
        "decode runs random weights over prefill's real KV: every decoded token is noise",
    ),
    Spec(
        "load-format-dummy-prefill-0523",
        PER_POOL,
        R,
        {PX: ["--load-format=dummy"]},
        "prefill computes KV with random weights; decode continues from garbage",
    ),
    Spec(
        "json-override-layers-prefill",
        PER_POOL,
        L,
        {PX: ["--json-model-override-args", '{"num_hidden_layers": 16}']},
        "prefill runs 16 layers and sends KV for 16; decode expects 32 layers of KV",
    ),
    Spec(
        "json-override-rope-decode",
        PER_POOL,
        L,
        {DX: ["--json-model-override-args", '{"rope_scaling": {"type": "linear", "factor": 4.0}}']},
        "decode positions tokens with another RoPE scaling than the KV prefill computed",
    ),
    Spec(
        "json-override-heads-decode-0523",
        PER_POOL,
        R,
        {DX: ['--json-model-override-args={"num_key_value_heads": 4}']},
        "decode sizes its KV rows for 4 KV heads while prefill sends 8",
    ),
    Spec(
        "quantization-fp8-decode",
        PER_POOL,
        L,
        {DX: ["--quantization", "fp8"]},
        "decode verifies drafts with fp8 weights over bf16 KV: the pools compute different models",
    ),
    Spec(
        "torchao-config-prefill",
        PER_POOL,
        L,
        {PX: ["--torchao-config", "int4wo-128"]},
        "prefill quantizes its weights to int4, decode does not: the hidden states sent to decode differ",
    ),
    Spec(
        "model-impl-transformers-decode",
        PER_POOL,
        L,
        {DX: ["--model-impl", "transformers"]},
        "decode runs the transformers implementation, which has no EAGLE3 aux hidden-state capture",
    ),
    Spec(
        "context-length-decode",
        PER_POOL,
        L,
        {DX: ["--context-length", "2048"]},
        "decode accepts shorter contexts than prefill: long prompts are prefilled and then refused",
    ),
    Spec(
        "fp32-lm-head-prefill-0523",
        PER_POOL,
        R,
        {PX: ["--enable-fp32-lm-head"]},
        "prefill samples its first token from fp32 logits, decode from bf16: the first draft differs",
    ),
    Spec(
        "preferred-sampling-decode",
        PER_POOL,
        L,
        {DX: ["--preferred-sampling-params", '{"temperature": 0}']},
        "decode samples greedily by default while prefill samples the first token with the model's defaults",
    ),
    Spec(
        "decode-attn-backend-tree-052",
        PER_POOL,
        L,
        {**TREE_052, DX: ["--decode-attention-backend", "triton"]},
        "a draft tree over 16-token pages needs flashinfer on 0.5.2; decode's own backend takes triton",
    ),
    Spec(
        "prefill-attn-backend-tree-052",
        PER_POOL,
        L,
        {**TREE_052, PX: ["--prefill-attention-backend", "fa3"]},
        "a draft tree over 16-token pages needs flashinfer on 0.5.2; prefill's extend backend takes fa3",
    ),
    Spec(
        "decode-attn-backend-tree-0523",
        PER_POOL,
        R,
        {**TREE_0523, DX: ["--decode-attention-backend", "trtllm_mha"]},
        "trtllm_mha does not support a draft tree over pages on 0.5.23; the typed backend check is bypassed",
    ),
    Spec(
        "prefill-attn-backend-tree-0523",
        PER_POOL,
        R,
        {**TREE_0523, PX: ["--prefill-attention-backend", "flashmla"]},
        "flashmla cannot run a draft tree over pages; prefill alone takes it",
    ),
    Spec(
        "dp-attention-decode",
        PER_POOL,
        R,
        {DX: ["--enable-dp-attention", "--dp-size", "2"]},
        "DP attention by hand: a 0.5.2 decode with dp > 1 exits at start without the --prefill-round-robin-balance "
        "the operator derives, and the typed parallelism rules are bypassed",
    ),
    Spec(
        "decode-attn-backend-chain-torch-native",
        PER_POOL,
        L,
        {DX: ["--decode-attention-backend", "torch_native"]},
        "torch_native has no speculative (target verify) support: decode fails at the first verify step",
    ),
)

ARITHMETIC_SPECS: Final[tuple[Spec, ...]] = (
    Spec(
        "pp-size-prefill",
        ARITHMETIC,
        L,
        {PX: ["--pp-size", "2"]},
        "pipeline size 2 needs 2 GPUs in a pod sized for tp 1: rank 1 finds no GPU",
    ),
    Spec(
        "pipeline-parallel-size-decode",
        ARITHMETIC,
        L,
        {DX: ["--pipeline-parallel-size", "2"]},
        "the long alias of --pp-size: 2 stages in a 1-GPU pod",
    ),
    Spec(
        "pp-size-0523",
        ARITHMETIC,
        R,
        {PX: ["--pp-size=2"]},
        "tp 4 x pp 2 needs 8 GPUs in a 4-GPU pod, and the NIC map names only 4",
    ),
    Spec(
        "base-gpu-id-1",
        ARITHMETIC,
        L,
        {DX: ["--base-gpu-id", "1"]},
        "a 1-GPU pod has only GPU 0: rank 0 asks for GPU 1 and CUDA fails",
    ),
    Spec(
        "base-gpu-id-2-0523",
        ARITHMETIC,
        R,
        {PX: ["--base-gpu-id", "2"]},
        "tp 4 from GPU 2 needs GPUs 2-5 in a 4-GPU pod",
    ),
    Spec(
        "gpu-id-step-2-0523",
        ARITHMETIC,
        R,
        {DX: ["--gpu-id-step", "2"]},
        "tp 4 with GPU step 2 uses GPUs 0, 2, 4, 6 in a 4-GPU pod",
    ),
    Spec(
        "dp-size-2",
        ARITHMETIC,
        L,
        {PX: ["--dp-size", "2"]},
        "data parallel 2 without dp attention starts 2 x tp schedulers, one per GPU, in a 1-GPU pod",
    ),
    Spec(
        "data-parallel-size-alias-0523",
        ARITHMETIC,
        R,
        {DX: ["--data-parallel-size", "2"]},
        "the alias of --dp-size: 2 x tp 4 = 8 GPUs in a 4-GPU pod",
    ),
    Spec(
        "ep-larger-than-tp",
        ARITHMETIC,
        L,
        {DX: ["--ep", "2"]},
        "expert parallel 2 with tp 1: the server requires ep to divide tp and exits",
    ),
    Spec(
        "attn-cp-size-not-dividing-0523",
        ARITHMETIC,
        R,
        {PX: ["--attention-context-parallel-size", "3"]},
        "context parallel 3 does not divide tp 4",
    ),
    Spec(
        "dcp-size-alias-0523",
        ARITHMETIC,
        R,
        {DX: ["--decode-context-parallel-size", "8"]},
        "decode context parallel 8 exceeds tp 4 in a 4-GPU pod",
    ),
    Spec(
        "tp-2-and-3",
        ARITHMETIC,
        L,
        {**_tp("prefill", 2), **_tp("decode", 3)},
        "tp 2 and tp 3 do not divide each other: the KV head slices of the transfer cannot line up",
    ),
    Spec(
        "tp-3-and-2",
        ARITHMETIC,
        L,
        {**_tp("prefill", 3), **_tp("decode", 2)},
        "tp 3 does not divide Llama's 8 KV heads nor tp 2: prefill cannot shard, the transfer cannot map",
    ),
    Spec(
        "tp-4-and-3-rdma",
        ARITHMETIC,
        R,
        _tp("decode", 3),
        "prefill tp 4 and decode tp 3 do not divide each other",
    ),
    Spec(
        "tp-6-and-4",
        ARITHMETIC,
        L,
        {**_tp("prefill", 6), **_tp("decode", 4)},
        "tp 6 and tp 4 do not divide each other and 6 does not divide 32 attention heads",
    ),
    Spec(
        "tp-5-and-1",
        ARITHMETIC,
        L,
        _tp("prefill", 5),
        "tp 5 does not divide 32 attention heads: the prefill server refuses to shard",
    ),
    Spec(
        "nccl-port-is-bootstrap-port",
        ARITHMETIC,
        L,
        {PX: ["--nccl-port", "8998"]},
        "NCCL's port equals the bootstrap port on prefill: the second bind fails",
    ),
    Spec(
        "nccl-port-is-http-port",
        ARITHMETIC,
        R,
        {DX: ["--nccl-port", "30000"]},
        "NCCL's port equals the server's HTTP port",
    ),
    Spec(
        "nccl-port-is-custom-bootstrap-port",
        ARITHMETIC,
        L,
        {"spec.transfer.bootstrapPort": 9100, PX: ["--nccl-port=9100"]},
        "NCCL's port equals the configured bootstrap port",
    ),
    Spec(
        "engine-info-port-is-bootstrap-0523",
        ARITHMETIC,
        R,
        {PX: ["--engine-info-bootstrap-port", "8998"]},
        "the engine info bootstrap server and the KV bootstrap server bind one port",
    ),
    Spec(
        "grpc-port-is-http-port-0523",
        ARITHMETIC,
        R,
        {DX: ["--grpc-port", "30000"]},
        "the gRPC server and the HTTP server bind one port",
    ),
    Spec(
        "router-port-is-metrics-port",
        ARITHMETIC,
        L,
        {"spec.router.port": 29000},
        "the router serves HTTP and Prometheus on 29000 at once: one bind fails",
    ),
    Spec(
        "router-port-is-metrics-port-rdma",
        ARITHMETIC,
        R,
        {"spec.router": {"port": 29000, "policy": "round_robin"}},
        "the router's port equals its metrics port; its Service has two ports 29000",
    ),
    Spec(
        "sidecar-port-alias-is-bootstrap-0523",
        ARITHMETIC,
        R,
        {PX: ["--grpc-http-sidecar-port", "8998"]},
        "the alias of --smg-http-sidecar-port takes the prefill bootstrap port: one bind fails",
    ),
)

CONTENT_SPECS: Final[tuple[Spec, ...]] = (
    Spec(
        "image-inner-space",
        CONTENT,
        L,
        {"spec.sglang.image": "disaggspec/sglang:v0.5.2 disaggspec"},
        "not an image reference: the kubelet reports InvalidImageName",
    ),
    Spec(
        "image-leading-space",
        CONTENT,
        L,
        {"spec.sglang.image": " disaggspec/sglang:v0.5.2-disaggspec"},
        "leading whitespace in the image: the API server refuses the pool Deployments",
    ),
    Spec(
        "image-uppercase",
        CONTENT,
        R,
        {"spec.sglang.image": "DisaggSpec/SGLang:v0.5.23"},
        "repository names are lowercase: InvalidImageName",
    ),
    Spec(
        "image-bad-digest",
        CONTENT,
        L,
        {"spec.sglang.image": "disaggspec/sglang@sha256:1234"},
        "a digest must be 64 hex digits: InvalidImageName",
    ),
    Spec(
        "image-two-tags",
        CONTENT,
        R,
        {"spec.sglang.image": "disaggspec/sglang:v0.5.23:disaggspec"},
        "two tags: not a reference",
    ),
    Spec(
        "router-image-whitespace",
        CONTENT,
        L,
        {"spec.router": {"policy": "cache_aware", "image": "   "}},
        "a blank router image: the router Deployment is refused (or pulls nothing)",
    ),
    Spec(
        "router-image-bad-ref",
        CONTENT,
        R,
        {"spec.router": {"image": "sglang router:latest"}},
        "the router's image is not a reference",
    ),
    Spec(
        "model-path-dash-h",
        CONTENT,
        L,
        {"spec.model.path": "-h"},
        "--model-path -h: argparse reads -h as the help flag and both servers exit",
    ),
    Spec(
        "model-path-double-dash-flag",
        CONTENT,
        R,
        {"spec.model.path": "--enable-torch-compile"},
        "--model-path --enable-torch-compile: the model path is parsed as a flag and --model-path misses its value",
    ),
    Spec(
        "model-path-space",
        CONTENT,
        L,
        {"spec.model.path": "meta-llama/Llama 3.1 8B"},
        "not a Hugging Face repo id: the download fails on both pools",
    ),
    Spec(
        "model-path-url",
        CONTENT,
        L,
        {"spec.model.path": "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct"},
        "a URL is not a repo id: SGLang tries it as a local path and fails",
    ),
    Spec(
        "draft-path-dash-h",
        CONTENT,
        L,
        {"spec.speculative.draftModel": {"path": "-h"}},
        "--speculative-draft-model-path -h: help and exit",
    ),
    Spec(
        "draft-path-flag-0523",
        CONTENT,
        R,
        {"spec.speculative.draftModel": {"path": "--trust-remote-code"}},
        "the draft path is parsed as a flag (an owned one at that)",
    ),
    Spec(
        "model-revision-dash-h",
        CONTENT,
        L,
        {"spec.model.revision": "-h"},
        "--revision -h: help and exit",
    ),
    Spec(
        "model-revision-space",
        CONTENT,
        L,
        {"spec.model.revision": "main branch"},
        "not a git ref: the Hub rejects the revision",
    ),
    Spec(
        "model-revision-backsteps",
        CONTENT,
        L,
        {"spec.model.revision": "../../main"},
        "'..' is not allowed in a git ref",
    ),
    Spec(
        "draft-revision-flag",
        CONTENT,
        L,
        {
            "spec.speculative.draftModel": {
                "path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B",
                "revision": "--port=1",
            }
        },
        "--speculative-draft-model-revision --port=1: the revision is parsed as the owned --port",
    ),
    Spec(
        "served-model-name-dash-h",
        CONTENT,
        L,
        {"spec.model.servedModelName": "-h"},
        "--served-model-name -h: help and exit",
    ),
    Spec(
        "hf-token-secret-bad-name",
        CONTENT,
        L,
        {"spec.model.hfTokenSecretRef": {"name": "HF_Token", "key": "token"}},
        "not a Secret name: the pool Deployments' secretKeyRef is refused",
    ),
    Spec(
        "hf-token-secret-bad-key",
        CONTENT,
        L,
        {"spec.model.hfTokenSecretRef": {"name": "hf-token", "key": "to ken/x"}},
        "not a valid Secret key: the secretKeyRef is refused",
    ),
    Spec(
        "volume-at-dev-shm",
        CONTENT,
        R,
        _volume(mountPath="/dev/shm"),
        "the model volume is mounted where the operator mounts its memory /dev/shm: duplicate mount path",
    ),
    Spec(
        "volume-at-dev-shm-slash",
        CONTENT,
        R,
        _volume(mountPath="/dev/shm/"),
        "the same path with a trailing slash: the runtime mounts one over the other",
    ),
    Spec(
        "volume-at-dev",
        CONTENT,
        R,
        _volume(mountPath="/dev"),
        "mounting weights over /dev hides the GPU and RDMA device nodes",
    ),
    Spec(
        "volume-at-root",
        CONTENT,
        R,
        _volume(mountPath="/"),
        "mounting weights over / replaces the image's filesystem",
    ),
    Spec(
        "host-path-backsteps",
        CONTENT,
        L,
        {"spec.model.volume": {"hostPath": {"path": "/models/../etc"}, "mountPath": "/models"}},
        "a hostPath with '..': the API server refuses the pool Deployments",
    ),
    Spec(
        "pvc-bad-claim-name",
        CONTENT,
        R,
        _volume(persistentVolumeClaim={"claimName": "Model_Weights"}),
        "not a PVC name: the claim can never bind and pods stay Pending",
    ),
    Spec(
        "pull-secret-bad-name",
        CONTENT,
        L,
        {"spec.sglang.imagePullSecrets": [{"name": "Registry_Creds"}]},
        "not a Secret name: the image pull never finds credentials",
    ),
    Spec(
        "rdma-resource-no-domain",
        CONTENT,
        R,
        _rdma_resources({"rdma": 1}),
        "'rdma' is neither a standard resource nor a qualified extended one: the Deployments are refused",
    ),
    Spec(
        "rdma-resource-space",
        CONTENT,
        R,
        _rdma_resources({"rdma/hca shared": 1}),
        "a space in a resource name: refused by the API server",
    ),
    Spec(
        "rdma-resource-kubernetes-io",
        CONTENT,
        R,
        _rdma_resources({"kubernetes.io/rdma": 1}),
        "extended resources may not use the kubernetes.io domain",
    ),
    Spec(
        "rdma-resource-uppercase-domain",
        CONTENT,
        R,
        _rdma_resources({"RDMA.Example/hca": 1}),
        "a resource name's prefix must be a lowercase DNS subdomain",
    ),
    Spec(
        "rdma-resource-gpu",
        CONTENT,
        R,
        {**_rdma_resources({"nvidia.com/gpu": 1}), "spec.prefill.resources": {}, "spec.decode.resources": {}},
        "rdma.resources overrides the rendered GPU count: tp 4 pods get 1 GPU",
    ),
    Spec(
        "rdma-quantity-fraction",
        CONTENT,
        R,
        _rdma_resources({"rdma/hca_shared_devices_a": "1.5"}),
        "extended resources must be whole numbers: the Deployments are refused",
    ),
    Spec(
        "rdma-quantity-milli",
        CONTENT,
        R,
        _rdma_resources({"rdma/hca_shared_devices_a": "100m"}),
        "a milli quantity of an extended resource: refused",
    ),
    Spec(
        "rdma-quantity-word",
        CONTENT,
        R,
        _rdma_resources({"rdma/hca_shared_devices_a": "one"}),
        "not a quantity: the Deployment cannot even be decoded",
    ),
    Spec(
        "rdma-quantity-negative",
        CONTENT,
        R,
        _rdma_resources({"rdma/hca_shared_devices_a": -1}),
        "a negative quantity: refused",
    ),
    Spec(
        "ib-map-key-word",
        CONTENT,
        R,
        _rdma_map("x"),
        "a non-numeric GPU key: rendering sorts keys with int() and raises",
    ),
    Spec(
        "ib-map-key-negative",
        CONTENT,
        R,
        _rdma_map("-1"),
        "GPU -1 does not exist: SGLang rejects the map",
    ),
    Spec(
        "ib-map-key-00",
        CONTENT,
        R,
        _rdma_map("00"),
        "'0' and '00' are the same GPU after normalisation: two NIC lists for GPU 0",
    ),
    Spec(
        "ib-map-key-plus",
        CONTENT,
        R,
        _rdma_map("+1"),
        "'+1' and '1' are the same GPU after int(): duplicate entry",
    ),
    Spec(
        "ib-map-key-underscore",
        CONTENT,
        R,
        _rdma_map("1_0"),
        "Python's int('1_0') is 10: a GPU index nobody wrote",
    ),
    Spec(
        "ib-map-key-space",
        CONTENT,
        R,
        _rdma_map(" 2"),
        "' 2' and '2' collide after int(); the JSON map holds both",
    ),
    Spec(
        "ib-map-key-arabic-digit",
        CONTENT,
        R,
        _rdma_map("\u0663"),
        "int() reads the Arabic-Indic digit three as 3, SGLang's JSON parser sees a non-numeric key",
    ),
    Spec(
        "ib-map-key-word-only-extra-0523",
        CONTENT,
        R,
        _rdma_map("gpu0"),
        "'gpu0' is not a GPU index: rendering raises on int('gpu0')",
    ),
)

POD_SHAPE_SPECS: Final[tuple[Spec, ...]] = (
    Spec(
        "pod-label-key-space",
        POD_SHAPE,
        L,
        {"spec.prefill.podLabels": {"team name": "infra"}},
        "not a label key: the prefill Deployment is refused",
    ),
    Spec(
        "pod-label-key-two-slashes",
        POD_SHAPE,
        R,
        {"spec.decode.podLabels": {"a/b/c": "x"}},
        "a label key has at most one '/': refused",
    ),
    Spec(
        "pod-label-key-uppercase-prefix",
        POD_SHAPE,
        L,
        {"spec.decode.podLabels": {"Example.COM/team": "infra"}},
        "a label key's prefix must be a lowercase DNS subdomain",
    ),
    Spec(
        "pod-label-key-too-long",
        POD_SHAPE,
        L,
        {"spec.prefill.podLabels": {"k" * 64: "v"}},
        "a label key's name part is at most 63 characters",
    ),
    Spec(
        "pod-label-key-empty",
        POD_SHAPE,
        R,
        {"spec.prefill.podLabels": {"": "v"}},
        "an empty label key: refused",
    ),
    Spec(
        "pod-label-value-leading-dash",
        POD_SHAPE,
        L,
        {"spec.decode.podLabels": {"team": "-infra"}},
        "a label value must start with an alphanumeric character",
    ),
    Spec(
        "pod-label-value-space",
        POD_SHAPE,
        R,
        {"spec.prefill.podLabels": {"team": "ml infra"}},
        "a space in a label value: refused",
    ),
    Spec(
        "pod-annotation-key-space",
        POD_SHAPE,
        L,
        {"spec.prefill.podAnnotations": {"my note": "x"}},
        "annotation keys follow the label key syntax: refused",
    ),
    Spec(
        "node-selector-key-space",
        POD_SHAPE,
        L,
        {"spec.decode.nodeSelector": {"gpu type": "h100"}},
        "not a label key: the decode Deployment is refused",
    ),
    Spec(
        "node-selector-value-too-long",
        POD_SHAPE,
        R,
        {"spec.prefill.nodeSelector": {"nvidia.com/gpu.product": "H" * 64}},
        "a label value is at most 63 characters (the CRD allows 253): refused",
    ),
    Spec(
        "node-selector-value-slash",
        POD_SHAPE,
        L,
        {"spec.prefill.nodeSelector": {"kubernetes.io/hostname": "rack/1"}},
        "'/' is not allowed in a label value",
    ),
    Spec(
        "node-selector-key-empty",
        POD_SHAPE,
        L,
        {"spec.decode.nodeSelector": {"": "x"}},
        "an empty node selector key: refused",
    ),
    Spec(
        "toleration-exists-with-value",
        POD_SHAPE,
        R,
        {
            "spec.decode.tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "value": "true", "effect": "NoSchedule"}
            ]
        },
        "operator Exists takes no value: the decode Deployment is refused",
    ),
    Spec(
        "toleration-bad-operator",
        POD_SHAPE,
        L,
        {"spec.prefill.tolerations": [{"key": "gpu", "operator": "Contains", "value": "x"}]},
        "operator must be Exists or Equal",
    ),
    Spec(
        "toleration-bad-effect",
        POD_SHAPE,
        L,
        {"spec.decode.tolerations": [{"key": "gpu", "operator": "Exists", "effect": "Sometimes"}]},
        "not a taint effect",
    ),
    Spec(
        "toleration-seconds-without-no-execute",
        POD_SHAPE,
        R,
        {
            "spec.prefill.tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}
            ]
        },
        "tolerationSeconds is only valid with effect NoExecute",
    ),
    Spec(
        "toleration-key-space",
        POD_SHAPE,
        L,
        {"spec.prefill.tolerations": [{"key": "gpu type", "operator": "Exists"}]},
        "a toleration key is a label key",
    ),
    Spec(
        "toleration-seconds-string",
        POD_SHAPE,
        L,
        {
            "spec.decode.tolerations": [
                {"key": "gpu", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": "ten"}
            ]
        },
        "tolerationSeconds must be an integer: the Deployment cannot be decoded",
    ),
    Spec(
        "toleration-unknown-field",
        POD_SHAPE,
        R,
        {"spec.decode.tolerations": [{"keyy": "nvidia.com/gpu", "operator": "Exists"}]},
        "a misspelt field: dropped or refused, so the pod tolerates every taint",
    ),
    Spec(
        "toleration-empty-key-equal",
        POD_SHAPE,
        L,
        {"spec.prefill.tolerations": [{"operator": "Equal", "value": "x"}]},
        "an empty key requires operator Exists",
    ),
    Spec(
        "affinity-empty-terms",
        POD_SHAPE,
        L,
        {
            "spec.prefill.affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
            }
        },
        "a required node affinity with no term: refused",
    ),
    Spec(
        "affinity-anti-without-topology-key",
        POD_SHAPE,
        R,
        {
            "spec.decode.affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"labelSelector": {"matchLabels": {"disaggspec.io/role": "decode"}}}
                    ]
                }
            }
        },
        "pod anti-affinity needs a topologyKey: refused",
    ),
    Spec(
        "affinity-unknown-kind",
        POD_SHAPE,
        L,
        {"spec.decode.affinity": {"gpuAffinity": {"preferred": True}}},
        "not an affinity field: refused or silently dropped",
    ),
    Spec(
        "affinity-wrong-type",
        POD_SHAPE,
        R,
        {"spec.prefill.affinity": {"nodeAffinity": ["h100"]}},
        "nodeAffinity is an object: the Deployment cannot be decoded",
    ),
    Spec(
        "affinity-in-without-values",
        POD_SHAPE,
        L,
        {
            "spec.prefill.affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In"}]}]
                    }
                }
            }
        },
        "operator In needs values: refused",
    ),
    Spec(
        "affinity-weight-zero",
        POD_SHAPE,
        L,
        {
            "spec.decode.affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 0, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}
                    ]
                }
            }
        },
        "a preference weight must be 1-100",
    ),
    Spec(
        "affinity-bad-key",
        POD_SHAPE,
        R,
        {
            "spec.prefill.affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu type", "operator": "Exists"}]}]
                    }
                }
            }
        },
        "a node selector requirement's key is a label key",
    ),
)

CHILD_REFUSAL_SPECS: Final[tuple[Spec, ...]] = (
    Spec(
        "env-name-dash",
        CHILD_REFUSAL,
        L,
        {PE: [{"name": "MY-VAR", "value": "1"}]},
        "not a C identifier; since issue 29 admitted: Kubernetes accepts it (also without relaxed env names)",
    ),
    Spec(
        "env-name-dot",
        CHILD_REFUSAL,
        R,
        {DE: [{"name": "my.var", "value": "1"}]},
        "not a C identifier; since issue 29 admitted: Kubernetes accepts it (also without relaxed env names)",
    ),
    Spec(
        "env-name-leading-dash",
        CHILD_REFUSAL,
        L,
        {DE: [{"name": "-X", "value": "1"}]},
        "a leading '-'; since issue 29 admitted: printable ASCII but '=' is what Kubernetes 1.32+ accepts",
    ),
    Spec(
        "env-name-dot-dot",
        CHILD_REFUSAL,
        L,
        {PE: [{"name": "..", "value": "1"}]},
        "'..' as a variable name; since issue 29 admitted, as by Kubernetes 1.32+ (relaxed env names)",
    ),
    Spec(
        "env-value-from-empty",
        CHILD_REFUSAL,
        L,
        {PE: [{"name": "FOO", "valueFrom": {}}]},
        "valueFrom must name exactly one source: the prefill Deployment is refused",
    ),
    Spec(
        "env-value-from-two-sources",
        CHILD_REFUSAL,
        R,
        {
            DE: [
                {
                    "name": "FOO",
                    "valueFrom": {
                        "secretKeyRef": {"name": "s", "key": "k"},
                        "configMapKeyRef": {"name": "c", "key": "k"},
                    },
                }
            ]
        },
        "two sources in one valueFrom: refused",
    ),
    Spec(
        "env-field-ref-bad-path",
        CHILD_REFUSAL,
        L,
        {DE: [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.gpuName"}}}]},
        "not a supported fieldPath: refused",
    ),
    Spec(
        "env-resource-field-ref-gpu",
        CHILD_REFUSAL,
        L,
        {PE: [{"name": "GPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.nvidia.com/gpu"}}}]},
        "resourceFieldRef supports cpu, memory and ephemeral-storage only: refused",
    ),
    Spec(
        "env-value-from-unknown-source",
        CHILD_REFUSAL,
        R,
        {PE: [{"name": "FOO", "valueFrom": {"vaultRef": {"path": "x"}}}]},
        "not an env source: refused or dropped, leaving an empty variable",
    ),
    Spec(
        "env-secret-ref-bad-key",
        CHILD_REFUSAL,
        L,
        {DE: [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "a key"}}}]},
        "not a valid Secret key: refused",
    ),
    Spec(
        "env-config-map-ref-no-key",
        CHILD_REFUSAL,
        L,
        {PE: [{"name": "FOO", "valueFrom": {"configMapKeyRef": {"name": "c"}}}]},
        "configMapKeyRef needs a key: refused",
    ),
    Spec(
        "limit-memory-word",
        CHILD_REFUSAL,
        L,
        {"spec.prefill.resources": {"limits": {"nvidia.com/gpu": 1, "memory": "lots"}}},
        "not a quantity: the prefill Deployment cannot be decoded",
    ),
    Spec(
        "request-cpu-word",
        CHILD_REFUSAL,
        R,
        {"spec.decode.resources": {"limits": {"nvidia.com/gpu": 4}, "requests": {"cpu": "abc"}}},
        "not a quantity: refused",
    ),
    Spec(
        "request-above-limit",
        CHILD_REFUSAL,
        L,
        {"spec.decode.resources": {"limits": {"nvidia.com/gpu": 1, "memory": "1Gi"}, "requests": {"memory": "10Gi"}}},
        "a request above its limit: refused",
    ),
    Spec(
        "limit-cpu-negative",
        CHILD_REFUSAL,
        L,
        {"spec.prefill.resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "-1"}}},
        "a negative quantity: refused",
    ),
    Spec(
        "limit-bad-resource-name",
        CHILD_REFUSAL,
        R,
        {"spec.prefill.resources": {"limits": {"nvidia.com/gpu": 4, "fast gpu": 1}}},
        "a space in a resource name: refused",
    ),
    Spec(
        "limit-extended-fraction",
        CHILD_REFUSAL,
        L,
        {"spec.decode.resources": {"limits": {"nvidia.com/gpu": 1, "example.com/fpga": "0.5"}}},
        "extended resources must be whole numbers: refused",
    ),
    Spec(
        "limit-hugepages-alone",
        CHILD_REFUSAL,
        L,
        {"spec.prefill.resources": {"limits": {"nvidia.com/gpu": 1, "hugepages-2Mi": "1Gi"}}},
        "hugepages need a cpu or memory request: refused",
    ),
    Spec(
        "router-limit-word",
        CHILD_REFUSAL,
        L,
        {"spec.router": {"policy": "cache_aware", "resources": {"limits": {"memory": "1.5.5Gi"}}}},
        "not a quantity: the router Deployment cannot be decoded after the pools were applied",
    ),
    Spec(
        "router-request-above-limit",
        CHILD_REFUSAL,
        R,
        {"spec.router": {"resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "4"}}}},
        "the router's request above its limit: the last child is refused",
    ),
    Spec(
        "gpu-request-differs",
        CHILD_REFUSAL,
        L,
        {"spec.prefill.resources": {"limits": {"nvidia.com/gpu": 1}, "requests": {"example.com/nic": 1}}},
        "an extended resource requested but not limited: refused",
    ),
)

ADVERSARIAL: Final[tuple[Spec, ...]] = (
    SIDE_DOOR_SPECS + PER_POOL_SPECS + ARITHMETIC_SPECS + CONTENT_SPECS + POD_SHAPE_SPECS + CHILD_REFUSAL_SPECS
)
"""The whole bad set, in class order."""

LEGITIMATE: Final[tuple[Spec, ...]] = (
    Spec(
        "legit-speculative-token-map",
        "legitimate",
        L,
        {
            PX: ["--speculative-token-map", "thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt"],
            DX: ["--speculative-token-map", "thunlp/LLaMA3-Instruct-8B-FR-Spec/freq_32768.pt"],
        },
        "a good spec: the same FR-Spec token map on both pools, refused only for want of a typed field",
    ),
    Spec(
        "legit-decode-polling-interval",
        "legitimate",
        R,
        {DX: ["--disaggregation-decode-polling-interval", "4"]},
        "a good spec: decode polls its transfers every 4 steps, refused only for want of a typed field",
    ),
)
"""The two good specs issue 15 reports refused; measured apart, not part of the bad set."""
