#!/usr/bin/env bash
# CPU tests of the disaggspec SGLang patches, against the real modules of the pinned wheels.
# Usage: images/sglang/tests/run.sh [0.5.2|0.5.23|all]   (default: all)
#
# Per version:
#   1. check-patches.sh: every patch applies exactly (no fuzz, no offset) to the pinned wheel, unpacked and cached.
#   2. A venv from requirements-<version>.txt (lib.sh's ensure_venv), cached under
#      ${XDG_CACHE_HOME:-$HOME/.cache}/disaggspec/sglang-venv-<version>-<sha256 of that file, 12 hex>/.
#      sglang is not installed into it; the tree under test goes on PYTHONPATH, with tests/stubs/<version>/.
#   3. The suite against the UNPATCHED wheel; check_unpatched.py asserts that exactly the tests listed in
#      expected-unpatched-failures-<version>.txt fail, each with its listed reason (its output goes to a log,
#      shown only on a problem, so the only pytest summary printed is the patched run's).
#   4. The suite against a patched copy (apply_patches.py, the script the image build runs): everything passes.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh disable=SC1091
source "$here/lib.sh"
image_dir=$(dirname "$here")
python=${PYTHON:-python3}
target=${1:-all}
case $target in
  all) versions=(0.5.2 0.5.23) ;;
  0.5.2 | 0.5.23) versions=("$target") ;;
  *)
    echo "usage: $0 [0.5.2|0.5.23|all]" >&2
    exit 2
    ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/disaggspec-sglang-tests.XXXXXX")
trap 'rm -rf "$work"' EXIT

for version in "${versions[@]}"; do
  start=$SECONDS
  pristine=$("$image_dir/check-patches.sh" --print-tree "$version")
  venv=$(ensure_venv "$version")
  stubs=$here/stubs/$version
  patched=$work/patched-$version
  mkdir -p "$patched"
  cp -r "$pristine/sglang" "$patched/"
  "$python" "$image_dir/apply_patches.py" "$image_dir/patches/$version" --tree "$patched" --version "$version" \
    --record "$patched/applied-patches.txt" >/dev/null

  echo "== sglang $version: unpatched wheel (these tests must fail) =="
  set +e
  DISAGGSPEC_SGLANG_TREE=unpatched PYTHONPATH="$pristine:$stubs:$here" \
    "$venv/bin/python" -m pytest "$here" -q --junitxml="$work/unpatched-$version.xml" \
    >"$work/unpatched-$version.log" 2>&1
  set -e
  if [[ ! -s $work/unpatched-$version.xml ]] ||
    ! "$python" "$here/check_unpatched.py" "$work/unpatched-$version.xml" \
      "$here/expected-unpatched-failures-$version.txt"; then
    echo "run.sh: sglang $version: the unpatched run did not fail as expected; its output:" >&2
    cat "$work/unpatched-$version.log" >&2
    exit 1
  fi

  echo "== sglang $version: patched ($(tail -n +2 "$patched/applied-patches.txt" | wc -l) patches) =="
  DISAGGSPEC_SGLANG_TREE=patched PYTHONPATH="$patched:$stubs:$here" \
    "$venv/bin/python" -m pytest "$here" -q --junitxml="$work/patched-$version.xml"
  # A version whose every test skipped would prove nothing.
  if ! grep -q '<testcase' "$work/patched-$version.xml" ||
    ! "$python" - "$work/patched-$version.xml" <<'EOF'; then
import sys
import xml.etree.ElementTree as ET

cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
ran = [c for c in cases if not any(child.tag == "skipped" for child in c)]
sys.exit(0 if ran else 1)
EOF
    echo "run.sh: sglang $version: no test ran" >&2
    exit 1
  fi
  echo "run.sh: sglang $version done in $((SECONDS - start)) s"
done
