#!/usr/bin/env bash
# Verify that every patch of patches/<version>/ applies exactly to the pinned sglang wheel: with the strict applier
# (no fuzz, no offset, all or nothing) and, where GNU patch is installed, with `patch --fuzz=0` as an independent
# reader of the same diffs, failing on any offset or fuzz it reports. Prints the pristine tree's path on success
# when asked with --print-tree. The wheel and its unpacked tree are cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/disaggspec/. Usage: check-patches.sh [--print-tree] [0.5.2|0.5.23|all]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/disaggspec
python=${PYTHON:-python3}
print_tree=0
if [[ ${1:-} == --print-tree ]]; then
  print_tree=1
  shift
fi
target=${1:-all}
case $target in
  all) versions=(0.5.2 0.5.23) ;;
  0.5.2 | 0.5.23) versions=("$target") ;;
  *)
    echo "usage: $0 [--print-tree] [0.5.2|0.5.23|all]" >&2
    exit 2
    ;;
esac

# pristine_tree VERSION: download (once) and unpack (once) the pinned wheel; echo the tree's path.
pristine_tree() {
  local version=$1 wheels=$cache_root/wheels tree=$cache_root/sglang-tree-$1 wheel
  mkdir -p "$wheels"
  wheel=$(find "$wheels" -maxdepth 1 -name "sglang-${version}-*.whl" | head -n 1)
  if [[ -z $wheel ]]; then
    "$python" -m pip download --quiet --no-deps --dest "$wheels" "sglang==${version}" >&2
    wheel=$(find "$wheels" -maxdepth 1 -name "sglang-${version}-*.whl" | head -n 1)
  fi
  if [[ ! -f $tree/.complete || $(cat "$tree/.complete") != "$(basename "$wheel")" ]]; then
    rm -rf "$tree"
    mkdir -p "$tree"
    "$python" -m zipfile -e "$wheel" "$tree"
    basename "$wheel" >"$tree/.complete"
  fi
  echo "$tree"
}

for version in "${versions[@]}"; do
  tree=$(pristine_tree "$version")
  "$python" "$here/apply_patches.py" "$here/patches/$version" --tree "$tree" --version "$version" --check >&2
  if command -v patch >/dev/null; then
    scratch=$(mktemp -d)
    cp -r "$tree/sglang" "$scratch/"
    for p in "$here/patches/$version"/*.patch; do
      if ! out=$(patch --dry-run --batch --forward --fuzz=0 -p1 -d "$scratch" <"$p" 2>&1); then
        echo "check-patches: $(basename "$p") does not apply to sglang $version:" >&2
        echo "$out" >&2
        rm -rf "$scratch"
        exit 1
      fi
      if grep -qiE 'offset|fuzz' <<<"$out"; then
        echo "check-patches: $(basename "$p") applies only with offset/fuzz to sglang $version:" >&2
        echo "$out" >&2
        rm -rf "$scratch"
        exit 1
      fi
      # Apply for real in the scratch copy, so later patches are checked on top of earlier ones.
      patch --batch --forward --fuzz=0 -p1 -d "$scratch" --quiet <"$p"
    done
    rm -rf "$scratch"
  fi
  echo "check-patches: sglang $version: $(find "$here/patches/$version" -name '*.patch' | wc -l) patches apply exactly" >&2
  if ((print_tree)); then
    echo "$tree"
  fi
done
