"""The work queue collapses bursts, never runs one key twice at once, and retries failures."""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable

from disaggspec.workqueue import WorkQueue


def _wait(predicate: object, timeout: float = 5.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_burst_for_one_key_collapses_and_never_overlaps() -> None:
    started = threading.Event()
    release = threading.Event()
    calls: list[Hashable] = []
    running = 0
    overlap = False

    def process(key: Hashable) -> None:
        nonlocal running, overlap
        running += 1
        overlap = overlap or running > 1
        calls.append(key)
        started.set()
        release.wait()
        running -= 1

    queue = WorkQueue(process)
    queue.start(4)
    queue.add("a")
    started.wait(5)
    for _ in range(50):  # events arriving while "a" is being processed
        queue.add("a")
    release.set()
    _wait(lambda: queue.pending() == 0)
    queue.stop()
    assert calls == ["a", "a"]
    assert not overlap


def test_a_failing_key_is_retried_with_backoff() -> None:
    attempts: list[float] = []

    def process(key: Hashable) -> None:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise RuntimeError("API server unavailable")

    queue = WorkQueue(process, backoff=(0.05, 0.1))
    queue.start(1)
    queue.add("b")
    _wait(lambda: len(attempts) >= 3)
    queue.stop()
    assert attempts[1] - attempts[0] >= 0.05
    assert attempts[2] - attempts[1] >= 0.1


def test_resync_re_adds_every_known_key_each_period_until_stopped() -> None:
    processed: list[Hashable] = []
    known = ["x", "y"]
    queue = WorkQueue(processed.append)
    queue.start(1)
    queue.resync_every(0.05, lambda: list(known))
    _wait(lambda: processed.count("x") >= 3 and processed.count("y") >= 3)
    known.remove("y")
    seen_y = processed.count("y")
    _wait(lambda: processed.count("x") >= seen_y + 6)
    queue.stop()
    assert processed.count("y") <= seen_y + 1  # at most the round already in flight
    after_stop = len(processed)
    time.sleep(0.2)
    assert len(processed) == after_stop


def test_a_waiting_resync_never_swallows_the_wake_up_of_a_worker() -> None:
    processed: list[Hashable] = []
    queue = WorkQueue(processed.append)
    queue.start(1)
    queue.resync_every(3600, list)  # waits the whole test
    for index in range(20):
        queue.add(index)
        _wait(lambda i=index: i in processed, timeout=2)  # type: ignore[misc]
    queue.stop()
    assert processed == list(range(20))
