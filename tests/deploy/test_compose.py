"""``docker/compose.yaml`` as Debian's ``docker-compose`` (v1.29) reads it: the file is valid,
and the deployment keeps its security properties. Missing ``docker-compose`` fails the test
(``docker/provision --dev`` installs it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
SOCKET = "/var/run/docker.sock"
PASSWORD = "compose-test-password"


def _compose_config(environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` of the deployment file, with ``environment``."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("docker-compose is not installed; run docker/provision --dev")
    return subprocess.run(
        [binary, "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    done = _compose_config({**os.environ, "REDIS_PASSWORD": PASSWORD})
    assert done.returncode == 0, done.stderr
    parsed: dict[str, Any] = yaml.safe_load(done.stdout)
    return parsed


def _sources(service: dict[str, Any]) -> list[str]:
    return [str(volume).split(":")[0] for volume in service.get("volumes", [])]


def test_the_deployment_has_redis_api_worker_and_beat(config: dict[str, Any]) -> None:
    services = config["services"]
    assert set(services) == {"redis", "api", "worker", "beat"}
    assert services["api"]["command"][:2] == ["riverbeam", "api"]
    assert services["worker"]["command"][:2] == ["riverbeam", "worker"]
    assert services["beat"]["command"][:2] == ["riverbeam", "beat"]
    assert services["api"]["ports"] == ["127.0.0.1:8000:8000/tcp"]
    for name in ("api", "worker", "beat"):
        service = services[name]
        assert service["build"]["dockerfile"] == "docker/Dockerfile"
        assert service["environment"]["RIVERBEAM_REDIS_URL"] == f"redis://:{PASSWORD}@redis:6379/0"
        assert service["restart"] == "unless-stopped"


def test_only_the_worker_reaches_the_docker_engine(config: dict[str, Any]) -> None:
    services = config["services"]
    with_socket = {name for name, service in services.items() if SOCKET in _sources(service)}
    assert with_socket == {"worker"}
    for name, service in services.items():
        assert not service.get("privileged"), name
        assert "DOCKER_HOST" not in service.get("environment", {}), name
    # The engine mounts workspaces by host path: the worker sees them at the same path.
    assert "/var/lib/riverbeam:/var/lib/riverbeam:rw" in services["worker"]["volumes"]


def test_redis_persists_to_an_append_only_file_behind_a_password(config: dict[str, Any]) -> None:
    redis = config["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--requirepass") + 1] == PASSWORD
    assert "ports" not in redis  # reachable on the compose network only
    conf = ROOT / "docker" / "redis.conf"
    assert f"{conf}:/usr/local/etc/redis/redis.conf:ro" in redis["volumes"]
    settings = [line.split() for line in conf.read_text().splitlines() if line.strip()]
    assert ["appendonly", "yes"] in settings
    assert ["maxmemory-policy", "noeviction"] in settings
    assert any(volume.endswith(":/data:rw") for volume in redis["volumes"])


def test_a_deployment_without_a_redis_password_is_refused() -> None:
    done = _compose_config({k: v for k, v in os.environ.items() if k != "REDIS_PASSWORD"})
    assert done.returncode != 0 and "set REDIS_PASSWORD" in done.stderr


def _project(compose_dir: Path, cwd: Path) -> str:
    """The project ``docker-compose`` works on for ``compose_dir/compose.yaml`` run from
    ``cwd``: the project label it filters the engine's containers by, which ``--verbose``
    logs (a read-only ``ps``)."""
    binary = shutil.which("docker-compose")
    assert binary is not None
    done = subprocess.run(
        [binary, "--verbose", "-f", str(compose_dir / "compose.yaml"), "ps"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "REDIS_PASSWORD": PASSWORD},
        timeout=60,
        check=False,
    )
    found = set(re.findall(r"com\.docker\.compose\.project=([\w.-]+)", done.stdout + done.stderr))
    assert len(found) == 1, done.stdout + done.stderr
    return found.pop()


def test_the_project_is_riverbeam_whatever_the_folder_and_the_backup_names_its_volume(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    # The deployment folder copied under another name, run from elsewhere.
    elsewhere = tmp_path / "deploy-here"
    shutil.copytree(COMPOSE.parent, elsewhere, ignore=shutil.ignore_patterns("*.toml"))
    assert _project(elsewhere, tmp_path) == "riverbeam"
    assert _project(COMPOSE.parent, ROOT) == "riverbeam"

    # docs/operations.md's backup copies the Redis volume of that project.
    assert "redis-data" in config["volumes"]
    operations = (ROOT / "docs" / "operations.md").read_text()
    backup = operations[operations.index("## Backups of job history") :]
    assert re.findall(r"-v (\S+):/data ", backup) == ["riverbeam_redis-data"]


def test_health_checks_secrets_and_data_follow_the_deployed_shape(config: dict[str, Any]) -> None:
    services = config["services"]
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    assert "/healthz" in " ".join(services["api"]["healthcheck"]["test"])
    assert services["worker"]["healthcheck"]["test"] == [
        "CMD",
        "riverbeam",
        "healthcheck",
        "worker",
    ]
    for name in ("api", "worker", "beat"):
        assert services[name]["depends_on"] == {"redis": {"condition": "service_healthy"}}
    # The API has no engine: its /healthz leaves the engine and image to the worker.
    assert services["api"]["environment"]["RIVERBEAM_API__HEALTH_ENGINE"] == "false"
    # Upstream tokens reach the worker only, as a file.
    holders = {name for name, service in services.items() if service.get("secrets")}
    assert holders == {"worker"}
    assert [secret["source"] for secret in services["worker"]["secrets"]] == ["upstream-token"]


def test_the_data_directory_is_mounted_at_its_own_path_wherever_it_is() -> None:
    elsewhere = "/srv/riverbeam-data"
    environment = {**os.environ, "REDIS_PASSWORD": PASSWORD, "RIVERBEAM_DATA": elsewhere}
    done = _compose_config(environment)
    assert done.returncode == 0, done.stderr
    worker = yaml.safe_load(done.stdout)["services"]["worker"]
    assert f"{elsewhere}:{elsewhere}:rw" in worker["volumes"]


def test_the_files_the_operations_setup_writes_into_the_checkout_are_ignored_by_git() -> None:
    # docs/operations.md puts the configuration and the upstream token beside compose.yaml;
    # a secret there must not be committable by a plain `git add`.
    for path in ("docker/riverbeam.toml", "docker/secrets/upstream-token"):
        done = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", path], check=False
        )
        assert done.returncode == 0, f"{path} is not ignored by git"


def test_every_variable_the_compose_file_reads_is_documented_in_operations() -> None:
    documented = (ROOT / "docs" / "operations.md").read_text()
    read = set(re.findall(r"\$\{(\w+)", COMPOSE.read_text()))
    assert "RIVERBEAM_API_PORT" in read
    assert [name for name in sorted(read) if f"`{name}`" not in documented] == []
