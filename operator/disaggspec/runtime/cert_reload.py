"""Restart the operator when its mounted webhook certificate changes (cert-manager renewals); no API access.

The entry point starts one `CertificateWatcher` when certificate files are mounted. kopf loads the serving
certificate and CA bundle once, when its webhook server starts, so a renewed certificate in the mounted Secret would
go unused until the old one expired and admission failed open. A daemon thread compares a digest of the files'
contents every `interval` seconds and, on a change, calls `on_change` (SIGTERM to this process: kopf stops cleanly
and the Deployment starts a fresh container with the new files).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)


def content_digest(paths: Sequence[Path]) -> str:
    """One SHA-256 digest of every file's content (a missing file counts as empty, so its appearance is a change
    too)."""
    digest = hashlib.sha256()
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _terminate() -> None:
    os.kill(os.getpid(), signal.SIGTERM)


class CertificateWatcher:
    """Polls `paths`; calls `on_change` once when their content differs from the start."""

    def __init__(
        self, paths: Sequence[Path], interval: float = 60.0, on_change: Callable[[], None] = _terminate
    ) -> None:
        self.paths = tuple(paths)
        self.interval = interval
        self.on_change = on_change
        self._initial = content_digest(self.paths)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cert-watcher", daemon=True)

    def start(self) -> CertificateWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.interval + 1)

    def changed(self) -> bool:
        return content_digest(self.paths) != self._initial

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.changed():
                log.warning("webhook certificate files changed (%s): restarting to serve them", self.paths)
                self.on_change()
                return
