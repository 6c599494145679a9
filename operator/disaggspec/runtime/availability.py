"""Which optional APIs (CRDs another project installs, `apply.Kind.optional`) the cluster serves, as last seen.

Owns that record and nothing else; reads and writes no API itself. The `Controller` owns one `ApiAvailability` and
hands it to the informers and to the reconciler. The informer of an optional kind is the only writer: a LIST answered
404 marks the API absent, a LIST that works marks it present. Reconcile reads it to tell a service that needs the API
(a multi-node pool needs LeaderWorkerSet) why nothing is applied, instead of failing each pass on a 404. Unknown (no
LIST answered yet) counts as present: the apply then says what the API server says.
"""

from __future__ import annotations

import threading

from disaggspec import apply


class ApiAvailability:
    """Thread-safe record of which optional kinds the API server serves."""

    def __init__(self) -> None:
        self._absent: set[tuple[str, str]] = set()
        self._guard = threading.Lock()

    def mark(self, kind: apply.Kind, present: bool) -> bool:
        """Record what a LIST of `kind` found; True when that changes what was known."""
        key = (kind.api_version, kind.kind)
        with self._guard:
            was_absent = key in self._absent
            if present:
                self._absent.discard(key)
            else:
                self._absent.add(key)
            return was_absent == present

    def absent(self, api_version: str, kind: str) -> bool:
        """True only when the API server said it does not serve `kind` (and has not served it since)."""
        with self._guard:
            return (api_version, kind) in self._absent
