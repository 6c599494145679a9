"""A stand-in server for the pod runner's tests, run by `launcher.py` for containers whose command is `fakeserver`.

  fakeserver http --port P [--delay S] [--ignore-sigterm] [--spawn-child]
                                                            serve on $POD_IP:P after S seconds: GET / answers the
                                                            pod name and a few env values as JSON, /health 200,
                                                            anything else 404; --spawn-child also starts a `sleep`
                                                            child (recorded as "child <pid>")
  fakeserver crash --code N [--after S]                     exit with code N after S seconds

Every mode appends what happens to it (start, SIGTERM) to $MARKER_DIR/<pod>.events, so a test can prove a signal
arrived. With --ignore-sigterm the server records SIGTERM and keeps serving (only SIGKILL ends it).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType


def mark(what: str) -> None:
    directory = os.environ.get("MARKER_DIR")
    if directory:
        with (Path(directory) / f"{os.environ.get('POD_NAME', 'unknown')}.events").open("a") as out:
            out.write(f"{what} {os.getpid()}\n" if " " not in what else f"{what}\n")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/health":
            body, code = b"ok", 200
        elif self.path == "/":
            answer = {key: os.environ.get(key, "") for key in ("POD_NAME", "POD_IP", "GREETING", "FROM_CONFIGMAP")}
            body, code = json.dumps(answer).encode(), 200
        else:
            body, code = b"not found", 404
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=("http", "crash"))
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--code", type=int, default=1)
    parser.add_argument("--after", type=float, default=0.0)
    args = parser.parse_args()
    mark("start")
    if args.mode == "crash":
        time.sleep(args.after)
        print(f"crashing with code {args.code}", flush=True)
        return int(args.code)

    stop = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        mark("sigterm-ignored" if args.ignore_sigterm else "sigterm")
        if not args.ignore_sigterm:
            stop.set()

    signal.signal(signal.SIGTERM, on_sigterm)
    if args.spawn_child:
        # A grandchild of the runner that ignores SIGTERM: only killing the whole session ends it.
        child = subprocess.Popen(["sleep", "600"], preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
        mark(f"child {child.pid}")
    time.sleep(args.delay)
    server = ThreadingHTTPServer((os.environ["POD_IP"], args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"listening on {os.environ['POD_IP']}:{args.port}", flush=True)
    while not stop.wait(0.2):
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
