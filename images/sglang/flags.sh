#!/usr/bin/env bash
# Generate, or check, operator/disaggspec/sglang/_flags_<version>.py from the real server-args parser of the pinned
# sglang wheel (what `make generate` and `make verify` run). Per version: the pristine wheel tree
# (check-patches.sh --print-tree, cached), the cached test venv (tests/lib.sh's ensure_venv, shared with
# tests/run.sh), then operator/tools/flags.py run by that venv's python with the tree (and tests/stubs/<version>/)
# on PYTHONPATH. `check` writes nothing and exits 1 with a diff when a committed module is stale.
# Usage: images/sglang/flags.sh [generate|check] [0.5.2|0.5.23|all]   (defaults: generate all)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# lib.sh is checked on its own too (shellcheck follows it when given it as input, or with -x).
# shellcheck source-path=SCRIPTDIR source=tests/lib.sh disable=SC1091
source "$here/tests/lib.sh"

usage() {
  echo "usage: $0 [generate|check] [0.5.2|0.5.23|all]" >&2
  exit 2
}
case ${1:-generate} in
  generate) check=() ;;
  check) check=(--check) ;;
  *) usage ;;
esac
case ${2:-all} in
  all) versions=(0.5.2 0.5.23) ;;
  0.5.2 | 0.5.23) versions=("$2") ;;
  *) usage ;;
esac

stale=0
for version in "${versions[@]}"; do
  pristine=$("$here/check-patches.sh" --print-tree "$version" 2>/dev/null) ||
    pristine=$("$here/check-patches.sh" --print-tree "$version") # again, to show why it failed
  venv=$(ensure_venv "$version")
  # The tree first, so `sglang` (and its dist-info) come from the pinned wheel; operator/ last, for `tools`.
  if ! PYTHONPATH="$pristine:$here/tests/stubs/$version:$repo/operator" \
    "$venv/bin/python" -m tools.flags --version "$version" --root "$repo" "${check[@]}"; then
    stale=1
  fi
done
exit "$stale"
