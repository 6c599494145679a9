#!/usr/bin/env python3
"""Readiness helper of the disaggspec router image: exit 0 only when the router can serve prefill/decode requests.

The operator calls it as the router container's exec readiness probe when the pinned router switches to its
multi-model mode under service discovery (smg), where the router's own /readiness counts any one healthy worker. It
reads the router's worker list (GET /workers: `worker_type` prefill|decode, `is_healthy`) and requires at least one
healthy prefill and one healthy decode worker. The router only discovers pods of its own spec fingerprint (its
selectors carry the fingerprint label), so these workers can be paired. Standard library only; it prints why it is
not ready, which the kubelet records in the pod's events.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from collections import Counter


def healthy_roles(workers: list[dict[str, object]]) -> Counter[str]:
    """How many healthy workers each role has."""
    return Counter(str(w.get("worker_type")) for w in workers if w.get("is_healthy") is True)


def verdict(payload: object) -> str | None:
    """None when ready, else the reason."""
    workers = payload.get("workers") if isinstance(payload, dict) else None
    if not isinstance(workers, list):
        return "the router's /workers answer has no worker list"
    roles = healthy_roles([w for w in workers if isinstance(w, dict)])
    missing = [role for role in ("prefill", "decode") if roles[role] == 0]
    if missing:
        return f"no healthy {' or '.join(missing)} worker (healthy: {dict(roles) or 'none'})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://localhost:8000", help="the router's HTTP base URL")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for the router")
    args = parser.parse_args(argv)
    try:
        with urllib.request.urlopen(f"{args.url.rstrip('/')}/workers", timeout=args.timeout) as response:
            payload = json.load(response)
    except (OSError, urllib.error.URLError, ValueError) as error:
        print(f"not ready: the router does not answer /workers: {error}", file=sys.stderr)
        return 1
    reason = verdict(payload)
    if reason is not None:
        print(f"not ready: {reason}", file=sys.stderr)
        return 1
    print("ready: healthy prefill and decode workers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
