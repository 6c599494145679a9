"""Serving mode's pod runner: the kubelet double that runs one local process per container of the pods on kwok nodes.

`python -m e2e.serving {run,start,stop,status}` (see `__main__.py`); the launcher contract is in `plan.py`, the kubelet
duties (processes, probes, restarts, deletion) in `kubelet.py`, the watch and dispatch in `runner.py`, starting it in
the background in `daemon.py`. Its files under the cluster's state directory (`serving/runner.pid`, the process table
`serving/processes.json`) and stopping it are the control plane's (`e2e.cluster.servingdir`, `e2e.cluster.proctable`):
`LocalCluster.down` stops the runner, so this package builds on `e2e.cluster` and never the other way round.
"""

from __future__ import annotations


def log(message: str) -> None:
    print(f"[pod-runner] {message}", flush=True)
