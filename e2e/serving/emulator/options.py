"""The emulator's per-pod knobs: `--emulate key=value` (the pod runner maps annotations `emulator.disaggspec.io/<key>`).

Every key is documented in docs/serving-emulator.md. An unknown key or a malformed value is a usage error (exit 2),
so a mistyped annotation fails the pod's process instead of being ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, Literal

Fail = Literal["none", "bootstrap-refused", "transfer-failure", "crash", "load-failure"]
CapacityMode = Literal["auto", "off"]
MismatchMode = Literal["crash", "abort"]

FAILS: Final[tuple[str, ...]] = ("none", "bootstrap-refused", "transfer-failure", "crash", "load-failure")
MISMATCH_MODES: Final[tuple[str, ...]] = ("crash", "abort")
CAPACITY_MODES: Final[tuple[str, ...]] = ("auto", "off")
RATE_KEYS: Final = frozenset({"tokens_per_second", "prefill_tokens_per_second"})
"""Setting either pace (without `capacity`) selects the per-request pace instead of the capacity model."""


class OptionError(ValueError):
    pass


@dataclass(frozen=True)
class EmulateOptions:
    capacity: CapacityMode = "auto"
    """`auto`: the server runs the capacity model (e2e.serving.emulator.capacity: batches, KV pool, queues, step times
    from the GPU x model profile) when its model has a profile and neither pace below is set; `off`: every request
    advances at its own `tokens-per-second`, with no batch limit and no queue."""
    time_scale: float = 1.0
    """Capacity model: wall-clock seconds per emulated second (every step and KV transfer takes that many times
    longer), so that many servers fit a small machine; latencies seen outside are in scaled time."""
    gpu: str | None = None
    """Capacity model: the GPU product (`nvidia.com/gpu.product` spelling, e.g. NVIDIA-H200); the pod runner passes
    the pod's nodeSelector value; unset: H100."""
    kv_pool_tokens: int | None = None
    """Capacity model: max_total_num_tokens per DP rank instead of the memory model's (a small pool saturates with
    few requests)."""
    load_seconds: float = 0.0
    """Model loading time: the HTTP port listens only after it (SGLang starts uvicorn after the scheduler reports
    ready), the prefill's bootstrap server listens from the start but has no prefill rank registered until then."""
    tokens_per_second: float = 100.0
    """Decode output rate (tokens of one request per second)."""
    prefill_tokens_per_second: float = 20000.0
    """Prefill compute rate (prompt tokens per second)."""
    accept_length: float | None = None
    """Mean tokens per speculative verify step (SGLang's accept length, bonus token included); default 2.0 clamped
    to [1, speculative_num_draft_tokens] when speculative decoding is on."""
    hidden_size: int = 4096
    """Draft hidden width in the metadata buffer (fingerprint field draft_hidden_size)."""
    hidden_dtype: str | None = None
    """Draft hidden dtype (fingerprint field draft_hidden_dtype); default from --dtype (auto -> bfloat16)."""
    fail: Fail = "none"
    """bootstrap-refused: a prefill's bootstrap server never listens. transfer-failure: a prefill fails every KV
    transfer. crash: the process dies when request crash-after + 1 arrives. The first two act on prefills only.
    load-failure: the model never loads: after load-seconds the server logs SGLang's weight-loading error and exits 1
    without ever listening on its HTTP port."""
    crash_after: int = 0
    fingerprint_mismatch: MismatchMode = "abort"
    """0.5.23 decode, the prefill's fingerprint or metadata layout differs: `abort` as the patched image does (patch
    0002: PrefillMismatchError fails every request bound to that prefill with HTTP 500 naming the fields, and refuses
    the prefill for `refused-prefill-backoff` seconds; the decode keeps serving others), or `crash`, the earlier
    image (the RuntimeError reached run_scheduler_process and the whole decode server died)."""
    refused_prefill_backoff: float = 30.0
    """0.5.23 decode: seconds a refused prefill's requests fail at once, without fetching /route again (patch 0002,
    DecodePreallocQueue._refused_prefill_backoff)."""
    vocab_size: int = 128256
    """Target vocabulary (Llama 3): the width of the draft-probs row (fingerprint field draft_probs_shape, patch
    0003) when SGLANG_DISAGG_TRANSFER_DRAFT_PROBS is on with rejection sampling."""
    output_tokens: int = 32
    """Where the emulated model emits EOS (finish_reason stop) when max_new_tokens allows it and ignore_eos is off."""
    context_length: int | None = None
    """max_model_len in /v1/models; default --context-length, else 131072."""
    kv_bytes_per_token: int = 131072
    """KV bytes per prompt token moved from prefill to decode (Llama-3.1-8B fp16: 32 layers x 8 heads x 128 x 2 x 2)."""
    kv_transfer_gb_per_second: float = 25.0
    ensure_retries: int = 15
    """0.5.23 decode: attempts to fetch the prefill's parallel info before aborting (disaggregation/decode.py:441)."""
    ensure_retry_interval: float = 1.0
    """0.5.23 decode: seconds between those attempts (disaggregation/decode.py:443)."""
    bootstrap_port: int | None = None
    """Where this prefill's bootstrap server really listens, whatever --disaggregation-bootstrap-port says: stands
    for a server started with another port than the one its pod advertises (sglang.ai/bootstrap-port), the mis-wiring
    the router cannot see. Unset: the argv's port."""
    drain_poll_seconds: float = 5.0
    """SIGTERM drain: SGLang's sigterm_watchdog checks every 5 s (tokenizer_manager.py:1140-1170 in 0.5.2)."""
    revision: str | None = None
    """Test oracle, not SGLang behaviour: the serving revision this pod belongs to (the pod runner passes the pod's
    disaggspec.io/spec-fingerprint label). A decode with a revision fails a request bound to a prefill of another
    revision (see `e2e.serving.emulator.revision`); unset on either side, nothing is checked."""

    def with_defaults_for(self, *, dtype: str, speculative: bool, num_draft_tokens: int | None) -> EmulateOptions:
        """Fill the defaults that depend on the server's arguments."""
        hidden_dtype = self.hidden_dtype or dtype_name(dtype)
        accept = self.accept_length
        if accept is None:
            accept = 2.0 if speculative else 1.0
            if speculative and num_draft_tokens:
                accept = min(accept, float(num_draft_tokens))
        return EmulateOptions(**{**self.as_dict(), "hidden_dtype": hidden_dtype, "accept_length": max(1.0, accept)})

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def dtype_name(dtype: str) -> str:
    """The torch dtype name `--dtype` resolves to (auto -> bfloat16, as for bf16 checkpoints like Llama 3.1)."""
    return {
        "auto": "bfloat16",
        "half": "float16",
        "float16": "float16",
        "bfloat16": "bfloat16",
        "float": "float32",
        "float32": "float32",
    }.get(dtype, dtype)


