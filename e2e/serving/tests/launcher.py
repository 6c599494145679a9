"""The launcher of the pod runner's tests: containers whose command starts with `fakeserver` run `fakeserver.py`
with the container's resolved env plus POD_IP; every other container is not ours. Exec probes `fakeserver-check
<url>` run a local HTTP check."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from e2e.serving.plan import Launcher, ProcessPlan, container_env

SERVER = Path(__file__).resolve().parent / "fakeserver.py"
CHECK = "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)"


class FakeServerLauncher:
    def plan(self, pod: dict[str, Any], container: dict[str, Any]) -> ProcessPlan | None:
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        if not command or command[0] != "fakeserver":
            return None
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **container_env(container)}
        env["POD_IP"] = pod["status"]["podIP"]
        return ProcessPlan([sys.executable, str(SERVER), *command[1:]], env)

    def probe_command(self, pod: dict[str, Any], container: dict[str, Any], command: list[str]) -> list[str] | None:
        if command[:1] == ["fakeserver-check"]:
            return [sys.executable, "-c", CHECK, *command[1:]]
        return None


def fake_server_launcher() -> Launcher:
    return FakeServerLauncher()
