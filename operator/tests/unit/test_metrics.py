"""metrics.ConditionTally: its incremental updates keep SERVICES_BY_CONDITION equal to a recount of every service."""

from __future__ import annotations

import random
from collections import Counter

from disaggspec import metrics

# Condition types of this test only: the process-wide TALLY of other tests never moves these series.
TYPES = ("TallyReady", "TallyDegraded", "TallyConsistent")
STATUSES = ("True", "False", "Unknown")


def _samples() -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for type_ in TYPES:
        for status in STATUSES:
            labels = {"condition": type_, "status": status}
            found[(type_, status)] = metrics.REGISTRY.get_sample_value("disaggspec_services", labels) or 0.0
    return found


def _recount(latest: dict[str, dict[str, str]]) -> dict[tuple[str, str], float]:
    counts = Counter((type_, status) for conditions in latest.values() for type_, status in conditions.items())
    return {(type_, status): float(counts[(type_, status)]) for type_ in TYPES for status in STATUSES}


def test_recorded_changed_and_forgotten_services_match_a_recount() -> None:
    tally = metrics.ConditionTally()
    latest: dict[str, dict[str, str]] = {}

    def record(key: str, conditions: dict[str, str] | None) -> None:
        tally.record(key, conditions)
        if conditions is None:
            latest.pop(key, None)
        else:
            latest[key] = dict(conditions)
        assert _samples() == _recount(latest)

    record("ns/a", {"TallyReady": "False", "TallyDegraded": "False", "TallyConsistent": "True"})
    record("ns/b", {"TallyReady": "False", "TallyDegraded": "True", "TallyConsistent": "True"})
    record("ns/c", {"TallyReady": "Unknown"})
    record("ns/a", {"TallyReady": "True", "TallyDegraded": "False", "TallyConsistent": "True"})  # changed
    record("ns/a", {"TallyReady": "True", "TallyDegraded": "False", "TallyConsistent": "True"})  # unchanged
    record("ns/c", {"TallyReady": "True", "TallyDegraded": "False"})  # gained a condition
    record("ns/b", {"TallyConsistent": "False"})  # lost two
    record("ns/b", None)  # forgotten
    record("ns/b", None)  # forgotten twice: no change
    record("ns/never-seen", None)
    assert _samples()[("TallyReady", "True")] == 2

    rng = random.Random(13)
    for _ in range(300):
        key = f"ns/s{rng.randrange(12)}"
        if rng.random() < 0.2:
            record(key, None)
        else:
            chosen = rng.sample(TYPES, rng.randrange(len(TYPES) + 1))
            record(key, {type_: rng.choice(STATUSES) for type_ in chosen})
    for key in list(latest):
        record(key, None)
    assert set(_samples().values()) == {0.0}
