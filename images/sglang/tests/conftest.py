"""Shared fixtures for the CPU tests of the disaggspec SGLang patches.

The tests import the real sglang modules of one tree (``run.sh`` puts a patched or an unpatched copy of the pinned
wheel on ``PYTHONPATH``), so every test module first checks that the tree has the version it was written for and skips
otherwise. ``DISAGGSPEC_SGLANG_TREE`` says which tree this run uses (``patched`` or ``unpatched``); the tests do not
change behaviour on it, ``run.sh`` only uses it to check the expected outcome. The aux-transfer emulation lives here
because both versions move metadata the same way: one contiguous region per buffer, indexed by slot.
"""

from __future__ import annotations

import ctypes
import os

import pytest
import torch


def sglang_version() -> str:
    from sglang.version import __version__

    return __version__


def require_version(version: str) -> None:
    """Skip the calling test module unless the tree under test is this sglang version."""
    found = sglang_version()
    if found != version:
        pytest.skip(f"tests for sglang {version}; tree has {found}", allow_module_level=True)


def tree_kind() -> str:
    return os.environ.get("DISAGGSPEC_SGLANG_TREE", "patched")


def emulate_aux_transfer(prefill_buffers, prefill_slot: int, decode_buffers, decode_slot: int) -> None:
    """Byte-exact stand-in for the RDMA write of one request's metadata rows.

    The transfer engines (mooncake, nixl) walk prefill's ``get_buf_infos()``: for region k they write prefill's
    ``item_lens[k]`` bytes from ``ptr_p[k] + prefill_slot * item_lens[k]`` to ``ptr_d[k] + decode_slot *
    item_lens[k]`` -- prefill's item size on both sides, so a region whose row size differs between the two is
    silently misaligned. This does the same with memmove; it only refuses what real hardware would fault on
    (a missing region, or a write outside decode's region) instead of corrupting memory.
    """
    src_ptrs, src_lens, src_items = prefill_buffers.get_buf_infos()
    dst_ptrs, dst_lens, _dst_items = decode_buffers.get_buf_infos()
    for k, (src_ptr, src_len, item) in enumerate(zip(src_ptrs, src_lens, src_items, strict=True)):
        if k >= len(dst_ptrs):
            raise IndexError(f"aux region {k}: decode registered only {len(dst_ptrs)} regions")
        src_off = prefill_slot * item
        dst_off = decode_slot * item
        if src_off + item > src_len:
            raise IndexError(f"aux region {k}: prefill slot {prefill_slot} outside its region")
        if dst_off + item > dst_lens[k]:
            raise IndexError(f"aux region {k}: write of {item} B at {dst_off} outside decode's {dst_lens[k]} B")
        ctypes.memmove(dst_ptrs[k] + dst_off, src_ptr + src_off, item)


def assert_bit_exact(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    """Equal shape, dtype and bytes (NaN-safe, -0.0 distinct), with a readable message."""
    assert actual is not None, f"{what}: decode has nothing"
    assert tuple(actual.shape) == tuple(expected.shape), (
        f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    )
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    a = actual.detach().contiguous().cpu().view(torch.uint8)
    e = expected.detach().contiguous().cpu().view(torch.uint8)
    assert torch.equal(a, e), f"{what}: bytes differ"


@pytest.fixture(scope="session")
def gloo_group(tmp_path_factory):
    """A one-process gloo group: 0.5.2's transfer queues all-reduce their poll results over one."""
    import torch.distributed as dist

    if not dist.is_initialized():
        store = dist.FileStore(str(tmp_path_factory.mktemp("gloo") / "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield dist.group.WORLD
