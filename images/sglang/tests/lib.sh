# shellcheck shell=bash
# Sourced by images/sglang/tests/run.sh and images/sglang/flags.sh: the per-version SGLang test venv, built from
# requirements-<version>.txt and cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/disaggspec/sglang-venv-<version>-<sha256 of that file, 12 hex>/.
# sglang itself is never installed into it: callers put a tree of the pinned wheel on PYTHONPATH.

sglang_tests_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
sglang_cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/disaggspec

# ensure_venv VERSION: echo the path of a ready venv for that version, creating it if its requirements changed.
# A venv is ready once it has its `.complete` marker. Creation holds a lock (flock, where installed) next to the venv,
# so a second caller (say `make generate` while `run.sh` builds the same venv) waits for it instead of deleting it.
ensure_venv() {
  local version=$1 req=$sglang_tests_dir/requirements-$1.txt digest venv
  digest=$(sha256sum "$req" | cut -c1-12)
  venv=$sglang_cache_root/sglang-venv-$version-$digest
  if [[ ! -f $venv/.complete ]]; then
    mkdir -p "$sglang_cache_root"
    (
      if command -v flock >/dev/null; then
        flock 9
      fi
      if [[ ! -f $venv/.complete ]]; then
        echo "${0##*/}: creating $venv (cold: downloads torch and its CUDA libraries, several minutes)" >&2
        rm -rf "$venv"
        "${PYTHON:-python3}" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --no-input --disable-pip-version-check -r "$req" >&2
        touch "$venv/.complete"
      fi
    ) 9>"$venv.lock"
  fi
  echo "$venv"
}
