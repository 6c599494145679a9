"""A de-duplicating work queue of service keys with worker threads, as controllers use.

Every watch event of a service or of one of its children only *marks* the service dirty. A key that is already
waiting is not queued twice, and a key that is being processed is queued again once, after the pass in hand, so a
burst of events (a Deployment's status moving through its rollout, say) collapses into one or two passes, and no key
is ever processed by two workers at once. Failed keys come back after a backoff, and `resync_every` re-adds every
known key on a period, as informer resyncs do: every service is compared with the cached state of its children again
even when no event arrives.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence

log = logging.getLogger("disaggspec.workqueue")

DEFAULT_BACKOFF: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


class WorkQueue:
    """Keys in, `process(key)` called by `workers` threads; exceptions schedule a retry with backoff."""

    def __init__(self, process: Callable[[Hashable], object], backoff: Sequence[float] = DEFAULT_BACKOFF) -> None:
        self._process = process
        self._backoff = tuple(backoff)
        self._cond = threading.Condition()
        self._queue: deque[Hashable] = deque()
        self._waiting: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._dirty: set[Hashable] = set()
        self._failures: dict[Hashable, int] = {}
        self._stopped = False
        self._stop = threading.Event()

    def add(self, key: Hashable) -> None:
        with self._cond:
            if key in self._processing:
                self._dirty.add(key)
            elif key not in self._waiting:
                self._waiting.add(key)
                self._queue.append(key)
                self._cond.notify()

    def add_after(self, key: Hashable, delay: float) -> None:
        timer = threading.Timer(delay, self.add, args=(key,))
        timer.daemon = True
        timer.start()

    def resync_every(self, period: float, keys: Callable[[], Iterable[Hashable]]) -> None:
        """Every `period` seconds, add each key `keys()` returns (already waiting ones are not queued twice)."""

        def loop() -> None:
            # Waits on its own Event: waiting on the workers' condition could swallow a notify meant for a worker.
            while not self._stop.wait(period):
                for key in keys():
                    self.add(key)

        threading.Thread(target=loop, name="resync", daemon=True).start()

    def start(self, workers: int) -> None:
        for index in range(workers):
            threading.Thread(target=self._work, name=f"reconcile-{index}", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._processing)

    def _next(self) -> Hashable | None:
        with self._cond:
            while not self._queue and not self._stopped:
                self._cond.wait()
            if self._stopped:
                return None
            key = self._queue.popleft()
            self._waiting.discard(key)
            self._processing.add(key)
            return key

    def _done(self, key: Hashable) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                if key not in self._waiting:
                    self._waiting.add(key)
                    self._queue.append(key)
                    self._cond.notify()

    def _work(self) -> None:
        while (key := self._next()) is not None:
            try:
                self._process(key)
            except Exception as error:
                attempt = self._failures.get(key, 0)
                self._failures[key] = attempt + 1
                delay = self._backoff[min(attempt, len(self._backoff) - 1)]
                log.warning("processing %s failed (attempt %d), retrying in %.0fs: %s", key, attempt + 1, delay, error)
                self.add_after(key, delay)
            else:
                self._failures.pop(key, None)
            finally:
                self._done(key)
