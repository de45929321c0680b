"""docker-compose.yml and the Dockerfile: the production stack is shaped as documented.

The structural checks always run (PyYAML). `docker compose config` (or the
standalone `docker-compose config`) runs when a compose implementation is
installed; it needs no Docker engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def _command(service: dict[str, Any]) -> list[str]:
    command = service.get("command", [])
    return command.split() if isinstance(command, str) else [str(c) for c in command]


def _depends(service: dict[str, Any]) -> dict[str, str]:
    deps = service.get("depends_on", {})
    if isinstance(deps, list):
        return {name: "service_started" for name in deps}
    return {name: (spec or {}).get("condition", "service_started") for name, spec in deps.items()}


def test_services_are_all_there(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) >= {
        "postgres",
        "temporal",
        "temporal-ui",
        "migrate",
        "api",
        "worker",
    }


def test_postgres_has_a_healthcheck(compose: dict[str, Any]) -> None:
    pg = compose["services"]["postgres"]
    assert pg["image"].startswith("postgres:")
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])


def test_temporal_runs_on_that_postgres_in_its_own_database(compose: dict[str, Any]) -> None:
    services = compose["services"]
    temporal = services["temporal"]
    env = temporal["environment"]
    assert temporal["image"].split(":")[0] in ("temporalio/auto-setup", "temporalio/server")
    assert env["DB"] == "postgres12"
    assert env["POSTGRES_SEEDS"] == "postgres"
    assert _depends(temporal)["postgres"] == "service_healthy"
    app_db = services["postgres"]["environment"]["POSTGRES_DB"]
    assert env["DBNAME"] != app_db and env["VISIBILITY_DBNAME"] != app_db
    ui = services["temporal-ui"]
    assert ui["image"].startswith("temporalio/ui:")
    assert ui["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"


def test_migrate_is_one_shot_and_gates_the_app(compose: dict[str, Any]) -> None:
    services = compose["services"]
    migrate = services["migrate"]
    assert _command(migrate) == ["db", "upgrade"]
    assert migrate["restart"] == "no"
    assert _depends(migrate)["postgres"] == "service_healthy"
    for name in ("api", "worker"):
        assert _depends(services[name])["migrate"] == "service_completed_successfully"


def test_api_and_worker_share_one_configuration(compose: dict[str, Any]) -> None:
    services = compose["services"]
    api, worker = services["api"], services["worker"]
    assert _command(api)[0] == "api"
    assert _command(worker) == ["worker"]
    assert api["environment"] == worker["environment"] == services["migrate"]["environment"]
    env = api["environment"]
    assert env["PARKGATE_DATABASE_URL"].startswith("postgresql+asyncpg://")
    assert "@postgres:5432/parkgate" in env["PARKGATE_DATABASE_URL"]
    assert env["PARKGATE_TEMPORAL_ADDRESS"] == "temporal:7233"
    # One link secret for every replica, never generated per container.
    assert "PARKGATE_LINK_SECRET" in env
    # One payload key set too: a worker must decrypt what the API encrypted.
    assert "PARKGATE_PAYLOAD_KEYS" in env
    assert any(p.endswith(":8420") for p in api["ports"])
    assert "healthz" in " ".join(api["healthcheck"]["test"])


def test_worker_scales(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert "container_name" not in worker
    assert "ports" not in worker
    assert worker.get("deploy", {}).get("replicas", 1) >= 1


def test_dockerfile_installs_the_package_and_runs_the_cli() -> None:
    text = DOCKERFILE.read_text()
    assert text.startswith("#") or "FROM python:3.11" in text
    assert "FROM python:3.11" in text
    assert "pip install ." in text
    assert 'ENTRYPOINT ["parkgate"]' in text
    for path in ("pyproject.toml", "dispatcher", "workflows", "activities", "migrations"):
        assert path in text, path


def _compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_docker_compose_config_accepts_the_file(tmp_path: Path) -> None:
    cli = _compose_cli()
    if cli is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("no docker compose plugin or docker-compose (scripts/test.sh installs it)")
        pytest.skip("no docker compose plugin or docker-compose installed")
    env = {**os.environ, "PARKGATE_LINK_SECRET": "test-secret", "COMPOSE_PROJECT_NAME": "parkgate",
           "PARKGATE_PAYLOAD_KEYS": '{"k1": "dGVzdC1wYXlsb2FkLWtleS0zMi1ieXRlcy1sb25nISE="}'}
    ok = subprocess.run(
        [*cli, "-f", str(COMPOSE), "config", "--services"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert ok.returncode == 0, ok.stderr
    assert set(ok.stdout.split()) >= {
        "postgres",
        "temporal",
        "temporal-ui",
        "migrate",
        "api",
        "worker",
    }
    # The link secret is mandatory: compose refuses to start without it.
    env.pop("PARKGATE_LINK_SECRET")
    missing = subprocess.run(
        [*cli, "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert missing.returncode != 0
    assert "PARKGATE_LINK_SECRET" in missing.stderr


def test_temporal_gets_the_embedded_servers_dynamic_config(compose: dict[str, Any]) -> None:
    """The compose Temporal runs with the same dynamic config as `parkgate serve`."""
    from parkgate.runtime.devserver import DYNAMIC_CONFIG

    temporal = compose["services"]["temporal"]
    path = temporal["environment"]["DYNAMIC_CONFIG_FILE_PATH"]
    mounts = {
        v.split(":")[1]: ROOT / v.split(":")[0] for v in temporal["volumes"]
    }
    host_file = mounts[f"/etc/temporal/{path}"]
    data = yaml.safe_load(host_file.read_text())
    values = {key: str(entries[0]["value"]).lower() for key, entries in data.items()}
    assert values == {key: value.lower() for key, value in DYNAMIC_CONFIG.items()}


def test_only_the_worker_can_set_up_the_tool_sandbox(compose: dict[str, Any]) -> None:
    """Tools run in the worker: it alone gets what namespaces and mounts need in
    Docker (SYS_ADMIN, no AppArmor mount denial); the API gets nothing extra."""
    services = compose["services"]
    worker = services["worker"]
    assert worker["cap_add"] == ["SYS_ADMIN"]
    assert "apparmor:unconfined" in worker["security_opt"]
    for name in ("api", "migrate"):
        assert "cap_add" not in services[name] and "security_opt" not in services[name]
    assert "PARKGATE_TOOL_SANDBOX" in worker["environment"]


def test_each_workspace_host_serves_only_its_worker_group(compose: dict[str, Any]) -> None:
    """The worker-group shape: every group's root is in the shared configuration
    (the API maps workspaces to groups), one `worker-<group>` service per group
    serves only that group, and only it mounts that group's root."""
    services = compose["services"]
    shared = services["api"]["environment"]
    groups = json.loads(shared["PARKGATE_WORKER_GROUPS"])
    assert set(groups) == {"host-a", "host-b", "host-c"}
    hosts = {name: svc for name, svc in services.items() if name.startswith("worker-host-")}
    assert set(hosts) == {f"worker-{group}" for group in groups}
    roots_seen: set[str] = set()
    for group, roots in groups.items():
        host = hosts[f"worker-{group}"]
        env = host["environment"]
        assert json.loads(env["PARKGATE_SERVE_GROUPS"]) == [group]
        assert env["PARKGATE_SERVE_MAIN_QUEUE"] == "false"
        assert {k: v for k, v in env.items() if not k.startswith("PARKGATE_SERVE_")} == shared
        assert _command(host) == ["worker"]
        mounts = {v.split(":")[1] for v in host["volumes"]}
        assert mounts == set(roots), (group, mounts)
        assert not mounts & roots_seen  # no two hosts share a workspace volume
        roots_seen |= mounts
        assert _depends(host)["migrate"] == "service_completed_successfully"
        assert host["cap_add"] == ["SYS_ADMIN"]  # tools run here: same sandbox needs
    for name in ("api", "worker"):
        assert not roots_seen & {v.split(":")[1] for v in services[name].get("volumes", [])}
