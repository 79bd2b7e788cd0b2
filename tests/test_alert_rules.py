"""Static checks of the Prometheus side of the reference deployment: every alert is labelled,
annotated and unit-tested both firing and not firing, and the scrape config covers every service.
promtool runs the unit tests here when it is on PATH (Debian's prometheus package has it), and always in
Docker: tests/compose/test_promtool.py."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict

import pytest

from tests.compose.observability import ALERT_TESTS, GRAFANA, PROMETHEUS_CONFIG, alert_rules, load_yaml

REQUIRED_ALERTS = {
    "SetqueueNoWorkers",
    "SetqueueQueueStalled",
    "SetqueueQueueWithoutWorkers",
    "SetqueueOldestJobTooOld",
    "SetqueueBacklogGrowing",
    "SetqueueHighFailureRate",
    "SetqueueHighRequeueRate",
    "SetqueueCleanerNotRunning",
    "SetqueueTargetDown",
    "SetqueueZombieThreads",
    "SetqueueRedisEvicts",
    "SetqueueRedisOutOfMemory",
    "SetqueueRedisMemoryHigh",
}


def test_required_alerts_exist_once() -> None:
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names)), "duplicate alert names"
    assert set(names) >= REQUIRED_ALERTS


def test_every_alert_has_severity_summary_description_and_a_for_clause() -> None:
    for rule in alert_rules():
        assert rule.get("labels", {}).get("severity") in {"critical", "warning"}, rule["alert"]
        assert rule.get("annotations", {}).get("summary"), rule["alert"]
        assert rule.get("annotations", {}).get("description"), rule["alert"]
        assert rule.get("for"), f"{rule['alert']} would fire on a single evaluation"


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    tests = load_yaml(ALERT_TESTS)
    assert tests["rule_files"] == ["alerts.yml"]
    firing: dict[str, int] = defaultdict(int)
    quiet: dict[str, int] = defaultdict(int)
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet)[check["alertname"]] += 1
    for rule in alert_rules():
        assert firing[rule["alert"]], f"{rule['alert']}: no promtool test where it fires"
        assert quiet[rule["alert"]], f"{rule['alert']}: no promtool test where it stays quiet"


def test_promtool_checks_the_rules_and_passes_their_unit_tests_when_installed() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not on PATH (apt-get install prometheus); tests/compose/test_promtool.py runs it")
    for args in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts.test.yml"]):
        run = subprocess.run([promtool, *args], cwd=GRAFANA, capture_output=True, text=True, timeout=120, check=False)
        assert run.returncode == 0 and "SUCCESS" in run.stdout, run.stdout + run.stderr


def test_prometheus_scrapes_every_service_by_dns_and_loads_the_rules() -> None:
    config = load_yaml(PROMETHEUS_CONFIG)
    assert config["global"]["scrape_interval"] == "5s"
    assert config["global"]["evaluation_interval"] == "5s"
    assert config["rule_files"] == ["/etc/prometheus/alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"creator", "worker", "cleaner", "prometheus"}
    for service in ("creator", "worker", "cleaner"):
        (sd,) = jobs[service]["dns_sd_configs"]
        assert sd["names"] == [service]
        assert sd["type"] == "A"
        assert sd["port"] == 8000
