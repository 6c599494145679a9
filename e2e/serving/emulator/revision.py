"""Cross-revision pairing: a test oracle of the serving simulation, not SGLang behaviour.

During a coordinated rollout two revisions of a service serve side by side, and each revision's router must pair a
request's prefill and decode within its own revision (on GPUs a pair of different speculative configurations reads
the draft state as garbage, and SGLang 0.5.2 does not even notice). So that a test can prove no pair ever crossed,
each emulator may carry the revision it belongs to (`--emulate revision=...`, the pod's spec-fingerprint label). The
prefill's bootstrap server answers the decode's per-room message (the emulator-only part of the handshake, the same
for both releases) with its revision; when both are set and differ, the decode fails the request with HTTP 500 and
the prefill's bootstrap server fails the room, so both halves end at once with this module's message.
"""

from __future__ import annotations

from typing import Final

MARKER: Final = "cross-revision pairing"
"""What every error text of this oracle starts with (and what a test greps the decode's log for)."""


def conflict(decode: str | None, prefill: str | None) -> bool:
    """Whether a decode of revision `decode` must refuse a prefill of revision `prefill`: both set and different."""
    return decode is not None and prefill is not None and decode != prefill


def message(*, prefill: str, prefill_revision: str | None, decode: str, decode_revision: str | None, room: int) -> str:
    """The error text both halves report, naming both sides and both revisions."""
    return (
        f"{MARKER}: prefill {prefill} (revision {prefill_revision}) and decode {decode} (revision {decode_revision}) "
        f"for bootstrap_room={room}; refused by the emulator's test oracle (not SGLang behaviour)"
    )
