"""A de-duplicating work queue of service keys with worker threads, as controllers use. The `Controller` owns one;
its workers run the reconcile passes (which write to the API: the queue itself sends no request).

Every watch event of a service or of one of its children only *marks* the service dirty. A key that is already
waiting is not queued twice, and a key that is being processed is queued again once, after the pass in hand, so a
burst of events (a Deployment's status moving through its rollout, say) collapses into one or two passes, and no key
is ever processed by two workers at once. Failed keys come back after a backoff (or after the `retry_after` seconds
the failure carries, e.g. an API server's `Retry-After`), and `resync_every` re-adds every known key on a period, as
informer resyncs do: every service is compared with the cached state of its children again even when no event
arrives. When the API server is reachable again after an outage, `reset_backoff` forgets every failure and re-adds
at once the keys still waiting out a backoff, instead of leaving them idle for up to a minute.

Metrics: `WORKQUEUE_DEPTH` (keys queued), `WORKQUEUE_RETRIES` (failures scheduled again) and
`WORKQUEUE_OLDEST_SECONDS` (age of the longest-queued key, read when scraped) describe the queue that was started.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence

from disaggspec import metrics

log = logging.getLogger("disaggspec.workqueue")

DEFAULT_BACKOFF: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


def _retry_after(error: BaseException) -> float | None:
    """The delay a failure asks for (its numeric, non-negative `retry_after` attribute), else None."""
    value = getattr(error, "retry_after", None)
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


class WorkQueue:
    """Keys in, `process(key)` called by `workers` threads; exceptions schedule a retry with backoff."""

    def __init__(
        self,
        process: Callable[[Hashable], object],
        backoff: Sequence[float] = DEFAULT_BACKOFF,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._process = process
        self._backoff = tuple(backoff)
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[Hashable] = deque()
        self._waiting: set[Hashable] = set()
        self._queued_at: dict[Hashable, float] = {}
        self._processing: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._retries: dict[Hashable, threading.Timer] = {}
        """Keys waiting out a backoff, with the timer that re-adds each (a timer no longer here does nothing)."""
        self._stopped = False
        self._stop = threading.Event()

    def add(self, key: Hashable) -> None:
        with self._cond:
            if key in self._processing:
                self._dirty.add(key)
            else:
                self._enqueue_locked(key)

    def add_after(self, key: Hashable, delay: float) -> None:
        timer = threading.Timer(delay, self.add, args=(key,))
        timer.daemon = True
        timer.start()

    def reset_backoff(self) -> None:
        """Forget every key's failures and re-add now each key waiting out a backoff (e.g. the API server is back)."""
        with self._cond:
            self._failures.clear()
            retries, self._retries = self._retries, {}
            for key, timer in retries.items():
                timer.cancel()
                if key in self._processing:
                    self._dirty.add(key)
                else:
                    self._enqueue_locked(key)
        if retries:
            log.info("backoff reset: %d key(s) re-queued", len(retries))

    def resync_every(self, period: float, keys: Callable[[], Iterable[Hashable]]) -> None:
        """Every `period` seconds, add each key `keys()` returns (already waiting ones are not queued twice)."""

        def loop() -> None:
            # Waits on its own Event: waiting on the workers' condition could swallow a notify meant for a worker.
            while not self._stop.wait(period):
                for key in keys():
                    self.add(key)

        threading.Thread(target=loop, name="resync", daemon=True).start()

    def start(self, workers: int) -> None:
        metrics.WORKQUEUE_OLDEST_SECONDS.set_function(self.oldest_seconds)
        with self._cond:
            metrics.WORKQUEUE_DEPTH.set(len(self._queue))
        for index in range(workers):
            threading.Thread(target=self._work, name=f"reconcile-{index}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._stopped = True
            for timer in self._retries.values():
                timer.cancel()
            self._retries.clear()
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._processing)

    def backing_off(self) -> int:
        """How many keys are waiting out a backoff (not queued yet)."""
        with self._cond:
            return len(self._retries)

    def oldest_seconds(self) -> float:
        """How long the key at the head of the queue has waited (0 when none waits, or once stopped)."""
        with self._cond:
            if self._stopped or not self._queue:
                return 0.0
            return max(self._clock() - self._queued_at[self._queue[0]], 0.0)

    def _enqueue_locked(self, key: Hashable) -> None:
        """Queue `key` unless it already waits; the caller holds `_cond` and knows `key` is not being processed."""
        if key in self._waiting:
            return
        self._waiting.add(key)
        self._queue.append(key)
        self._queued_at[key] = self._clock()
        metrics.WORKQUEUE_DEPTH.set(len(self._queue))
        self._cond.notify()

    def _next(self) -> Hashable | None:
        with self._cond:
            while not self._queue and not self._stopped:
                self._cond.wait()
            if self._stopped:
                return None
            key = self._queue.popleft()
            self._waiting.discard(key)
            self._queued_at.pop(key, None)
            metrics.WORKQUEUE_DEPTH.set(len(self._queue))
            self._processing.add(key)
            return key

    def _done(self, key: Hashable) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._enqueue_locked(key)

    def _retry(self, key: Hashable, timer: threading.Timer) -> None:
        """A backoff timer fired: re-add `key`, unless a reset, a success or a newer failure replaced this timer."""
        with self._cond:
            if self._retries.get(key) is not timer:
                return
            del self._retries[key]
            if key in self._processing:
                self._dirty.add(key)
            else:
                self._enqueue_locked(key)

    def _failed(self, key: Hashable, error: Exception) -> None:
        with self._cond:
            attempt = self._failures.get(key, 0)
            self._failures[key] = attempt + 1
            delay = self._backoff[min(attempt, len(self._backoff) - 1)]
            asked = _retry_after(error)
            if asked is not None:
                delay = min(asked, max(self._backoff))
            previous = self._retries.pop(key, None)
            if previous is not None:
                previous.cancel()
            if self._stopped:
                return
            timer = threading.Timer(delay, lambda: self._retry(key, timer))
            timer.daemon = True
            self._retries[key] = timer
            timer.start()
        metrics.WORKQUEUE_RETRIES.inc()
        how = "as the server asked" if asked is not None else "backoff"
        log.warning(
            "processing %s failed (attempt %d), retrying in %.1fs (%s): %s", key, attempt + 1, delay, how, error
        )

    def _succeeded(self, key: Hashable) -> None:
        with self._cond:
            self._failures.pop(key, None)
            # This pass ran after the failure a pending retry was for: the retry has nothing left to do.
            pending = self._retries.pop(key, None)
            if pending is not None:
                pending.cancel()

    def _work(self) -> None:
        while (key := self._next()) is not None:
            try:
                self._process(key)
            except Exception as error:
                self._failed(key, error)
            else:
                self._succeeded(key)
            finally:
                self._done(key)
