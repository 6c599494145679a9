"""Serving mode's pod runner: the kubelet double that runs one local process per container of the pods on kwok nodes.

`python -m e2e.serving {run,start,stop,status}` (see `__main__.py`); the launcher contract is in `plan.py`, the kubelet
duties (processes, probes, restarts, deletion) in `kubelet.py`, the watch and dispatch in `runner.py`.
"""

from __future__ import annotations


def log(message: str) -> None:
    print(f"[pod-runner] {message}", flush=True)
