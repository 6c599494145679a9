"""The speculative fingerprint of images/sglang/patches/0.5.23/0001 (`speculative_fingerprint`), derived from argv.

What travels between prefill and decode must agree on these fields; patch 0002 makes the decode compare the
prefill's fingerprint (published at the bootstrap server's PUT /route) with its own in `try_ensure_parallel_info`
and raise, naming every differing field. 0.5.2 has no such check (neither upstream nor in the project's 0.5.2
patches); the emulator still computes the fingerprint there, to report a mismatch in its pairing report.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from typing import Any, Final

from e2e.serving.emulator.options import EmulateOptions
from e2e.serving.emulator.sglang_args import ServerConfig

# Patch 0001, SPEC_FINGERPRINT_FIELDS: the order a mismatch is reported in.
FIELDS: Final = (
    "speculative_algorithm",
    "draft_hidden_size",
    "draft_hidden_dtype",
    "speculative_eagle_topk",
    "enable_multi_layer_eagle",
    "speculative_num_steps",
    "num_draft_states",
    "speculative_use_rejection_sampling",
    "topk_buffer_width",
    "draft_probs_shape",  # patch 0003
)
DRAFT_PROBS_ENV: Final = "SGLANG_DISAGG_TRANSFER_DRAFT_PROBS"
"""Patch 0003's opt-in (an EnvBool in sglang/srt/environ.py, default off): carry the draft proposal q to decode."""
_TRUE: Final = frozenset({"true", "1", "yes", "y"})
"""What 0.5.23's EnvBool reads as true (sglang/srt/environ.py:143-150)."""
# 0.5.23 speculative/spec_info.py:102-109 (is_eagle) and :180-183 (carries_draft_hidden_states).
_CARRIES_DRAFT_HIDDEN: Final = frozenset({"EAGLE", "EAGLE3", "FROZEN_KV_MTP"})


def topk_metadata_width(cfg: ServerConfig) -> int:
    """Patch 0001 `spec_topk_metadata_width`: topk (x num_steps with multi-layer EAGLE), at least 16."""
    topk = int(cfg.speculative_eagle_topk or 0)
    if cfg.enable_multi_layer_eagle:
        topk *= int(cfg.speculative_num_steps or 1)
    return max(16, topk)


def draft_probs_shape(cfg: ServerConfig, options: EmulateOptions, environ: Mapping[str, str]) -> list[int] | None:
    """Patch 0003 `spec_draft_probs_metadata_shape`: [states, vocab] of the q row when the opt-in env is on and
    rejection sampling is on (one state, or numSteps with multi-layer EAGLE), else None."""
    if environ.get(DRAFT_PROBS_ENV, "").lower() not in _TRUE or not cfg.speculative_use_rejection_sampling:
        return None
    states = int(cfg.speculative_num_steps or 1) if cfg.enable_multi_layer_eagle else 1
    return [states, int(options.vocab_size)]


def speculative_fingerprint(
    cfg: ServerConfig, options: EmulateOptions, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Patch 0001 `speculative_fingerprint(spec, metadata_buffers)`. The hidden row is the draft's (hidden-size /
    hidden-dtype emulate options) when the algorithm carries draft hidden states, else SGLang's 16-wide float32
    padding row (0.5.23 managers/scheduler.py:1539-1556)."""
    algorithm = cfg.speculative_algorithm
    multi_layer = bool(cfg.enable_multi_layer_eagle)
    topk = int(cfg.speculative_eagle_topk or 0)
    steps = int(cfg.speculative_num_steps or 0)
    carries = algorithm in _CARRIES_DRAFT_HIDDEN
    return {
        "speculative_algorithm": algorithm.upper() if algorithm else None,
        "draft_hidden_size": int(options.hidden_size) if carries else 16,
        "draft_hidden_dtype": str(options.hidden_dtype) if carries else "float32",
        "speculative_eagle_topk": topk,
        "enable_multi_layer_eagle": multi_layer,
        "speculative_num_steps": steps if multi_layer else None,
        "num_draft_states": topk * steps if multi_layer else topk,
        "speculative_use_rejection_sampling": bool(cfg.speculative_use_rejection_sampling),
        "topk_buffer_width": topk_metadata_width(cfg),
        "draft_probs_shape": draft_probs_shape(cfg, options, os.environ if environ is None else environ),
    }


def fingerprint_hash(fingerprint: dict[str, Any] | None) -> str:
    """A short stable hash of a fingerprint dict (12 hex), for the pairing report."""
    if fingerprint is None:
        return "none"
    blob = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def mismatch_message(local: dict[str, Any] | None, remote: dict[str, Any] | None) -> str | None:
    """Patch 0001 `check_speculative_fingerprint(local, remote)`: the RuntimeError message, or None when they agree
    (remote = the prefill's, local = this decode's)."""
    if local is None:
        return None
    if remote is None:
        if local.get("speculative_algorithm") is None:
            return None
        return (
            "Speculative config mismatch: the prefill server sent no "
            "speculative fingerprint (an unpatched or older SGLang build). "
            "Run the same patched SGLang image on prefill and decode."
        )
    diffs = [
        f"{name}: prefill={remote.get(name)!r} decode={local.get(name)!r}"
        for name in FIELDS
        if remote.get(name) != local.get(name)
    ]
    if not diffs:
        return None
    return (
        "Speculative config mismatch between prefill and decode ("
        + "; ".join(diffs)
        + "). Both servers must use the same --speculative-* settings and "
        "draft model, or the draft state is read as garbage."
    )


def differing_fields(local: dict[str, Any] | None, remote: dict[str, Any] | None) -> list[str]:
    if local is None or remote is None:
        return [] if local is remote else list(FIELDS)
    return [name for name in FIELDS if local.get(name) != remote.get(name)]
