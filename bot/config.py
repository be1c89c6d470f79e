"""Riverbeam's configuration: ``riverbeam.toml`` plus ``RIVERBEAM_*`` environment variables.

The file is found at ``$RIVERBEAM_CONFIG`` or ``./riverbeam.toml``. Environment variables
override it, with ``__`` between nested names (``RIVERBEAM_SANDBOX__MEM_LIMIT=1g``).
Repositories are registered by name; a job names a repository, never a path or a URL.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from bot.errors import BeamError
from sandbox.identity import Identity

DEFAULT_PROTECTED_REFS = ("main", "master", "release/*")


class Credentials(BaseModel):
    """Where the worker finds the upstream credentials. They stay on the worker host: never
    in a container, never in a repository config a container can read."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    token_env: str | None = Field(default=None, description="environment variable with a token")
    token_file: Path | None = Field(default=None, description="file holding a token")
    username: str = Field(default="x-access-token", description="user name sent with a token")
    ssh_key: Path | None = Field(default=None, description="private key for ssh:// upstreams")

    @model_validator(mode="after")
    def _one_source(self) -> Credentials:
        sources = [self.token_env, self.token_file, self.ssh_key]
        if sum(source is not None for source in sources) > 1:
            raise ValueError("give one of token_env, token_file or ssh_key")
        return self


class RepositoryConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    upstream: str = Field(description="URL or path of the upstream repository")
    credentials: Credentials = Field(default_factory=Credentials)
    protected_refs: tuple[str, ...] = DEFAULT_PROTECTED_REFS
    default_branch: str = "main"
    publish_ref: str | None = Field(default=None, description="branch a publish job moves")
    docs_build_webhook: str | None = None
    summary_schedule: str | None = Field(default=None, description="cron expression")
    summary_webhook: str | None = Field(default=None, description="where summaries are posted")
    allow_self_approval: bool = False


class SandboxLimits(BaseModel):
    """Per-job container settings. Every limit is configurable; the defaults are hardened."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str = "riverbeam-sandbox"
    uid: int = 10001
    mem_limit: str = "512m"
    pids_limit: int = 128
    nano_cpus: int = 1_000_000_000
    tmpfs_size: str = "64m"
    call_timeout: float = 30.0
    max_message_bytes: int = 4 << 20
    max_read_bytes: int = 1 << 20
    max_write_bytes: int = 1 << 20
    job_deadline_seconds: int = 3600
    ready_timeout: float = Field(default=10.0, description="seconds for the tool server to start")
    build_method: Literal["auto", "dockerfile", "rootfs"] = Field(
        default="auto", description="how `riverbeam sandbox build` makes the image"
    )
    build_cache: Path | None = Field(
        default=None, description="downloaded wheels and Debian root filesystems"
    )
    debian_mirror: str = "http://deb.debian.org/debian"


class WorkspaceSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    root: Path = Path("/var/lib/riverbeam/workspaces")
    mirrors: Path = Path("/var/lib/riverbeam/mirrors")
    branch_prefix: str = "riverbeam/"
    retention_hours: float = 24.0


class ModelSettings(BaseModel):
    """Which model the workers use. Without a factory, ``OpenAiCompatible.from_env()``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    factory: str | None = Field(
        default=None,
        description="'module:function' returning a CompletionClient for a job (tests, demo)",
    )


class JobSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: str = Field(default="riverbeam", description="prefix of every Redis key")
    soft_time_limit_seconds: int = 900
    time_limit_seconds: int = 1200
    lease_seconds: float = 60.0
    snapshot_max_bytes: int = 32 << 20
    events_maxlen: int = 10_000
    diff_max_chars: int = 200_000
    webhook_timeout_seconds: float = 10.0


Role = Literal["submitter", "reviewer", "ci", "admin"]


class TokenConfig(BaseModel):
    """One bearer token of the HTTP API. Only its SHA-256 is stored: ``riverbeam tokens new``
    prints a fresh token and the entry to paste here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(
        min_length=1, max_length=200, description="who holds it; recorded on jobs and decisions"
    )
    role: Role
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the token")
    repos: tuple[str, ...] | None = Field(
        default=None, description="repositories it may use (default: all)"
    )


class ApiSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    tokens: tuple[TokenConfig, ...] = ()
    session_hours: float = Field(default=12.0, gt=0, description="web sign-in lifetime")
    secure_cookies: bool = Field(
        default=False, description="mark cookies Secure: set it when served over HTTPS"
    )
    sse_keepalive_seconds: float = Field(default=15.0, gt=0)
    max_body_bytes: int = Field(
        default=1 << 20, ge=1024, description="largest request body; more is 413 (BEM-711)"
    )
    # Above the 1 s slices of the event streams' blocking reads, which must not time out.
    redis_timeout_seconds: float = Field(
        default=2.0, gt=1.0, description="longest wait for one Redis answer in the API"
    )
    redis_breaker_seconds: float = Field(
        default=5.0, ge=0, description="after a Redis timeout, fail at once for this long"
    )
    auth_failures: int = Field(
        default=10, ge=1, description="failed sign-ins or tokens a client address may send"
    )
    auth_failure_window_seconds: float = Field(
        default=60.0, gt=0, description="... in this many seconds; then 429 (BEM-712)"
    )
    trusted_proxies: tuple[str, ...] = Field(
        default=(), description="proxy addresses whose X-Forwarded-For/-Proto are believed"
    )

    @model_validator(mode="after")
    def _unique(self) -> ApiSettings:
        digests = [token.sha256 for token in self.tokens]
        if len(set(digests)) != len(digests):
            raise ValueError("two api.tokens entries have the same sha256")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RIVERBEAM_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    redis_url: str = "redis://127.0.0.1:6379/0"
    identity: Identity = Field(default_factory=Identity)
    repositories: dict[str, RepositoryConfig] = Field(default_factory=dict)
    sandbox: SandboxLimits = Field(default_factory=SandboxLimits)
    workspaces: WorkspaceSettings = Field(default_factory=WorkspaceSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml = TomlConfigSettingsSource(settings_cls, toml_file=config_path())
        return (init_settings, env_settings, toml)

    def allows_self_approval(self, repo: str) -> bool:
        """Whether the requester of a job on ``repo`` may approve it themselves; never for a
        repository the configuration no longer registers."""
        repository = self.repositories.get(repo)
        return repository is not None and repository.allow_self_approval

    def repository(self, name: str) -> RepositoryConfig:
        """A registered repository; a job can only name one of these."""
        repository = self.repositories.get(name)
        if repository is None:
            known = ", ".join(sorted(self.repositories)) or "none"
            raise BeamError(
                "BEM-900", f"no repository named {name!r} is registered (known: {known})"
            )
        return repository


def config_path() -> Path:
    return Path(os.environ.get("RIVERBEAM_CONFIG", "riverbeam.toml"))


def load_settings(**overrides: Any) -> Settings:
    """Settings from the file and the environment; an invalid value is BEM-900."""
    try:
        return Settings(**overrides)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}"
            for item in error.errors()[:5]
        )
        raise BeamError("BEM-900", f"invalid configuration ({config_path()}): {problems}") from None
