"""The work queue collapses bursts, never runs one key twice at once, and retries failures."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Hashable

from disaggspec import metrics
from disaggspec.runtime.workqueue import WorkQueue


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


class _Throttled(Exception):
    """What `apply.ApiError` looks like to the queue when the server answered 429 with a `Retry-After`."""

    def __init__(self, retry_after: object) -> None:
        super().__init__("HTTP 429: too many requests")
        self.retry_after = retry_after


def test_a_retry_after_replaces_the_backoff_step_capped_at_the_backoff_maximum() -> None:
    attempts: list[float] = []
    asked = [0.4, 50.0, "soon", True]  # the second is capped at 0.5; a non-number or a bool means no retry_after

    def process(key: Hashable) -> None:
        attempts.append(time.monotonic())
        if len(attempts) <= len(asked):
            raise _Throttled(asked[len(attempts) - 1])

    queue = WorkQueue(process, backoff=(0.01, 0.02, 0.03, 0.04, 0.5))
    queue.start(1)
    queue.add("t")
    _wait(lambda: len(attempts) == 5)
    queue.stop()
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.4  # as asked, though the backoff step was 0.01
    assert 0.5 <= gaps[1] < 2.0  # 50 s asked, capped at the largest step
    assert gaps[2] < 0.3 and gaps[3] < 0.3  # back to the backoff steps (0.03, then 0.04)


def test_reset_backoff_re_adds_waiting_keys_at_once_and_forgets_failures() -> None:
    failing = {"a", "b"}
    processed: list[Hashable] = []

    def process(key: Hashable) -> None:
        processed.append(key)
        if key in failing:
            raise RuntimeError("API server unavailable")

    queue = WorkQueue(process, backoff=(30.0,))
    queue.start(2)
    queue.add("a")
    queue.add("b")
    queue.add("ok")
    _wait(lambda: queue.backing_off() == 2 and queue.pending() == 0)
    assert sorted(map(str, processed)) == ["a", "b", "ok"]

    failing.clear()  # the API server is back
    started = time.monotonic()
    queue.reset_backoff()
    _wait(lambda: processed.count("a") == 2 and processed.count("b") == 2, timeout=2)
    assert time.monotonic() - started < 2  # not the 30 s backoff
    _wait(lambda: queue.pending() == 0)
    assert queue.backing_off() == 0
    queue.reset_backoff()  # nothing waits: nothing is re-added
    time.sleep(0.1)
    queue.stop()
    assert processed.count("a") == 2 and processed.count("b") == 2 and processed.count("ok") == 1


def test_a_timer_replaced_by_a_reset_does_nothing_when_it_fires() -> None:
    processed: list[Hashable] = []
    fail = [True]

    def process(key: Hashable) -> None:
        processed.append(key)
        if fail[0]:
            fail[0] = False
            raise RuntimeError("boom")

    queue = WorkQueue(process, backoff=(0.2,))
    queue.start(1)
    queue.add("k")
    _wait(lambda: queue.backing_off() == 1)
    queue.reset_backoff()
    _wait(lambda: processed == ["k", "k"])
    time.sleep(0.4)  # past the original backoff: its timer was cancelled or is ignored
    queue.stop()
    assert processed == ["k", "k"]


def test_queue_metrics_move() -> None:
    def sample(name: str) -> float:
        value = metrics.REGISTRY.get_sample_value(name)
        assert value is not None
        return value

    now = [100.0]
    release = threading.Event()
    first = [True]

    def process(key: Hashable) -> None:
        release.wait(5)
        if key == "bad" and first[0]:
            first[0] = False
            raise RuntimeError("boom")

    queue = WorkQueue(process, backoff=(0.05,), clock=lambda: now[0])
    retries_before = sample("disaggspec_workqueue_retries_total")
    queue.start(1)
    assert sample("disaggspec_workqueue_oldest_item_seconds") == 0
    queue.add("bad")  # taken by the worker, which blocks on `release`
    _wait(lambda: queue.pending() == 1 and sample("disaggspec_workqueue_depth") == 0)
    queue.add("x")
    now[0] = 103.0
    queue.add("y")
    assert sample("disaggspec_workqueue_depth") == 2
    now[0] = 110.0
    assert sample("disaggspec_workqueue_oldest_item_seconds") == 10.0  # "x", queued at 100
    release.set()
    _wait(lambda: queue.pending() == 0 and queue.backing_off() == 0)
    assert sample("disaggspec_workqueue_depth") == 0
    assert sample("disaggspec_workqueue_oldest_item_seconds") == 0
    assert sample("disaggspec_workqueue_retries_total") == retries_before + 1
    queue.stop()
