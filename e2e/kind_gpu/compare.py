"""Verdicts of the kind-gpu suite: PD greedy outputs against the colocated server's, and accept-length ratios.

Pure functions returning a verdict with a message a person can act on: which prompt diverged and where, which accept
length came from which source, and by how much the PD pair fell short. The tests assert on `ok` and print `message`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

MIN_ACCEPT_RATIO: Final = 0.99
"""PD decode must accept at least this fraction of the colocated server's mean accept length."""
_CONTEXT: Final = 40


@dataclass(frozen=True)
class Verdict:
    """Whether a check passed, and what to tell the reader either way."""

    ok: bool
    message: str


def _first_difference(a: str, b: str) -> int:
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def greedy_outputs_match(prompts: Sequence[str], pd: Sequence[str], reference: Sequence[str]) -> Verdict:
    """Temperature-0 answers of the PD router must equal the colocated server's, prompt by prompt, exactly."""
    if not (len(prompts) == len(pd) == len(reference)):
        return Verdict(False, f"{len(prompts)} prompts but {len(pd)} PD and {len(reference)} reference answers")
    lines: list[str] = []
    for index, (prompt, got, want) in enumerate(zip(prompts, pd, reference, strict=True)):
        if got == want:
            continue
        at = _first_difference(got, want)
        start = max(0, at - _CONTEXT)
        lines.append(
            f"prompt {index} ({prompt[:50]!r}): first difference at character {at} "
            f"(PD {len(got)} chars, colocated {len(want)}): PD ...{got[start : at + _CONTEXT]!r} vs "
            f"colocated ...{want[start : at + _CONTEXT]!r}"
        )
    if lines:
        return Verdict(False, f"{len(lines)} of {len(prompts)} greedy answers differ:\n" + "\n".join(lines))
    return Verdict(True, f"all {len(prompts)} greedy answers are identical")


@dataclass(frozen=True)
class AcceptLengths:
    """Mean accept lengths of the PD decode server(s) and the colocated reference, and where they were read."""

    pd: float
    reference: float
    source: str


def choose_accept_lengths(
    pd_cumulative: float | None, reference_cumulative: float | None, pd_gauge: float | None, ref_gauge: float | None
) -> AcceptLengths | None:
    """Prefer the cumulative means (`avg_spec_accept_length`: every step since start, so both servers are measured
    over exactly the same requests); fall back to the `sglang:spec_accept_length` gauges, which only cover each
    server's last decode log window. None when neither pair is complete."""
    if pd_cumulative is not None and reference_cumulative is not None:
        return AcceptLengths(pd_cumulative, reference_cumulative, "avg_spec_accept_length (cumulative, server_info)")
    if pd_gauge is not None and ref_gauge is not None:
        return AcceptLengths(pd_gauge, ref_gauge, "sglang:spec_accept_length (last decode log window)")
    return None


def accept_length_verdict(lengths: AcceptLengths, min_ratio: float = MIN_ACCEPT_RATIO) -> Verdict:
    """PD accept length >= `min_ratio` x colocated. A reference without speculation (<= 1: only the bonus token) or a
    non-finite value is a failed measurement, not a pass."""
    if not 0 < min_ratio <= 1:
        raise ValueError(f"min_ratio must be in (0, 1], got {min_ratio}")
    pd, ref = lengths.pd, lengths.reference
    where = f"from {lengths.source}"
    if not (math.isfinite(pd) and math.isfinite(ref)):
        return Verdict(False, f"accept lengths are not finite numbers (PD {pd}, colocated {ref}) {where}")
    if ref <= 1.0:
        return Verdict(
            False,
            f"colocated accept length is {ref:.3f} {where}: at most the bonus token, so speculation never accepted a "
            "draft token on the reference and the comparison means nothing (check its --speculative-* flags and that "
            "requests reached it)",
        )
    ratio = pd / ref
    summary = f"PD {pd:.3f} / colocated {ref:.3f} = {ratio:.4f} (minimum {min_ratio}) {where}"
    if ratio + 1e-12 < min_ratio:
        return Verdict(
            False,
            f"PD decode accepts fewer draft tokens than the colocated server: {summary}. The draft state prefill "
            "hands to decode (hidden states, top-k) is likely wrong or missing",
        )
    return Verdict(True, summary)
