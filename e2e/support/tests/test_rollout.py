"""The rollout watchers' parts that need no cluster: counting ready pods per role and revision, the sampler against a
fake pod list, and finding cross-revision pairings in a traffic report and in pod logs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from e2e.serving.traffic import Load, Outcome, Report
from e2e.support.rollout import ROLES, capacity_sampler, count_ready, cross_revision, oracle_refusals

OLD, NEW = "00000000000000aa", "00000000000000bb"


def pod(role: str, fingerprint: str | None, *, ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    labels = {"disaggspec.io/service": "llama", "disaggspec.io/role": role}
    if fingerprint is not None:
        labels["disaggspec.io/spec-fingerprint"] = fingerprint
    meta: dict[str, Any] = {"name": f"{role}-{fingerprint}", "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def test_count_ready_per_role_with_fingerprints() -> None:
    pods = [
        pod("prefill", OLD),
        pod("prefill", NEW),
        pod("prefill", NEW, ready=False),
        pod("decode", OLD, deleting=True),
        pod("decode", NEW),
        pod("router", None),
        pod("other", OLD),
    ]
    sample = count_ready(pods, at=12.5)
    assert sample.at == 12.5
    assert dict(sample.ready) == {"prefill": 2, "decode": 1, "router": 1}
    assert dict(sample.fingerprints) == {
        "prefill": frozenset({OLD, NEW}),
        "decode": frozenset({NEW}),
        "router": frozenset(),
    }
    # A multi-node group is one server: its leader counts, its workers (Ready too) do not.
    leader, worker = pod("prefill", NEW), pod("prefill", NEW)
    leader["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "0"
    worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"] = "1"
    assert count_ready([leader, worker], at=1.0).ready["prefill"] == 1
    empty = count_ready([], at=0.0)
    assert dict(empty.ready) == dict.fromkeys(ROLES, 0)


class FakePods:
    """A pod list that changes as a test says; `fail` makes the next listing fail."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.fail = False

    def request(self, method: str, path: str, *, query: dict[str, Any] | None = None) -> Any:
        assert path == "/api/v1/namespaces/ns/pods" and query == {"labelSelector": "disaggspec.io/service=llama"}
        if self.fail:
            raise OSError("connection refused")
        return {"items": list(self.pods)}


def test_sampler_records_the_minimum_and_survives_api_failures() -> None:
    api = FakePods([pod("prefill", OLD), pod("decode", OLD), pod("router", OLD)])
    with capacity_sampler(api, "ns", "llama", interval=0.02) as sampler:
        assert len(sampler.samples) == 1  # taken on entry
        time.sleep(0.1)
        api.pods = [pod("prefill", NEW), pod("decode", OLD), pod("router", OLD)]
        api.fail = True
        time.sleep(0.1)
        api.fail = False
        time.sleep(0.1)
        api.pods = [pod("prefill", NEW), pod("router", OLD)]  # a decode gap
        time.sleep(0.1)
    count = len(sampler.samples)
    time.sleep(0.1)
    assert len(sampler.samples) == count  # stopped with the block
    assert sampler.errors >= 1 and "connection refused" in sampler.last_error
    assert (sampler.minimum("prefill"), sampler.minimum("decode"), sampler.maximum("router")) == (1, 0, 1)
    assert sampler.below("decode", 1) and not sampler.below("prefill", 1)
    assert {fp for s in sampler.samples for fp in s.fingerprints["prefill"]} == {OLD, NEW}
    times = [s.at for s in sampler.samples]
    assert times == sorted(times)


def outcome(index: int, *, error: str = "", prefill: str | None = None, decode: str | None = None) -> Outcome:
    return Outcome(
        index,
        "completions",
        False,
        not error,
        500 if error else 200,
        0.1,
        0.1,
        error,
        prefill_revision=prefill,
        decode_revision=decode,
    )


def test_cross_revision_finds_refusals_and_mixed_pairs() -> None:
    report = Report(Load(url="http://127.0.0.1:1", model="m"))
    report.outcomes = [
        outcome(0, prefill=OLD, decode=OLD),
        outcome(1, error=f"cross-revision pairing: prefill 127.0.0.2:8998 (revision {NEW}) and decode ..."),
        outcome(2, prefill=OLD, decode=NEW),
        outcome(3, error="Decode transfer failed"),
        outcome(4, prefill=None, decode=NEW),
    ]
    assert [o.index for o in cross_revision(report)] == [1, 2]


def test_oracle_refusals_greps_the_container_logs(tmp_path: Path) -> None:
    (tmp_path / "ns_llama-decode-x_sglang.log").write_text("ok\n[..] ERROR cross-revision pairing: prefill a\n")
    (tmp_path / "ns_llama-prefill-y_sglang.log").write_text("nothing to see\n")
    assert oracle_refusals(tmp_path) == ["ns_llama-decode-x_sglang.log: [..] ERROR cross-revision pairing: prefill a"]
    assert oracle_refusals(tmp_path / "missing") == []
