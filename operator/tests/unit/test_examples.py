"""Every example is one commented DisaggSpecService that parses and passes the whole rule table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from disaggspec.api import parse_service
from disaggspec.validation import validate
from tests.unit.dss_cases import EXAMPLES


def test_examples_exist() -> None:
    names = {path.name for path in EXAMPLES}
    assert {"llama-3.1-8b-eagle3.yaml", "deepseek-r1-mtp.yaml", "rdma-multus.yaml", "eagle-topk-tree.yaml"} <= names
    assert "deepseek-r1-pd-dp-ep.yaml" in names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_is_valid(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("#"), "an example opens with a comment explaining it"
    documents = list(yaml.safe_load_all(text))
    assert len(documents) == 1
    service = parse_service(documents[0])
    assert validate(service) == []


def test_seed_setups() -> None:
    by_name = {p.name: parse_service(yaml.safe_load(p.read_text())) for p in EXAMPLES}
    llama = by_name["llama-3.1-8b-eagle3.yaml"].spec
    assert (llama.speculative.algorithm, llama.speculative.num_steps, llama.speculative.eagle_topk) == ("EAGLE3", 1, 1)
    assert llama.speculative.num_draft_tokens == 2 and llama.model.dtype == "float16"
    r1 = by_name["deepseek-r1-mtp.yaml"].spec
    assert (r1.speculative.algorithm, r1.speculative.num_steps, r1.speculative.num_draft_tokens) == ("NEXTN", 3, 4)
    assert r1.prefill.tensor_parallel_size == r1.decode.tensor_parallel_size == 8
    rdma = by_name["rdma-multus.yaml"].spec.transfer.rdma
    # Each GPU's NIC is chosen at start (the pods may land on either socket), among the four HCAs listed.
    assert rdma is not None and not rdma.ib_devices_per_gpu and rdma.ib_device_mapping in (None, "Auto")
    assert rdma.ib_devices == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert by_name["eagle-topk-tree.yaml"].spec.speculative.eagle_topk > 1


def test_sglang_reference_layout() -> None:
    """deepseek-r1-pd-dp-ep.yaml is SGLang's large-scale PD layout (docs/parallelism.md): both pools tp16 groups of two
    8-GPU nodes with DP attention 16 and DeepEP over all 16 GPUs, normal on prefill and low_latency on decode, dense
    MLP TP 1, DP LM head, two-batch overlap, EPLB with 32 redundant experts; NEXTN, 64-token pages, host network, the
    model cache."""
    (path,) = (p for p in EXAMPLES if p.name == "deepseek-r1-pd-dp-ep.yaml")
    spec = parse_service(yaml.safe_load(path.read_text())).spec
    assert (spec.speculative.algorithm, spec.engine.page_size) == ("NEXTN", 64)
    assert spec.transfer.rdma is not None and spec.transfer.rdma.host_network
    assert spec.model.cache is not None and spec.model.cache.persistent_volume_claim is not None
    for pool, mode in ((spec.prefill, "normal"), (spec.decode, "low_latency")):
        assert (pool.nodes_per_instance, pool.gpus_per_node, pool.tensor_parallel_size) == (2, 8, 16)
        par = pool.parallelism
        assert par is not None and par.data_parallel_attention is not None and par.expert_parallel is not None
        assert par.data_parallel_attention.size == par.expert_parallel.size == 16
        assert (par.expert_parallel.backend, par.expert_parallel.deepep_mode) == ("deepep", mode)
        assert (par.dense_mlp_tp_size, par.dp_lm_head, par.two_batch_overlap) == (1, True, True)
        assert par.eplb is not None and par.eplb.redundant_experts == 32
