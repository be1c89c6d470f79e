"""The compose deployment for real: the images ``riverbeam image build`` makes, and
``docker/compose.yaml`` brought up by pytest-docker's ``docker_services`` under a project name
of its own, on a data directory, configuration and secrets made for the test.

The upstream is a bare repository served over git's smart-HTTP protocol on the host's address
on the default Docker bridge (harness.docker_bridge), requiring a token that only the worker
container is given (a compose secret). Figures (image builds, cold start) are printed
at the end of the run.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from bot.config import Settings
from bot.demo import REPO_NAME, create_upstream
from harness.docker_bridge import bridge_address
from harness.git_http import GitHttpServer, basic
from harness.workers import IMAGE_BUILD, free_port, one_at_a_time
from sandbox.host.image import ImageInfo, build_image
from sandbox.host.image.deploy_images import build_deploy_images

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
UPSTREAM_USER = "riverbeam-bot"
HEALTHY_SECONDS = 240.0
FIGURES: list[str] = []


@dataclass
class Deployment:
    """What the test made for one compose project, and how to reach it."""

    project: str
    directory: Path
    upstream: Path
    main_sha: str
    api_url: str
    tokens: dict[str, str]
    git: GitHttpServer
    upstream_token: str
    images: tuple[ImageInfo, ImageInfo]
    started: float
    environment: dict[str, str] = field(default_factory=dict)

    def compose(self, *args: str, timeout: float = 300) -> str:
        command = ["docker-compose", "-f", str(COMPOSE), "-p", self.project, *args]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **self.environment},
            check=False,
        )
        assert done.returncode == 0, f"{' '.join(args)}: {done.stderr[-3000:]}"
        return done.stdout

    def containers(self, service: str) -> list[str]:
        return self.compose("ps", "-q", service).split()

    def client(self, who: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        return httpx.Client(base_url=self.api_url, headers=headers, timeout=30)

    def wait_healthy(self, workers: int = 1) -> dict[str, object]:
        """``/healthz`` answering 200 with ``workers`` workers on every job queue."""
        deadline = time.monotonic() + HEALTHY_SECONDS
        body: dict[str, object] = {}
        while time.monotonic() < deadline:
            try:
                reply = httpx.get(f"{self.api_url}/healthz", timeout=10)
                body = reply.json()
                served = body.get("workers", {})
                assert isinstance(served, dict)
                if reply.status_code == 200 and all(len(w) == workers for w in served.values()):
                    return body
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(1)
        logs = self.compose("logs", "--tail", "40")
        raise AssertionError(f"not healthy in {HEALTHY_SECONDS:g} s: {body}\n{logs[-6000:]}")


def _timed(label: str, started: float) -> None:
    FIGURES.append(f"{label}: {time.monotonic() - started:.1f} s")


@pytest.fixture(scope="session")
def deploy_images() -> tuple[ImageInfo, ImageInfo]:
    """The sandbox image, then the service and Redis images (no-ops when current)."""
    settings = Settings()
    started = time.monotonic()
    with one_at_a_time(IMAGE_BUILD):
        build_image(settings)
    _timed("sandbox image (build or no-op)", started)
    started = time.monotonic()
    images = build_deploy_images(settings)
    _timed("service and Redis images (build or no-op)", started)
    for image in images:
        state = "built" if image.built else "current"
        FIGURES.append(f"{image.ref}: {image.size_bytes / (1 << 20):.0f} MiB ({state})")
    return images


def _new_token(image: str, name: str, role: str) -> tuple[str, str]:
    """``riverbeam tokens new`` run from the service image: the token and its TOML table."""
    done = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", image, "riverbeam", "tokens", "new",
         "--name", name, "--role", role],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    token, _, table = done.stdout.partition("\n")
    return token.strip(), table


@pytest.fixture(scope="session")
def deployment_files(
    tmp_path_factory: pytest.TempPathFactory, deploy_images: tuple[ImageInfo, ImageInfo]
) -> Iterator[Deployment]:
    directory = tmp_path_factory.mktemp("deployment")
    data = directory / "data"
    data.mkdir()
    git_root = directory / "git"
    git_root.mkdir()
    upstream = git_root / "upstream.git"
    main_sha = create_upstream(upstream)
    upstream_token = secrets.token_hex(20)
    service, redis = deploy_images
    tokens: dict[str, str] = {}
    tables: list[str] = []
    for name, role in (("writer", "submitter"), ("reviewer", "reviewer")):
        tokens[name], table = _new_token(service.ref, name, role)
        tables.append(table)
    port = free_port()
    project = f"rbdeploy{os.getpid()}"
    with GitHttpServer(
        git_root, authorization=basic(UPSTREAM_USER, upstream_token), host=bridge_address()
    ) as git:
        config = directory / "riverbeam.toml"
        config.write_text(
            "\n".join(
                [
                    f"[repositories.{REPO_NAME}]",
                    f"upstream = {json.dumps(git.url_for(upstream))}",
                    f"[repositories.{REPO_NAME}.credentials]",
                    'token_file = "/run/secrets/upstream-token"',
                    f"username = {json.dumps(UPSTREAM_USER)}",
                    "[workspaces]",
                    f"root = {json.dumps(str(data / 'workspaces'))}",
                    f"mirrors = {json.dumps(str(data / 'mirrors'))}",
                    "[sandbox]",
                    f"image = {json.dumps(Settings().sandbox.image)}",
                    "[model]",
                    'factory = "bot.demo:demo_model"',
                    "[jobs]",
                    f"prefix = {json.dumps(project)}",
                    *tables,
                ]
            )
            + "\n"
        )
        secrets_dir = directory / "secrets"
        secrets_dir.mkdir()
        (secrets_dir / "upstream-token").write_text(upstream_token + "\n")
        environment = {
            "REDIS_PASSWORD": secrets.token_hex(16),
            "RIVERBEAM_IMAGE": service.ref,
            "REDIS_IMAGE": redis.ref,
            "RIVERBEAM_CONFIG_FILE": str(config),
            "RIVERBEAM_DATA": str(data),
            "RIVERBEAM_SECRETS": str(secrets_dir),
            "RIVERBEAM_API_PORT": f"127.0.0.1:{port}",
        }
        # pytest-docker's commands read the process environment.
        saved = {name: os.environ.get(name) for name in environment}
        os.environ.update(environment)
        try:
            yield Deployment(
                project=project,
                directory=directory,
                upstream=upstream,
                main_sha=main_sha,
                api_url=f"http://127.0.0.1:{port}",
                tokens=tokens,
                git=git,
                upstream_token=upstream_token,
                images=deploy_images,
                started=time.monotonic(),
                environment=environment,
            )
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    return "docker-compose"  # Debian's, v1.29


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    return str(COMPOSE)


@pytest.fixture(scope="session")
def docker_compose_project_name(deployment_files: Deployment) -> str:
    return deployment_files.project


@pytest.fixture(scope="session")
def docker_setup(deployment_files: Deployment) -> list[str]:
    deployment_files.started = time.monotonic()
    return ["up -d"]


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    # The volumes too, and the containers a scaled-up worker left.
    return ["down -v --remove-orphans"]


@pytest.fixture(scope="session")
def deployment(docker_services: object, deployment_files: Deployment) -> Deployment:
    """The stack up and healthy: Redis, the API, one worker, beat."""
    deployment_files.wait_healthy()
    _timed("compose up -> /healthz 200 (cold start)", deployment_files.started)
    return deployment_files


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("deployment figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
