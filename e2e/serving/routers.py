"""The pinned PD routers, installed for real into cached venvs: what the serving simulation and its tests run.

`ensure_router_venv(router)` returns a venv holding exactly `pip install <package>==<version>` (the router's
`RouterProfile.requirement`), at `${XDG_CACHE_HOME:-~/.cache}/disaggspec/router-venv-<package>-<version>/`, the cache
root `e2e/cluster/build.py` uses. It is built once: in a scratch directory next to it, under an exclusive `flock` on
`router-venv-<package>-<version>.lock` (a second caller waits, then finds it built), and renamed into place only when
the install succeeded, so an interrupted build never leaves a half-filled venv behind. A venv is complete when it has
its `.complete` marker. The venv is started only as `<venv>/bin/python -m <module>` (the router's `launch` prefix),
never through console-script shebangs, which still name the scratch path after the rename.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Final

from disaggspec.sglang.profiles import RouterProfile
from e2e.cluster.build import cache_root

COMPLETE_MARKER: Final = ".complete"


def router_venv_dir(router: RouterProfile) -> Path:
    """Where the venv of `router` lives (whether or not it is built yet)."""
    return cache_root() / f"router-venv-{router.package}-{router.version}"


def router_python(router: RouterProfile) -> Path:
    """The Python of `router`'s venv (not built by this call: see `ensure_router_venv`)."""
    return router_venv_dir(router) / "bin" / "python"


def router_argv(router: RouterProfile) -> list[str]:
    """The router's launch prefix (`python3 -m ...`) with `python3` meaning its venv's Python."""
    return [str(router_python(router)), *router.launch[1:]]


def _is_complete(venv: Path) -> bool:
    return (venv / COMPLETE_MARKER).is_file() and (venv / "bin" / "python").exists()


def ensure_router_venv(router: RouterProfile, *, quiet: bool = True) -> Path:
    """The venv of `router` with exactly `router.requirement` installed, building it on first use (minutes, cold)."""
    venv = router_venv_dir(router)
    if _is_complete(venv):
        return venv
    root = venv.parent
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_complete(venv):
            return venv
        scratch = Path(tempfile.mkdtemp(prefix=f"{venv.name}.build-", dir=root))
        try:
            staged = scratch / "venv"
            # The project's PYTHONPATH (operator/, the repo) must not leak into pip's view of the new venv.
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
            subprocess.run([sys.executable, "-m", "venv", str(staged)], check=True, env=env)
            pip = [str(staged / "bin" / "python"), "-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
            if quiet:
                pip.append("--quiet")
            print(f"routers: installing {router.requirement} into {venv} (cold: a minute or two)", file=sys.stderr)
            subprocess.run([*pip, router.requirement], check=True, env=env)
            (staged / COMPLETE_MARKER).write_text(router.requirement + "\n")
            if venv.exists():  # an incomplete leftover of an older layout: never a venv another caller is using
                shutil.rmtree(venv)
            staged.rename(venv)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return venv


def main(argv: list[str] | None = None) -> int:
    """`python -m e2e.serving.routers [VERSION...]`: build the router venvs (of every supported release by default)."""
    from disaggspec.sglang.profiles import PROFILES

    versions = (argv if argv is not None else sys.argv[1:]) or list(PROFILES)
    for version in versions:
        router = PROFILES[version].router  # type: ignore[index]
        print(ensure_router_venv(router, quiet=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
