"""The chart's monitoring: the alert rules under the real promtool, the dashboard's queries, and the opt-in objects.

The rules file (`monitoring/disaggspec-rules.yaml`) is checked and unit-tested by `promtool check rules` and
`promtool test rules` (promtool is built by `python -m e2e.cluster build`, like helm). Every query of the dashboard
is parsed by promtool too, and every metric it names must exist: an operator metric (its registry, plus the
per-service health gauges) or a metric some supported SGLang release exports (the serving emulator's facts, which
an honesty test ties to the wheels), with `_bucket`/`_sum`/`_count` only on histograms.
"""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import yaml

from disaggspec import constants, metrics
from disaggspec.config import HealthSettings
from disaggspec.servinghealth import prometheus
from e2e.cluster import build
from e2e.serving.emulator import facts
from tests.unit.test_chart import CHART, EXAMPLES, REPO, built_binary, by_kind, helm, one, rendered, template

MONITORING = CHART / "monitoring"
RULES = MONITORING / "disaggspec-rules.yaml"
RULE_TESTS = sorted((MONITORING / "tests").glob("*.yaml"))
DASHBOARD = MONITORING / "disaggspec-dashboard.json"
DOC = REPO / "docs" / "monitoring.md"

OPERATOR_HEALTH_GAUGES = (
    "disaggspec_spec_decode_healthy",
    "disaggspec_transfer_healthy",
    "disaggspec_spec_accept_length",
    "disaggspec_transfer_failures_per_second",
    "disaggspec_pool_replicas",
)
"""The per-service gauges of issue 20 the rules and the dashboard read; named here so this test does not depend on
the order in which they land in `disaggspec.metrics`."""

HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
PROMQL_WORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset"}
)
"""Keywords of PromQL that look like identifiers and are not followed by a parenthesis."""

GRAFANA_SAMPLE_VALUES = {"__rate_interval": "5m", "namespace": "team-a", "service": "llama"}
"""What the dashboard's variables expand to when its queries are handed to promtool."""


