"""The content rules' patterns and quantity parser on their own: what each accepts and refuses, including the
near-misses the adversarial corpus uses."""

from __future__ import annotations

from fractions import Fraction

import pytest

from disaggspec.validation._syntax import (
    DNS_SUBDOMAIN,
    GPU_INDEX,
    IMAGE_REFERENCE,
    LABEL_VALUE,
    QUALIFIED_NAME,
    full,
    quantity,
)
from disaggspec.validation.content import _model_path_ok, _mount_path_ok, _revision_ok
from disaggspec.validation.resources import resource_name_ok


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        (2, Fraction(2)),
        ("500m", Fraction(1, 2)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1e3", Fraction(1000)),
        ("1k", Fraction(1000)),
        (".5", Fraction(1, 2)),
        ("-1", Fraction(-1)),
        ("lots", None),
        ("1.5.5Gi", None),
        ("1 Gi", None),
        ("", None),
        ("Gi", None),
    ],
)
def test_quantity(text: int | str, value: Fraction | None) -> None:
    assert quantity(text) == value


@pytest.mark.parametrize(
    "image",
    [
        "disaggspec/sglang:v0.5.23-disaggspec",
        "example.invalid/sglang:test",
        "localhost:5000/a/b_c__d-e:1",
        "registry.example.com/team/sglang@sha256:" + "0" * 64,
        "sglang",
    ],
)
def test_image_reference_accepted(image: str) -> None:
    assert full(IMAGE_REFERENCE, image)


@pytest.mark.parametrize(
    "image",
    [
        "DisaggSpec/SGLang:v1",
        " disaggspec/sglang:v1",
        "disaggspec/sglang:v1 x",
        "disaggspec/sglang@sha256:1234",
        "disaggspec/sglang:a:b",
        "disaggspec/sglang:" + "t" * 129,
        "",
    ],
)
def test_image_reference_refused(image: str) -> None:
    assert not full(IMAGE_REFERENCE, image)


def test_model_paths() -> None:
    assert _model_path_ok("meta-llama/Llama-3.1-8B-Instruct")
    assert _model_path_ok("gpt2")
    assert _model_path_ok("/models/hub/models--meta-llama--Llama-3.1-8B")
    for bad in ("-h", "--x", "a b", "https://huggingface.co/a/b", "a--b/c", "a/../b", "/models/../etc", "a/b/c"):
        assert not _model_path_ok(bad), bad


def test_revisions_and_mount_paths() -> None:
    assert _revision_ok("main") and _revision_ok("refs/pr/1") and _revision_ok(None)
    assert not any(_revision_ok(r) for r in ("-h", "../../main", "main branch", "a//b"))
    assert _mount_path_ok("/models") and _mount_path_ok("/mnt/weights")
    assert not any(_mount_path_ok(m) for m in ("/", "/dev", "/dev/shm", "/models/", "/a/./b", "/proc/x", "models"))


def test_names_labels_and_gpu_keys() -> None:
    assert full(DNS_SUBDOMAIN, "hf-token.v1") and not full(DNS_SUBDOMAIN, "HF_Token")
    assert full(QUALIFIED_NAME, "example.com/team") and full(QUALIFIED_NAME, "team")
    assert not any(full(QUALIFIED_NAME, k) for k in ("", "a/b/c", "Example.COM/x", "team name", "k" * 64))
    assert full(LABEL_VALUE, "") and full(LABEL_VALUE, "a-b.c_d") and not full(LABEL_VALUE, "-a")
    assert [k for k in ("0", "1", "10", "00", "+1", " 2", "1_0", "\u0663", "-1", "x") if full(GPU_INDEX, k)] == [
        "0",
        "1",
        "10",
    ]


def test_resource_names() -> None:
    ok = ("cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "nvidia.com/gpu", "rdma/hca_shared_devices_a")
    assert all(resource_name_ok(n) for n in ok)
    bad = ("rdma", "fast gpu", "kubernetes.io/x", "foo.kubernetes.io/x", "requests.example.com/x", "RDMA.Example/hca")
    assert not any(resource_name_ok(n) for n in bad)
