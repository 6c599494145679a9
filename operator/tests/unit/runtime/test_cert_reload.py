"""The webhook certificate watcher: a renewed certificate restarts the operator, an unchanged one never does."""

from __future__ import annotations

import threading
from pathlib import Path

from disaggspec.runtime.cert_reload import CertificateWatcher, content_digest


def _files(tmp_path: Path) -> list[Path]:
    paths = [tmp_path / name for name in ("tls.crt", "tls.key", "ca.crt")]
    for path in paths:
        path.write_text(f"old {path.name}")
    return paths


def test_content_digest_changes_with_content_and_with_a_file_appearing(tmp_path: Path) -> None:
    paths = _files(tmp_path)
    before = content_digest(paths)
    assert content_digest(paths) == before
    paths[1].write_text("new key")
    assert content_digest(paths) != before
    missing = [tmp_path / "ca.crt", tmp_path / "absent"]
    without = content_digest(missing)
    (tmp_path / "absent").write_text("")
    assert content_digest(missing) == without  # an empty file reads like a missing one; content is what matters
    (tmp_path / "absent").write_text("x")
    assert content_digest(missing) != without


def test_a_renewed_certificate_calls_on_change_once(tmp_path: Path) -> None:
    paths = _files(tmp_path)
    fired = threading.Event()
    calls: list[int] = []

    def on_change() -> None:
        calls.append(1)
        fired.set()

    watcher = CertificateWatcher(paths, interval=0.02, on_change=on_change).start()
    assert not fired.wait(0.2)  # unchanged files: no restart
    paths[0].write_text("renewed certificate")
    assert fired.wait(5)
    watcher.stop()
    assert calls == [1]