def promtool_binary() -> str:
    return built_binary(build.PROMTOOL, "promtool")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool_binary(), *args], capture_output=True, text=True, timeout=120)


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def alerts() -> list[dict[str, Any]]:
    return [rule for group in rule_groups() for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def panel_queries() -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target, rows included."""
    for panel in dashboard()["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                yield f"panel {inner['title']!r} target {target['refId']}", target["expr"]


def variable_queries() -> Iterator[tuple[str, str]]:
    """(where, PromQL selector) of every `label_values(<selector>, <label>)` template variable."""
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable["query"]["query"])
        assert match, f"variable {variable['name']}: not a label_values() query"
        yield f"variable {variable['name']!r}", match.group(1)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once strings, label matchers, ranges,
    grouping clauses and Grafana variables are removed, that are neither functions (followed by `(`) nor keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    found = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", text):  # not a duration's unit (5m)
        if re.match(r"\s*\(", text[match.end() :]) or match.group() in PROMQL_WORDS:
            continue
        found.add(match.group())
    return found


def known_metrics() -> dict[str, set[str]]:
    """Every series name that exists -> the kinds it has somewhere ("counter", "gauge", "histogram"): the operator's
    registry, its health gauges, and each supported SGLang release's metrics (the name a scraper sees)."""
    kinds: dict[str, set[str]] = {}
    for family in metrics.REGISTRY.collect():
        exposed = family.name + "_total" if family.type == "counter" else family.name
        kinds.setdefault(exposed, set()).add(family.type)
    for name in OPERATOR_HEALTH_GAUGES:
        kinds.setdefault(name, set()).add("gauge")
    for version in facts.VERSIONS:
        for metric in facts.facts_for(version).metrics:
            kinds.setdefault(metric.exposed, set()).add(metric.kind)
    return kinds


def unknown_names(names_used: set[str], kinds: dict[str, set[str]]) -> list[str]:
    """The names that select no series: unknown, a histogram's bare name (only a release where it is something else
    may use it), or a `_bucket`/`_sum`/`_count` series of a name that is a histogram in no release."""
    bad = []
    for name in sorted(names_used):
        if name in kinds:
            if kinds[name] == {"histogram"}:
                bad.append(f"{name} (a histogram: select {name}_bucket, _sum or _count)")
            continue
        suffix = next((s for s in HISTOGRAM_SERIES if name.endswith(s)), None)
        base = name[: -len(suffix)] if suffix else None
        if base is None or "histogram" not in kinds.get(base, set()):
            bad.append(name)
    return bad


def expand_variables(expr: str) -> str:
    """Replace the dashboard's variables by sample values (and leave label_replace's `$1`, not a variable)."""
    return re.sub(
        r"\$\{(\w+)\}|\$(\w+)",
        lambda m: GRAFANA_SAMPLE_VALUES.get(m.group(1) or m.group(2), m.group(0)),
        expr,
    )


# ---- the alert rules -------------------------------------------------------------------------------------------


def test_rules_pass_promtool_check_with_every_lint() -> None:
    result = promtool("check", "rules", "--lint=all", "--lint-fatal", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout


def test_rules_pass_their_promtool_unit_tests() -> None:
    assert RULE_TESTS
    result = promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(RULE_TESTS), result.stdout


def test_promtool_unit_tests_catch_a_wrong_expectation(tmp_path: Path) -> None:
    """The harness fails when an expected alert does not come: a test file that expects the wrong severity."""
    original = RULE_TESTS[0].read_text()
    broken = original.replace("../disaggspec-rules.yaml", str(RULES)).replace("severity: warning", "severity: page")
    assert broken != original
    (tmp_path / "broken.yaml").write_text(broken)
    result = promtool("test", "rules", str(tmp_path / "broken.yaml"))
    assert result.returncode != 0
    assert "FAILED" in result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names_ = {alert["alert"] for alert in alerts()}
    assert names_ == {
        "DisaggSpecSpeculativeDecodingDegraded",
        "DisaggSpecTransferFailing",
        "DisaggSpecPoolReadyRatio",
        "DisaggSpecPoolDown",
        "DisaggSpecReconcileErrors",
    }
    assert not names_ - firing, f"never expected to fire: {sorted(names_ - firing)}"
    assert not names_ - quiet, f"never expected to stay quiet: {sorted(names_ - quiet)}"


def test_every_alert_has_a_severity_annotations_and_a_runbook_section() -> None:
    doc = DOC.read_text()
    headings = {line.lstrip("#").strip() for line in doc.splitlines() if line.startswith("### ")}
    for alert in alerts():
        assert alert["labels"]["severity"] in ("warning", "critical"), alert["alert"]
        annotations = alert["annotations"]
        assert annotations["summary"] and annotations["description"], alert["alert"]
        # `runbook` (a path in this repository), not `runbook_url`: the project publishes no docs site to link to.
        base, _, anchor = annotations["runbook"].partition("#")
        assert base == "docs/monitoring.md" and anchor == alert["alert"].lower(), annotations["runbook"]
        assert alert["alert"] in headings, f"docs/monitoring.md has no section `### {alert['alert']}`"


def test_rules_name_only_metrics_that_exist() -> None:
    kinds = known_metrics()
    for alert in alerts():
        used = metric_names(alert["expr"])
        assert used, alert["alert"]
        assert not unknown_names(used, kinds), (alert["alert"], unknown_names(used, kinds))


# ---- the dashboard ---------------------------------------------------------------------------------------------


def test_metric_name_extraction() -> None:
    """The extractor finds selectors and skips functions, keywords, labels, strings and variables."""
    expr = (
        'histogram_quantile(0.9, sum by (pool, le) (label_replace(rate(sglang:x_bucket{pod=~"${service}-a"}'
        '[$__rate_interval]), "pool", "$1", "pod", "(.*)"))) / on (pool) group_left disaggspec_y '
        "and on (instance) (disaggspec_leader == 1) offset 5m"
    )
    assert metric_names(expr) == {"sglang:x_bucket", "disaggspec_y", "disaggspec_leader"}


def test_dashboard_names_only_metrics_some_supported_release_or_the_operator_exports() -> None:
    kinds = known_metrics()
    queries = [*panel_queries(), *variable_queries()]
    assert len(queries) > 20
    for where, expr in queries:
        used = metric_names(expr)
        assert used, f"{where}: no metric found in {expr!r}"
        assert not unknown_names(used, kinds), f"{where}: {unknown_names(used, kinds)} in {expr!r}"


def test_histogram_check_refuses_what_does_not_exist() -> None:
    kinds = known_metrics()
    assert unknown_names({"sglang:num_queue_reqs_bucket"}, kinds) == ["sglang:num_queue_reqs_bucket"]
    assert unknown_names({"sglang:time_to_first_token_seconds"}, kinds)
    assert unknown_names({"sglang:no_such_metric", "disaggspec_nope"}, kinds) == [
        "disaggspec_nope",
        "sglang:no_such_metric",
    ]
    # A gauge in 0.5.2, a histogram in 0.5.23: both spellings select something.
    assert not unknown_names({"sglang:kv_transfer_latency_ms", "sglang:kv_transfer_latency_ms_bucket"}, kinds)


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    """promtool parses every panel query (as a recording rule), with the variables expanded."""
    rules = [
        {"record": f"dashboard:query_{index}", "expr": expand_variables(expr)}
        for index, (_, expr) in enumerate(panel_queries())
    ]
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the failure counters, per server (issue 29) -------------------------------------------------------------------

REV = "0a1b2c3d"


def _rank_series(name: str, pod: str, ranks: range, values: str, dp_rank: int | None = None) -> list[dict[str, str]]:
    """One series per TP rank, as every rank of an SGLang server exports the failure counters (with DP attention,
    labelled with the rank's DP group)."""
    dp = "" if dp_rank is None else f',dp_rank="{dp_rank}"'
    return [
        {"series": f'{name}{{namespace="team-a",pod="{pod}",tp_rank="{rank}",pp_rank="0"{dp}}}', "values": values}
        for rank in ranks
    ]


DP_DECODE: Final = f"llama-decode-{REV}-7f6d5c4b3-dpdp4"


FAILURE_SERIES = [
    # A tp8 Deployment prefill: one transfer failure a minute, counted by all eight ranks; no bootstrap failure.
    *_rank_series("sglang:num_transfer_failed_reqs_total", f"llama-prefill-{REV}-5d8f7c9b4-x2x7q", range(8), "0+1x15"),
    *_rank_series("sglang:num_bootstrap_failed_reqs_total", f"llama-prefill-{REV}-5d8f7c9b4-x2x7q", range(8), "0x15"),
    # Its tp8 decode: the same failures, and two bootstrap failures a minute; a Deployment pod with an all-digit name.
    *_rank_series("sglang:num_transfer_failed_reqs_total", f"llama-decode-{REV}-5984766-42957", range(8), "0+1x15"),
    *_rank_series("sglang:num_bootstrap_failed_reqs_total", f"llama-decode-{REV}-5984766-42957", range(8), "0+2x15"),
    # A tp16 LeaderWorkerSet decode group: the leader's ranks 0-7 and the worker's ranks 8-15 count the same failures
    # (three a minute, transfer only: a rank never counting a bootstrap failure exports no such series).
    *_rank_series("sglang:num_transfer_failed_reqs_total", f"llama-decode-{REV}-0", range(8), "0+3x15"),
    *_rank_series("sglang:num_transfer_failed_reqs_total", f"llama-decode-{REV}-0-1", range(8, 16), "0+3x15"),
    # A tp8 decode with DP attention 4: each DP group (two TP ranks) counts its own requests' failures, labelled
    # dp_rank; group g fails g + 1 a minute, 10 in all.
    *(
        series
        for group in range(4)
        for series in _rank_series(
            "sglang:num_transfer_failed_reqs_total",
            DP_DECODE,
            range(2 * group, 2 * group + 2),
            f"0+{group + 1}x15",
            group,
        )
    ),
    # Another service whose name starts the same: never counted.
    *_rank_series("sglang:num_transfer_failed_reqs_total", f"llama-two-decode-{REV}-5d8f-x2x7q", range(8), "0+9x15"),
]
"""Per minute, the service's failed requests: prefill 1 transfer, decode 1 transfer + 2 bootstrap, the multi-node
decode 3 transfer, the DP decode 10 transfer; the sum of every rank's series would be 8x (16x on the multi-node group,
worker included), and the largest rank of the DP decode only its busiest group's 4."""


def _promtool_expr_tests(tmp_path: Path, cases: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "fuzzy_compare": True,
        "tests": [{"interval": "1m", "input_series": FAILURE_SERIES, "promql_expr_test": cases}],
    }
    path = tmp_path / "failures.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    return promtool("test", "rules", str(path))


def test_dashboard_failure_panels_count_each_failure_once_per_server(tmp_path: Path) -> None:
    """promtool evaluates the panel's queries over SGLang-shaped series (one per TP rank, a worker pod's ranks too):
    failures per second of the service, not per rank."""
    (panel,) = [p for p in dashboard()["panels"] if p.get("title") == "Bootstrap and transfer failures"]
    exprs = {t["legendFormat"]: expand_variables(t["expr"]) for t in panel["targets"]}
    per_second = {"bootstrap failures": 2 / 60, "transfer failures": 15 / 60}
    cases = [
        {"expr": exprs[legend], "eval_time": "10m", "exp_samples": [{"labels": "{}", "value": value}]}
        for legend, value in per_second.items()
    ]
    result = _promtool_expr_tests(tmp_path, cases)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_operator_s_prometheus_failure_query_counts_each_failure_once_per_server(tmp_path: Path) -> None:
    """The operator's Prometheus source (`servinghealth.prometheus`), evaluated by promtool: one number per pod, the
    failures of its server over the window, and no LeaderWorkerSet worker pod."""
    settings = HealthSettings(window_seconds=300)
    (failures,) = [q.promql for q in prometheus.queries("team-a", "llama", settings) if q.signal == "failures"]
    expected = [
        (f"llama-prefill-{REV}-5d8f7c9b4-x2x7q", 5),
        (f"llama-decode-{REV}-5984766-42957", 15),
        (f"llama-decode-{REV}-0", 15),
        (DP_DECODE, 50),
    ]
    samples_ = [{"labels": f'{{pod="{pod}"}}', "value": value} for pod, value in expected]
    result = _promtool_expr_tests(tmp_path, [{"expr": failures, "eval_time": "10m", "exp_samples": samples_}])
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_covers_the_issue_and_selects_one_service() -> None:
    board = dashboard()
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "namespace", "service"]
    exprs = " ".join(expr for _, expr in panel_queries())
    for metric in (
        "sglang:spec_accept_length",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_bucket",
        "sglang:kv_transfer_latency_ms",
        "sglang:kv_transfer_speed_gb_s",
        "sglang:num_bootstrap_failed_reqs_total",
        "sglang:num_transfer_failed_reqs_total",
        "sglang:num_queue_reqs",
        *OPERATOR_HEALTH_GAUGES,
        "disaggspec_reconcile_errors_total",
    ):
        assert metric in exprs, metric
    for where, expr in panel_queries():
        if "sglang:" in expr:
            assert 'namespace="$namespace"' in expr, where
            assert "${service}-" in expr or 'service="$service"' in expr, where
        if any(gauge in expr for gauge in OPERATOR_HEALTH_GAUGES):
            assert 'service="$service"' in expr and "disaggspec_leader == 1" in expr, where
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_pod_pattern_matches_the_pods_the_operator_names() -> None:
    """The panels pick a service's pool pods by name: `<service>-prefill-*`, `<service>-decode-*` (not the
    router's, nor another service's whose name starts the same)."""
    for path in EXAMPLES:
        for manifest in rendered(path):
            if manifest["kind"] != "Deployment":
                continue
            service = manifest["metadata"]["labels"][constants.LABEL_SERVICE]
            role = manifest["metadata"]["labels"][constants.LABEL_ROLE]
            pod = f"{manifest['metadata']['name']}-5d8f7c9b4-x2x7q"  # a Deployment's pod name
            pattern = f"{service}-(prefill|decode)-.*"
            assert bool(re.fullmatch(pattern, pod)) == (role in ("prefill", "decode")), pod
            assert not re.fullmatch(pattern, pod.replace(service, f"{service}-two", 1))


# ---- the chart's opt-in objects --------------------------------------------------------------------------------


def test_monitoring_objects_are_opt_in() -> None:
    objs = template()
    assert not by_kind(objs, "PrometheusRule") and not by_kind(objs, "PodMonitor")
    assert not by_kind(objs, "ConfigMap")


def test_prometheus_rule_carries_the_tested_rules_file() -> None:
    objs = template("monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.labels.release=kps")
    rule = one(objs, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


def test_dashboard_config_map_carries_the_dashboard_for_the_sidecar() -> None:
    objs = template(
        "monitoring.grafanaDashboard.enabled=true",
        "monitoring.grafanaDashboard.namespace=grafana",
        "monitoring.grafanaDashboard.annotations.grafana_folder=LLM",
    )
    config_map = one(objs, "ConfigMap")
    assert config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "LLM"}
    assert json.loads(config_map["data"]["disaggspec.json"]) == dashboard()
    default_namespace = one(template("monitoring.grafanaDashboard.enabled=true"), "ConfigMap")
    assert default_namespace["metadata"]["namespace"] == "disaggspec-system"


def test_pod_monitor_selects_the_pool_pods_on_their_metrics_port() -> None:
    monitor = one(template("monitoring.podMonitor.enabled=true"), "PodMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    selected = set()
    for path in EXAMPLES:
        for manifest in rendered(path):
            if manifest["kind"] != "Deployment":
                continue
            pod = manifest["spec"]["template"]
            if selector.items() <= pod["metadata"]["labels"].items():
                (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "sglang"]
                assert endpoint["port"] in [p["name"] for p in container["ports"]]
                assert "--enable-metrics" in container.get("command", []) + container.get("args", [])
                selected.add(pod["metadata"]["labels"][constants.LABEL_ROLE])
    assert selected == {"prefill", "decode"}
    # The relabelings read the operator's pod labels (Kubernetes SD sanitizes `.` and `/` to `_`).
    sources = {r["targetLabel"]: r["sourceLabels"][0] for r in endpoint["relabelings"]}
    sanitized = {
        target: "__meta_kubernetes_pod_label_" + re.sub(r"[^A-Za-z0-9_]", "_", label)
        for target, label in (
            ("service", constants.LABEL_SERVICE),
            ("pool", constants.LABEL_ROLE),
            ("fingerprint", constants.LABEL_FINGERPRINT),
        )
    }
    assert sources == sanitized
    namespaced = one(template("monitoring.podMonitor.enabled=true", "watchNamespaces={team-a}"), "PodMonitor")
    assert namespaced["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def test_service_monitor_keeps_the_services_labels() -> None:
    """The per-service gauges' `namespace`/`service` must survive the scrape for the rules to work."""
    monitor = one(template("metrics.serviceMonitor.enabled=true"), "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_packaged_chart_ships_the_rules_and_dashboard_but_not_their_tests(tmp_path: Path) -> None:
    """The templates read monitoring/ through .Files, so the package must carry it; the promtool tests it need not."""
    helm("package", str(CHART), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("*.tgz")
    with tarfile.open(package) as archive:
        members = {name.split("/", 1)[1] for name in archive.getnames()}
    assert {"monitoring/disaggspec-rules.yaml", "monitoring/disaggspec-dashboard.json"} <= members
    assert not any(name.startswith("monitoring/tests") for name in members)