def _float(value: str) -> float:
    number = float(value)
    if number < 0:
        raise ValueError("must be >= 0")
    return number


def _positive(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise ValueError("must be > 0")
    return number


def _count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError("must be >= 0")
    return number


def _text(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    return value


def _choice(choices: Sequence[str]) -> Callable[[str], str]:
    def convert(value: str) -> str:
        if value not in choices:
            raise ValueError(f"one of {', '.join(choices)}")
        return value

    return convert


_CONVERTERS: Final[dict[str, Callable[[str], Any]]] = {
    "capacity": _choice(CAPACITY_MODES),
    "time_scale": _positive,
    "gpu": _text,
    "kv_pool_tokens": _count,
    "load_seconds": _float,
    "tokens_per_second": _positive,
    "prefill_tokens_per_second": _positive,
    "accept_length": _positive,
    "hidden_size": lambda v: int(_count(v)),
    "hidden_dtype": str,
    "fail": _choice(FAILS),
    "crash_after": _count,
    "fingerprint_mismatch": _choice(MISMATCH_MODES),
    "refused_prefill_backoff": _float,
    "vocab_size": lambda v: int(_count(v)),
    "output_tokens": _count,
    "context_length": _count,
    "kv_bytes_per_token": _count,
    "kv_transfer_gb_per_second": _positive,
    "ensure_retries": lambda v: max(1, _count(v)),
    "ensure_retry_interval": _float,
    "drain_poll_seconds": _positive,
    "bootstrap_port": _count,
    "revision": _text,
}
KEYS: Final[tuple[str, ...]] = tuple(name.replace("_", "-") for name in _CONVERTERS)
RUNTIME_KEYS: Final[tuple[str, ...]] = ("accept-length",)
"""Keys `POST /emulator/options` may change while the server runs (the emulated model's behaviour only)."""


def parse_options(items: Sequence[str]) -> EmulateOptions:
    """`key=value` items (keys with dashes, as in the annotations) -> EmulateOptions, or OptionError."""
    values: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        if not eq:
            raise OptionError(f"--emulate {item!r}: expected key=value")
        name = key.strip().replace("-", "_")
        converter = _CONVERTERS.get(name)
        if converter is None:
            raise OptionError(f"--emulate {key!r}: unknown key (known: {', '.join(KEYS)})")
        try:
            values[name] = converter(raw.strip())
        except ValueError as exc:
            raise OptionError(f"--emulate {key}={raw!r}: {exc}") from None
    if "crash_after" in values and "fail" not in values:
        values["fail"] = "crash"
    if RATE_KEYS & values.keys() and "capacity" not in values:
        values["capacity"] = "off"
    return EmulateOptions(**values)
