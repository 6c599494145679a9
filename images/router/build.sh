#!/usr/bin/env bash
# Build the PD router image for one supported SGLang release with docker buildx.
# Usage: images/router/build.sh VERSION [IMAGE]      VERSION: 0.5.2 | 0.5.23
#   The router package and version are the ones pinned in operator/disaggspec/sglang/profiles.py (a test fails when
#   this table drifts from it); IMAGE defaults to the profile's default image. DRY_RUN=1 prints the command instead
#   of running it; extra buildx flags go in BUILDX_FLAGS (e.g. "--push").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=${1:?usage: build.sh VERSION [IMAGE]}
case $version in
  0.5.2) package=sglang-router package_version=0.1.9 ;;
  0.5.23) package=smg package_version=1.13.0 ;;
  *)
    echo "build.sh: unsupported SGLang version $version (supported: 0.5.2, 0.5.23)" >&2
    exit 2
    ;;
esac
image=${2:-disaggspec/router:${package}-${package_version}}
read -r -a extra <<<"${BUILDX_FLAGS:-}"
cmd=(docker buildx build "$here" --file "$here/Dockerfile"
  --build-arg "ROUTER_PACKAGE=$package"
  --build-arg "ROUTER_VERSION=$package_version"
  --tag "$image" "${extra[@]}")
if [[ ${DRY_RUN:-0} == 1 ]]; then
  printf '%q ' "${cmd[@]}"
  echo
else
  "${cmd[@]}"
fi
