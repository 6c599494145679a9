# disaggspec: every developer and CI entry point. `make help` lists them.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
# pytest-xdist workers of `make test`, one test file each at a time: each worker brings up its own local control plane;
# the suites mostly wait (model loads, drains, rollouts), so three share two cores.
TEST_WORKERS ?= 3
PY := $(VENV)/bin/python
SGLANG_VERSIONS ?= 0.5.2 0.5.23

.PHONY: help venv test test-unit lint generate verify demo demo-down cluster-build cluster-up cluster-down \
        cluster-status cluster-kubeconfig e2e-local e2e-kind-gpu image-build test-sglang

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-20s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

venv: $(VENV)/.installed ## create the Python venv (.venv) with the operator and its dev tools

cluster-build: venv ## build etcd, kube-apiserver, controller-manager, scheduler, kubectl, kwok, helm, promtool, lws, prometheus, prometheus-adapter (cached by version)
	$(PY) -m e2e.cluster build

cluster-up: cluster-build ## start the local control plane with 4 kwok GPU nodes
	$(PY) -m e2e.cluster up

cluster-down: venv ## stop the local control plane and remove its state
	$(PY) -m e2e.cluster down

cluster-status: venv ## show the local control plane's processes and nodes
	$(PY) -m e2e.cluster status

cluster-kubeconfig: venv ## print the admin kubeconfig path (last line)
	@$(PY) -m e2e.cluster kubeconfig

generate: venv ## regenerate the CRD (crds/ and the chart's copy), docs/reference/, README's API summary, SGLang flag tables
	PYTHONPATH=operator $(PY) -m tools.crd
	PYTHONPATH=operator $(PY) -m tools.docs
	bash images/sglang/flags.sh generate all

verify: venv ## fail when a generated file (CRD, chart copy, docs/reference/, README block, flag tables) differs from `make generate`
	PYTHONPATH=operator $(PY) -m tools.crd --check
	PYTHONPATH=operator $(PY) -m tools.docs --check
	bash images/sglang/flags.sh check all

lint: venv ## ruff, ruff format --check, mypy, import-linter layer contracts
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test-unit: venv ## fast tests only: no cluster
	$(PY) -m pytest -m "not integration"

# The SGLang patch tests run beside pytest (its suites mostly wait on clusters and servers): their output goes to
# .state/test-sglang.log and is shown at the end, whole if they failed.
test: venv cluster-build lint verify ## everything: lint, unit, golden, integration (real local control plane), SGLang patch tests
	@mkdir -p .state
	bash images/sglang/tests/run.sh all > .state/test-sglang.log 2>&1 & sglang=$$!; \
	rc=0; $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=30 || rc=$$?; \
	if wait $$sglang; then tail -n 6 .state/test-sglang.log; \
	else cat .state/test-sglang.log; echo "make test: the SGLang patch tests failed" >&2; rc=1; fi; \
	exit $$rc

test-sglang: ## the patched SGLang transfer path on CPU, against the real 0.5.2 and 0.5.23 modules (patched and not)
	bash images/sglang/tests/run.sh all

image-build: ## build the patched SGLang images with docker buildx (needs a Docker engine: not run in CI)
	for version in $(SGLANG_VERSIONS); do images/sglang/build.sh $$version; done

demo: cluster-build ## the main job on the embedded local cluster: operator, EAGLE3 example to Ready, rejections
	$(PY) -m e2e.demo up

demo-down: venv ## stop the demo's operator and local cluster
	$(PY) -m e2e.demo down

e2e-local: test ## alias: the end-to-end suites on the local control plane

e2e-kind-gpu: venv ## kind + real NVIDIA GPUs: cluster, images, chart, GPU serving suite (DRY_RUN=1 prints the steps; not run in CI)
	bash e2e/kind_gpu/run.sh all
