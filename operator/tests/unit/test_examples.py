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
