#!/usr/bin/env bash
# The kind-gpu end-to-end backend: a kind cluster with real NVIDIA GPUs, the patched SGLang and operator images, the
# chart, and the GPU serving suite (e2e/tests/test_serving_gpu.py). Runs on a Linux host with NVIDIA GPUs and Docker;
# never in CI. e2e/kind_gpu/README.md documents every variable.
#
# Usage: e2e/kind_gpu/run.sh [--dry-run] [preflight|up|images|install|test|down|all]...   (default: all)
#   all = preflight up images install test (the cluster is left running; `down` deletes it).
#   --dry-run (or DRY_RUN=1) prints every command with its resolved values and runs none that needs docker, kind,
#   helm, kubectl or a GPU; it still renders and validates the manifests with the repository's Python.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

dry_run=${DRY_RUN:-0}
steps=()
for arg in "$@"; do
  case $arg in
    --dry-run | -n) dry_run=1 ;;
    -h | --help)
      sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    preflight | up | images | install | test | down | all) steps+=("$arg") ;;
    *)
      echo "run.sh: unknown argument '$arg' (steps: preflight up images install test down all; flag: --dry-run)" >&2
      exit 2
      ;;
  esac
done
[[ ${#steps[@]} -gt 0 ]] || steps=(all)

# ---- settings (every one overridable from the environment) ---------------------------------------------------------
python=${E2E_PYTHON:-$repo/.venv/bin/python}
[[ -x $python ]] || python=python3
export E2E_SGLANG_VERSION=${E2E_SGLANG_VERSION:-0.5.2}
export E2E_SGLANG_IMAGE=${E2E_SGLANG_IMAGE:-disaggspec/sglang:v${E2E_SGLANG_VERSION}-disaggspec}
export E2E_CLUSTER_NAME=${E2E_CLUSTER_NAME:-disaggspec-gpu}
export E2E_GPUS=${E2E_GPUS:-all}
export E2E_MODEL_SOURCE=${E2E_MODEL_SOURCE:-hf}
operator_image=${E2E_OPERATOR_IMAGE:-disaggspec/operator:0.1.0}
skip_build=${E2E_SKIP_BUILD:-0}
mooncake_upgrade=${E2E_MOONCAKE_VERSION:-}
mooncake_min=0.3.6
kind_node_image=${E2E_KIND_NODE_IMAGE:-}
if [[ -n $mooncake_upgrade ]]; then
  # The suite runs a thin layer over the patched image with a newer Mooncake engine (built by the images step); the
  # name is derived, so every step of every invocation with the same variables agrees on it.
  base_sglang_image=$E2E_SGLANG_IMAGE
  E2E_SGLANG_IMAGE=$E2E_SGLANG_IMAGE-mooncake$mooncake_upgrade
fi
state=${E2E_STATE_DIR:-$repo/.state/kind-gpu/$E2E_CLUSTER_NAME}
kubeconfig=$state/kubeconfig
worker=$E2E_CLUSTER_NAME-worker
release=${E2E_OPERATOR_RELEASE:-disaggspec}
operator_namespace=${E2E_OPERATOR_NAMESPACE:-disaggspec-system}
operator_deployment=$release-disaggspec-operator
# NVIDIA device plugin: a Helm chart served from the project's GitHub Pages repository, pinned.
device_plugin_repo=${E2E_DEVICE_PLUGIN_REPO:-https://nvidia.github.io/k8s-device-plugin}
device_plugin_version=${E2E_DEVICE_PLUGIN_VERSION:-0.19.3}
device_plugin_image=${E2E_DEVICE_PLUGIN_IMAGE:-}
# The NVIDIA container toolkit's apt repository (GitHub Pages), installed inside the kind worker node.
toolkit_repo=${E2E_TOOLKIT_APT_REPO:-https://nvidia.github.io/libnvidia-container}
gpu_timeout=${E2E_GPU_TIMEOUT:-300}

say() { printf '\n==> %s\n' "$*"; }
warn() { printf 'run.sh: warning: %s\n' "$*" >&2; }
die() {
  printf 'run.sh: %s\n' "$*" >&2
  exit 1
}

# Print a command (shell-quoted, resolved) and run it unless this is a dry run.
run() {
  printf '+ '
  printf '%q ' "$@"
  printf '\n'
  [[ $dry_run == 1 ]] || "$@"
}

# Run a script inside the kind worker node (printed in full on a dry run).
node_script() {
  local script=$1
  printf '+ docker exec %q bash -euo pipefail -c <<script\n%s\nscript\n' "$worker" "$script"
  [[ $dry_run == 1 ]] || docker exec "$worker" bash -euo pipefail -c "$script"
}

# repository and tag of an image reference without a registry host (name[:tag]).
image_repo() { if [[ ${1##*/} == *:* ]]; then printf '%s' "${1%:*}"; else printf '%s' "$1"; fi; }
image_tag() { if [[ ${1##*/} == *:* ]]; then printf '%s' "${1##*:}"; else printf 'latest'; fi; }

# ---- preflight -----------------------------------------------------------------------------------------------------
missing=()
need() {
  local tool=$1 fix=$2
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool not found: $fix")
}

preflight() {
  say "preflight (cluster $E2E_CLUSTER_NAME, GPUs $E2E_GPUS, SGLang $E2E_SGLANG_VERSION, model source $E2E_MODEL_SOURCE)"
  missing=()
  need docker "install Docker Engine (https://docs.docker.com/engine/install/)"
  need kind "install kind >= 0.23 (https://kind.sigs.k8s.io/docs/user/quick-start/#installation)"
  need kubectl "install kubectl (https://kubernetes.io/docs/tasks/tools/)"
  need helm "install helm >= 3.12 (https://helm.sh/docs/intro/install/)"
  need nvidia-smi "install the NVIDIA driver on the host"
  need nvidia-ctk "install the NVIDIA Container Toolkit (https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html)"
  if command -v docker >/dev/null 2>&1; then
    if ! docker info >/dev/null 2>&1; then
      missing+=("docker cannot reach an engine: start it (sudo systemctl start docker) or add yourself to the docker group")
    elif [[ $(docker info --format '{{.DefaultRuntime}}' 2>/dev/null) != nvidia ]]; then
      missing+=("docker's default runtime is not nvidia: sudo nvidia-ctk runtime configure --runtime=docker --set-as-default && sudo systemctl restart docker")
    fi
    if ! docker buildx version >/dev/null 2>&1 && [[ $skip_build != 1 ]]; then
      missing+=("docker buildx is missing (the image builds need BuildKit): install the docker-buildx plugin, or set E2E_SKIP_BUILD=1 with prebuilt images")
    fi
  fi
  local toolkit_config=/etc/nvidia-container-runtime/config.toml
  if ! grep -Eq '^[[:space:]]*accept-nvidia-visible-devices-as-volume-mounts[[:space:]]*=[[:space:]]*true' "$toolkit_config" 2>/dev/null; then
    missing+=("$toolkit_config lacks accept-nvidia-visible-devices-as-volume-mounts = true (kind nodes get their GPUs through /dev/null volume mounts): sudo nvidia-ctk config --set accept-nvidia-visible-devices-as-volume-mounts=true --in-place && sudo systemctl restart docker")
  fi
  if command -v nvidia-smi >/dev/null 2>&1; then
    local have
    have=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    if ((have < 2)); then
      missing+=("nvidia-smi lists $have GPU(s): the suite needs 2 (one prefill, one decode; the reference runs after them) and runs the reference concurrently with 3 or more")
    fi
  fi
  "$python" -c 'import disaggspec, yaml, pytest' 2>/dev/null ||
    missing+=("$python cannot import disaggspec, yaml and pytest: run make venv (or set E2E_PYTHON)")
  if [[ $E2E_MODEL_SOURCE == hf && -z ${HF_TOKEN:-} ]]; then
    warn "HF_TOKEN is not set: meta-llama/Llama-3.1-8B-Instruct is gated on Hugging Face and will fail to download"
  fi
  if [[ $E2E_MODEL_SOURCE == hostpath && ! -d ${E2E_MODEL_HOST_DIR:-/nonexistent} ]]; then
    missing+=("E2E_MODEL_HOST_DIR=${E2E_MODEL_HOST_DIR:-} is not a directory (hostpath mode needs the downloaded model and draft below it)")
  fi
  if ((${#missing[@]} > 0)); then
    printf '  missing: %s\n' "${missing[@]}" >&2
    if [[ $dry_run == 1 ]]; then
      warn "dry run: continuing although ${#missing[@]} prerequisite(s) are missing"
    else
      die "preflight failed: ${#missing[@]} prerequisite(s) missing (each line above says how to fix it)"
    fi
  else
    echo "  all prerequisites present"
  fi
}

# ---- up: the cluster, the toolkit in the node, the device plugin ---------------------------------------------------
up() {
  say "up: kind cluster $E2E_CLUSTER_NAME with GPUs ($E2E_GPUS) on $worker"
  mkdir -p "$state"
  "$python" -m e2e.kind_gpu.manifest kind-config >"$state/kind-config.yaml"
  sed 's/^/    /' "$state/kind-config.yaml"
  if [[ $dry_run != 1 ]] && kind get clusters 2>/dev/null | grep -qx "$E2E_CLUSTER_NAME"; then
    echo "  cluster $E2E_CLUSTER_NAME exists; reusing it"
    run kind export kubeconfig --name "$E2E_CLUSTER_NAME" --kubeconfig "$kubeconfig"
  else
    local image_flag=()
    [[ -z $kind_node_image ]] || image_flag=(--image "$kind_node_image")
    run kind create cluster --name "$E2E_CLUSTER_NAME" --config "$state/kind-config.yaml" \
      --kubeconfig "$kubeconfig" --wait 300s "${image_flag[@]}"
  fi

  # Inside the node: the toolkit, containerd's nvidia runtime as default (so the device plugin and the pods need no
  # RuntimeClass), and /proc/driver/nvidia/params masked so containers cannot recreate device nodes of GPUs they
  # were not given (toolkits >= 1.19 mask it themselves; then the file already reads ModifyDeviceFiles: 0).
  node_script "command -v nvidia-ctk >/dev/null || {
  apt-get update -qq
  apt-get install -y -qq gpg curl
  curl -fsSL $toolkit_repo/gpgkey | gpg --batch --yes --dearmor -o /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
  curl -fsSL $toolkit_repo/stable/deb/nvidia-container-toolkit.list |
    sed 's#deb https://#deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] https://#' \\
    >/etc/apt/sources.list.d/nvidia-container-toolkit.list
  apt-get update -qq
  apt-get install -y -qq nvidia-container-toolkit
}
nvidia-ctk runtime configure --runtime=containerd --config-source=command --set-as-default
systemctl restart containerd
if grep -qx 'ModifyDeviceFiles: 1' /proc/driver/nvidia/params; then
  umount -R /proc/driver/nvidia || true
  cp /proc/driver/nvidia/params /root/gpu-params
  sed -i 's/^ModifyDeviceFiles: 1\$/ModifyDeviceFiles: 0/' /root/gpu-params
  mount --bind /root/gpu-params /proc/driver/nvidia/params
fi
nvidia-smi -L"
  if [[ $E2E_GPUS != all ]]; then
    # The node is a privileged container and inherits every /dev/nvidiaN of the host: drop the ones not listed.
    local total index keep=",$E2E_GPUS,"
    total=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || echo 0)
    for ((index = 0; index < total; index++)); do
      [[ $keep == *",$index,"* ]] && continue
      node_script "while umount /dev/nvidia$index 2>/dev/null; do :; done; rm -f /dev/nvidia$index"
    done
  fi

  local plugin_flags=(--set deviceListStrategy=envvar)
  [[ -z $device_plugin_image ]] || plugin_flags+=(--set "image.repository=$device_plugin_image")
  run helm upgrade --install nvidia-device-plugin nvidia-device-plugin --repo "$device_plugin_repo" \
    --version "$device_plugin_version" --namespace nvidia-device-plugin --create-namespace \
    --kubeconfig "$kubeconfig" --wait --timeout 300s "${plugin_flags[@]}"
  local want=2
  [[ $E2E_GPUS == all ]] || want=$(tr ',' '\n' <<<"$E2E_GPUS" | grep -c .)
  wait_for_gpus "$want"
}

# Poll the nodes' allocatable nvidia.com/gpu until the cluster offers at least $1.
wait_for_gpus() {
  local want=$1 deadline sum
  echo "  waiting up to ${gpu_timeout}s for nodes to report nvidia.com/gpu >= $want"
  printf "+ kubectl --kubeconfig %q get nodes -o 'jsonpath={.items[*].status.allocatable.nvidia\\.com/gpu}'\n" "$kubeconfig"
  [[ $dry_run != 1 ]] || return 0
  deadline=$((SECONDS + gpu_timeout))
  while :; do
    sum=0
    for count in $(kubectl --kubeconfig "$kubeconfig" get nodes -o jsonpath='{.items[*].status.allocatable.nvidia\.com/gpu}'); do
      sum=$((sum + count))
    done
    if ((sum >= want)); then
      echo "  nodes report $sum allocatable GPU(s)"
      return 0
    fi
    ((SECONDS < deadline)) || die "nodes report $sum allocatable nvidia.com/gpu after ${gpu_timeout}s (want $want): kubectl --kubeconfig $kubeconfig -n nvidia-device-plugin logs ds/nvidia-device-plugin"
    sleep 5
  done
}

# ---- images: build (or take given refs), probe mooncake, load into kind --------------------------------------------
images() {
  say "images: SGLang $E2E_SGLANG_IMAGE, operator $operator_image"
  local built=${base_sglang_image:-$E2E_SGLANG_IMAGE}
  if [[ $skip_build == 1 ]]; then
    echo "  E2E_SKIP_BUILD=1: using the given images as they are"
  else
    # --load: with a docker-container buildx builder the result would otherwise stay in the build cache.
    run env BUILDX_FLAGS=--load bash "$repo/images/sglang/build.sh" "$E2E_SGLANG_VERSION" "$built"
    run docker buildx build --file "$repo/images/operator/Dockerfile" --tag "$operator_image" --load "$repo"
  fi
  if [[ -n $mooncake_upgrade ]]; then
    local layer
    layer=$(printf 'FROM %s\nRUN python3 -m pip install --no-cache-dir mooncake-transfer-engine==%s\n' \
      "$built" "$mooncake_upgrade")
    printf '+ docker build --tag %q - <<dockerfile\n%s\ndockerfile\n' "$E2E_SGLANG_IMAGE" "$layer"
    [[ $dry_run == 1 ]] || docker build --tag "$E2E_SGLANG_IMAGE" - <<<"$layer"
  fi
  probe_mooncake
  run kind load docker-image --name "$E2E_CLUSTER_NAME" "$E2E_SGLANG_IMAGE" "$operator_image"
}

# The TCP transport sends KV straight from GPU memory only since Mooncake v0.3.6 (and MC_FORCE_TCP exists since then).
probe_mooncake() {
  local probe='import importlib.metadata as m; print(m.version("mooncake-transfer-engine"))' version
  printf '+ docker run --rm --entrypoint python3 %q -c %q\n' "$E2E_SGLANG_IMAGE" "$probe"
  [[ $dry_run != 1 ]] || return 0
  version=$(docker run --rm --entrypoint python3 "$E2E_SGLANG_IMAGE" -c "$probe" 2>/dev/null) ||
    die "$E2E_SGLANG_IMAGE has no mooncake-transfer-engine: the mooncake transfer backend cannot run"
  echo "  mooncake-transfer-engine $version in $E2E_SGLANG_IMAGE"
  if [[ $(printf '%s\n%s\n' "$mooncake_min" "$version" | sort -V | head -n1) != "$mooncake_min" ]]; then
    die "mooncake-transfer-engine $version < $mooncake_min cannot send KV from GPU memory over TCP (no RDMA in kind): rerun with E2E_MOONCAKE_VERSION=0.3.6.post1 (or newer) to layer a newer engine on the image"
  fi
}

# ---- install: the chart, with the loaded images ---------------------------------------------------------------------
install() {
  say "install: chart charts/disaggspec-operator as release $release in $operator_namespace"
  run helm upgrade --install "$release" "$repo/charts/disaggspec-operator" \
    --namespace "$operator_namespace" --create-namespace --kubeconfig "$kubeconfig" \
    --set "image.repository=$(image_repo "$operator_image")" --set-string "image.tag=$(image_tag "$operator_image")" \
    --set image.pullPolicy=IfNotPresent \
    --wait --timeout 300s
  run kubectl --kubeconfig "$kubeconfig" -n "$operator_namespace" wait --for=condition=Available \
    "deployment/$operator_deployment" --timeout=300s
}

# ---- test: render (validated), then the GPU serving suite -----------------------------------------------------------
test_step() {
  say "test: e2e/tests/test_serving_gpu.py against $kubeconfig"
  mkdir -p "$state/manifests"
  "$python" -m e2e.kind_gpu.manifest render --out "$state/manifests"
  "$python" -m e2e.kind_gpu.manifest settings
  export E2E_OPERATOR_NAMESPACE=$operator_namespace E2E_OPERATOR_DEPLOYMENT=$operator_deployment
  run env "DISAGGSPEC_TEST_KUBECONFIG=$kubeconfig" "E2E_SGLANG_IMAGE=$E2E_SGLANG_IMAGE" \
    "$python" -m pytest e2e/tests/test_user_flows.py e2e/tests/test_serving_gpu.py --backend kind-gpu -v
}

down() {
  say "down: delete kind cluster $E2E_CLUSTER_NAME"
  run kind delete cluster --name "$E2E_CLUSTER_NAME" --kubeconfig "$kubeconfig"
}

cd "$repo"
[[ $dry_run != 1 ]] || echo "run.sh: dry run: printing every command, running none that needs docker, kind, helm, kubectl or a GPU"
for step in "${steps[@]}"; do
  case $step in
    preflight) preflight ;;
    up) up ;;
    images) images ;;
    install) install ;;
    test) test_step ;;
    down) down ;;
    # One command per line: a function called inside an && list runs with errexit off.
    all)
      preflight
      up
      images
      install
      test_step
      ;;
  esac
done
