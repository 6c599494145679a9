"""PD metadata (aux) memory per scheduler rank, with and without the draft proposal q of patch 0003 (sglang 0.5.23).

Measured, not derived: the script builds the real ``MetadataBuffers`` of a patched 0.5.23 tree on CPU, one slot per
configuration, with the arguments ``Scheduler.init_disaggregation`` passes (hidden row from the draft, top-k row from
``spec_topk_metadata_width``, q row from ``spec_draft_probs_metadata_shape`` under
``SGLANG_DISAGG_TRANSFER_DRAFT_PROBS``), and sums the per-slot row sizes ``get_buf_infos()`` registers with the
transfer engine. Every aux region is ``(slots, row)``, so memory is linear in the slot count: it prints bytes per slot
and MiB per 1024 slots. Each side registers its own set (decode: ``2 x req_to_token_pool.size`` slots, prefill:
``2 x max_running_requests``), in host memory, or in GPU memory under
``SGLANG_MOONCAKE_CUSTOM_MEM_POOL=INTRA_NODE_NVLINK``.

The model shapes are the public checkpoints' configs (target vocab; draft hidden width, bf16): Llama-3-8B
(vocab 128256, hidden 4096), Qwen3-8B (vocab 151936, hidden 4096), DeepSeek-V3 (vocab 129280, hidden 7168; multi-layer
EAGLE with 3 steps, so q has 3 rows). Defaults otherwise (no KV checksum, no sampling mask, no DSA seed).

Usage (the test venv and pristine tree that ``tests/run.sh`` caches)::

    venv=$(bash -c 'source images/sglang/tests/lib.sh && ensure_venv 0.5.23')
    pristine=$(images/sglang/check-patches.sh --print-tree 0.5.23)
    "$venv/bin/python" images/sglang/bench_aux_memory.py --pristine "$pristine"

``--pristine`` patches a temporary copy with ``apply_patches.py`` (the image build's applier); ``--tree`` uses an
already patched tree as is.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
MIB = 1024 * 1024


@dataclass(frozen=True)
class Model:
    name: str
    vocab: int
    draft_hidden: int
    algorithm: str
    num_steps: int = 3
    multi_layer: bool = False

    @property
    def spec(self) -> Any:
        """The get_spec() fields the sizing functions read: rejection sampling, so topk 1."""
        from types import SimpleNamespace

        return SimpleNamespace(
            speculative_algorithm=self.algorithm,
            speculative_eagle_topk=1,
            speculative_num_steps=self.num_steps,
            enable_multi_layer_eagle=self.multi_layer,
            speculative_use_rejection_sampling=True,
        )


MODELS = (
    Model("Llama-3-8B, EAGLE", vocab=128256, draft_hidden=4096, algorithm="EAGLE"),
    Model("Qwen3-8B, EAGLE3", vocab=151936, draft_hidden=4096, algorithm="EAGLE3"),
    Model("DeepSeek-V3, multi-layer x3", vocab=129280, draft_hidden=7168, algorithm="EAGLE", multi_layer=True),
)


def row_bytes(model: Model, carry_q: bool) -> tuple[int, list[int]]:
    """(bytes per slot, per-region row sizes) of the real MetadataBuffers for this model."""
    import torch
    from sglang.srt.disaggregation import utils

    env = {"SGLANG_DISAGG_TRANSFER_DRAFT_PROBS": "1" if carry_q else "0"}
    with mock.patch.dict(os.environ, env):
        buffers = utils.MetadataBuffers(
            1,
            hidden_size=model.draft_hidden,
            hidden_states_dtype=torch.bfloat16,
            max_sampling_mask_tokens=64,
            spec_topk_width=utils.spec_topk_metadata_width(model.spec),
            draft_probs_shape=utils.spec_draft_probs_metadata_shape(model.spec, model.vocab),
        )
    item_lens = list(buffers.get_buf_infos()[2])
    return sum(item_lens), item_lens


def patched_tree(pristine: Path, workdir: Path) -> Path:
    sys.path.insert(0, str(HERE))
    import apply_patches

    tree = workdir / "tree"
    tree.mkdir()
    shutil.copytree(pristine / "sglang", tree / "sglang")
    apply_patches.apply_series(HERE / "patches" / "0.5.23", tree)
    return tree


def report() -> None:
    from sglang.srt.disaggregation import utils
    from sglang.version import __version__

    if __version__ != "0.5.23" or not hasattr(utils, "spec_draft_probs_metadata_shape"):
        sys.exit(f"bench_aux_memory: needs a patched sglang 0.5.23 tree, found {__version__} (unpatched?)")
    print(f"sglang {__version__} (patched), MetadataBuffers rows as registered by get_buf_infos(); per scheduler rank")
    print(f"{'model':32} {'q':>4} {'regions':>7} {'B/slot':>10} {'MiB/1024 slots':>15} {'q share':>8}")
    for model in MODELS:
        without, items_without = row_bytes(model, carry_q=False)
        with_q, items_with = row_bytes(model, carry_q=True)
        for carry, total, items in ((False, without, items_without), (True, with_q, items_with)):
            share = f"{(total - without) / total:.1%}" if carry else "-"
            print(
                f"{model.name:32} {'on' if carry else 'off':>4} {len(items):>7} {total:>10,} "
                f"{total * 1024 / MIB:>15.1f} {share:>8}"
            )
        states = model.num_steps if model.multi_layer else 1
        q_row = states * model.vocab * 4
        assert with_q - without == q_row + 64, "q adds its (states, vocab) float32 row and a 64 B marker"
    print("q on adds states x vocab x 4 B (float32) + 64 B (the marker row) per slot, on prefill and on decode.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--pristine", type=Path, help="unpacked pristine 0.5.23 wheel; patched into a temp copy")
    source.add_argument("--tree", type=Path, help="an already patched tree (the directory holding sglang/)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-aux-") as tmp:
        tree = patched_tree(args.pristine, Path(tmp)) if args.pristine else args.tree
        if tree is not None:
            sys.path.insert(0, str(tree))
        report()


if __name__ == "__main__":
    main()
