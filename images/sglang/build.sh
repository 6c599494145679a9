#!/usr/bin/env bash
# Build the patched SGLang image for one supported version with docker buildx.
# Usage: images/sglang/build.sh VERSION [IMAGE]      VERSION: 0.5.2 | 0.5.23
#   IMAGE defaults to disaggspec/sglang:v<VERSION>-disaggspec; SGLANG_IMAGE_TAG overrides the upstream base tag;
#   DRY_RUN=1 prints the command instead of running it; extra buildx flags go in BUILDX_FLAGS (e.g. "--push").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${1:?usage: build.sh VERSION [IMAGE]}
image=${2:-disaggspec/sglang:v${version}-disaggspec}
case $version in
  # 0.5.2 shipped CUDA 12.6 images; CUDA 12 tags stopped after v0.5.19-cu129, later releases are -cu130.
  0.5.2) default_tag=v0.5.2-cu126 ;;
  0.5.23) default_tag=v0.5.23-cu130 ;;
  *)
    echo "build.sh: unsupported SGLang version $version (supported: 0.5.2, 0.5.23)" >&2
    exit 2
    ;;
esac
patches=$(find "$here/patches/$version" -maxdepth 1 -name '*.patch' -printf '%f\n' | LC_ALL=C sort | paste -sd, -)
read -r -a extra <<<"${BUILDX_FLAGS:-}"
cmd=(docker buildx build "$here" --file "$here/Dockerfile"
  --build-context "operator-src=$here/../../operator/disaggspec"
  --build-arg "SGLANG_VERSION=$version"
  --build-arg "SGLANG_IMAGE_TAG=${SGLANG_IMAGE_TAG:-$default_tag}"
  --build-arg "SGLANG_PATCHES=$patches"
  --tag "$image" "${extra[@]}")
if [[ ${DRY_RUN:-0} == 1 ]]; then
  printf '%q ' "${cmd[@]}"
  echo
else
  "${cmd[@]}"
fi
