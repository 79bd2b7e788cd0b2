"""Both compose files as Compose resolves them with no .env file and no variables: a user's defaults.
Needs the docker CLI with Compose v2, no engine."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from python_on_whales import DockerClient

from setqueue.runtime.acl import rule
from tests.compose.observability import CLUSTER_COMPOSE_FILE, COMPOSE_FILE, REPO

pytestmark = pytest.mark.compose

TEXT = COMPOSE_FILE.read_text() + CLUSTER_COMPOSE_FILE.read_text()
# Every variable the files read: ${NAME...}, and environment entries passed through (NAME: with no value).
VARIABLES = set(re.findall(r"\$\{(\w+)", TEXT)) | set(re.findall(r"^\s+([A-Z][A-Z0-9_]*):\s*$", TEXT, re.M))


NODES = [f"redis-{n}" for n in range(1, 7)]


def resolve(path: Path) -> dict[str, Any]:
    client = DockerClient(compose_files=[path], compose_project_directory=REPO, compose_env_files=[os.devnull])
    with pytest.MonkeyPatch.context() as mp:
        for name in VARIABLES:
            mp.delenv(name, raising=False)
        resolved = client.compose.config(return_json=True)
    assert isinstance(resolved, dict)
    return resolved


@pytest.fixture(scope="module")
def config(docker: DockerClient) -> dict[str, Any]:
    return resolve(COMPOSE_FILE)


@pytest.fixture(scope="module")
def cluster_config(docker: DockerClient) -> dict[str, Any]:
    return resolve(CLUSTER_COMPOSE_FILE)


@pytest.fixture(scope="module", params=[COMPOSE_FILE, CLUSTER_COMPOSE_FILE], ids=lambda p: p.name)
def any_config(request: pytest.FixtureRequest, docker: DockerClient) -> dict[str, Any]:
    return resolve(request.param)


def test_all_services_defined(config: dict[str, Any]) -> None:
    assert set(config["services"]) == {"redis", "creator", "worker", "cleaner", "console", "prometheus", "grafana"}
    assert "version" not in config


def test_defaults_work_without_an_env_file(config: dict[str, Any]) -> None:
    services = config["services"]
    assert services["redis"]["image"] == "redis:7.4-alpine"
    assert services["prometheus"]["image"] == "prom/prometheus:v2.55.1"
    assert "setqueue-change-me" in services["redis"]["command"]
    for name in ("creator", "worker", "cleaner", "console"):
        env = services[name]["environment"]
        assert env["REDIS_URL"] == "redis://setqueue:setqueue-services-change-me@redis:6379/0"
        assert env["METRICS_PORT"] == "8000"
        assert services[name]["build"]["target"] == name
        assert services[name]["build"]["args"]["PYTHON_IMAGE"] == "python:3.12-slim"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert services["worker"]["environment"]["SHUTDOWN_GRACE_SECONDS"] == "20"
    assert services["creator"]["environment"]["CREATE_RATE"] == "20"
    assert {services[name]["environment"]["AUDIT"] for name in ("creator", "worker", "cleaner")} == {"false"}
    assert services["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "admin-change-me"
    console = services["console"]
    assert console["environment"]["CONSOLE_TOKEN"] == "", "the console is read-only unless a token is given"
    assert [(p["host_ip"], p["published"], p["target"]) for p in console["ports"]] == [("127.0.0.1", "8080", 8080)]


def test_the_services_log_in_as_the_acl_user_of_setqueue_acl_rule(config: dict[str, Any]) -> None:
    """redis-server's --user line is setqueue.runtime.acl's rule word for word; requirepass stays the
    operator's."""
    command = config["services"]["redis"]["command"]
    user = command[command.index("--user") + 1 :]  # one argument a word, to the end
    assert user == ["setqueue", *rule("setqueue-services-change-me")]
    assert command[command.index("--requirepass") + 1] == "setqueue-change-me"
    assert config["services"]["redis"]["environment"]["REDISCLI_AUTH"] == "setqueue-change-me"


def test_only_prometheus_grafana_and_the_console_publish_ports_on_loopback(any_config: dict[str, Any]) -> None:
    for name, service in any_config["services"].items():
        ports = service.get("ports", [])
        if name in ("prometheus", "grafana", "console"):
            assert [p["host_ip"] for p in ports] == ["127.0.0.1"], name
        else:
            assert not ports, f"{name} publishes {ports}"


def test_workers_can_be_scaled(any_config: dict[str, Any]) -> None:
    worker = any_config["services"]["worker"]
    assert "container_name" not in worker
    assert not worker.get("ports")
    assert worker["stop_grace_period"] == "25s"


def test_creator_is_not_restarted_after_finishing(any_config: dict[str, Any]) -> None:
    services = any_config["services"]
    assert services["creator"]["restart"] == "on-failure"
    long_running = set(services) - {"creator", "redis-cluster-init"}
    assert {name: services[name]["restart"] for name in long_running} == dict.fromkeys(long_running, "unless-stopped")


# -- docker-compose.cluster.yml


def test_cluster_stack_runs_beside_the_main_one(config: dict[str, Any], cluster_config: dict[str, Any]) -> None:
    assert cluster_config["name"] != config["name"]
    services = [*config["services"].values(), *cluster_config["services"].values()]
    published = {port["published"] for service in services for port in service.get("ports", [])}
    assert len(published) == 6, "the two files' default host ports must differ"


def test_cluster_stack_defaults(cluster_config: dict[str, Any], config: dict[str, Any]) -> None:
    services = cluster_config["services"]
    assert set(services) == {
        *NODES,
        *("redis-cluster-init", "creator", "worker", "cleaner", "console", "prometheus", "grafana"),
    }
    for node in NODES:
        assert services[node]["image"] == "redis:7.4-alpine"
        assert services[node]["command"][0] == "redis-server"  # so the official image drops to the redis user
        assert services[node]["command"][-2:] == ["--cluster-announce-hostname", node]
        assert services["redis-cluster-init"]["depends_on"][node]["condition"] == "service_healthy"
    conf = cluster_config["configs"]["redis-cluster-conf"]["content"]
    for line in ("cluster-enabled yes", "appendonly yes", "maxmemory-policy noeviction"):
        assert line in conf.splitlines()
    assert 'requirepass "setqueue-change-me"' in conf and 'masterauth "setqueue-change-me"' in conf
    assert " ".join(["user", "setqueue", *rule("setqueue-services-change-me")]) in conf.splitlines()
    for name in ("creator", "worker", "cleaner", "console"):
        env = services[name]["environment"]
        assert env["REDIS_URL"] == "redis://setqueue:setqueue-services-change-me@redis-1:6379/0"
        assert env["QUEUE_SHARDS"] == "6"
        assert env["AUDIT"] == "false"  # the audit needs one unsharded queue
        assert services[name]["depends_on"] == {
            "redis-cluster-init": {"condition": "service_completed_successfully", "required": True}
        }
        # Everything else as in docker-compose.yml, which they extend.
        main = config["services"][name]
        assert services[name]["build"] == main["build"]
        assert without(env, "REDIS_URL", "QUEUE_SHARDS") == without(main["environment"], "REDIS_URL"), name
    for name in ("prometheus", "grafana"):
        assert without(services[name], "ports") == without(config["services"][name], "ports"), name
    assert services["console"]["ports"][0]["published"] == "8081"


def without(mapping: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k not in names}
