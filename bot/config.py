"""Riverbeam's configuration: ``riverbeam.toml`` plus ``RIVERBEAM_*`` environment variables.

The file is found at ``$RIVERBEAM_CONFIG`` or ``./riverbeam.toml``. Environment variables
override it, with ``__`` between nested names (``RIVERBEAM_SANDBOX__MEM_LIMIT=1g``).
Repositories are registered by name; a job names a repository, never a path or a URL.

A value that another part parses later (a Docker byte size, the image name, the Redis URL, a
cron expression, ref names and patterns, webhook URLs, the model factory's form) is parsed
here, with that part's own parser where there is one, so a malformed value is BEM-900 when
the configuration is read, never a traceback in a worker later.
"""

from __future__ import annotations

import os
import posixpath
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import httpx
from docker.errors import DockerException
from docker.utils import parse_bytes
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from bot.core.cron import parse_cron
from bot.core.errors import BeamError
from bot.core.identity import Identity
from bot.core.tools import (
    MCP_ALLOWLIST_PATTERN,
    MCP_SERVER_NAME_PATTERN,
    TOOL_NAME_PATTERN,
    mcp_tool_name,
)
from sandbox.inside.checks.check_catalog import CHECK_NAMES, SITE_CHECKS
from sandbox.inside.refs import ProtectedRefs, branch_name

DEFAULT_PROTECTED_REFS = ("main", "master", "release/*")
# What a job may name as its repository (``JobSpec.repo``): a registered name must be one.
REPOSITORY_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
# Docker refuses a memory limit under 6 MiB.
MIN_MEM_LIMIT = 6 << 20
# A Docker repository name (lower case, path components, an optional registry host:port);
# the image check adds the tag.
_IMAGE_NAME = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"
)
_FACTORY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# A runtime name as dockerd's daemon.json registers it ("runc", "crun", "io.containerd.runc.v2").
_RUNTIME_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_T = TypeVar("_T")


def _checked(check: Callable[[_T], object], what: str) -> AfterValidator:
    """A validator running ``check`` (the parser the value's consumer uses) on the value; any
    error it raises becomes the setting's error, saying what the value must be."""

    def validate(value: _T) -> _T:
        try:
            check(value)
        except (BeamError, DockerException, ValueError, httpx.InvalidURL) as error:
            reason = error.message if isinstance(error, BeamError) else str(error)
            raise ValueError(f"{value!r} is not {what}: {reason}") from None
        return value

    return AfterValidator(validate)


def _byte_size(text: str) -> None:
    parse_bytes(text)
    if not re.fullmatch(r"\d+(\.\d+)?[bkmg]?b?", text.lower()):
        raise ValueError("use a number and a unit, such as 512m or 1g")


def _memory(text: str) -> None:
    _byte_size(text)
    if parse_bytes(text) < MIN_MEM_LIMIT:
        raise ValueError("Docker needs at least 6m")


def _http_url(text: str) -> None:
    url = httpx.URL(text)
    if url.scheme not in ("http", "https") or not url.host:
        raise ValueError("it needs http:// or https:// and a host")


def _matches(pattern: re.Pattern[str], form: str) -> Callable[[str], None]:
    def check(text: str) -> None:
        if not pattern.fullmatch(text):
            raise ValueError(f"it must look like {form}")

    return check


def _redis_url(url: str) -> None:
    from redis.connection import parse_url

    parse_url(url)  # type: ignore[no-untyped-call]


_PIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*")


def _pin(value: str) -> None:
    if _PIN.fullmatch(value) is None:
        raise ValueError(f"{value!r} is not 'name==version'")


ByteSize = Annotated[str, _checked(_byte_size, "a Docker size (512m, 1g)")]
MemoryLimit = Annotated[str, _checked(_memory, "a Docker memory limit (512m, 1g)")]
HttpUrl = Annotated[str, _checked(_http_url, "an http(s) URL")]
BranchName = Annotated[str, _checked(branch_name, "a branch name")]
Positive = Annotated[int, Field(ge=1)]
Seconds = Annotated[float, Field(gt=0)]


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


Site = Literal["mdbook", "mkdocs", "sphinx", "plain"]
"""How a repository's pages become a site, and so what a relative link in them names."""


def _check_name(value: str) -> None:
    if value not in CHECK_NAMES:
        raise ValueError(f"{value!r} is not a check; use {', '.join(CHECK_NAMES)}")


def _tree_path(value: str) -> None:
    """A path inside the repository, as a check's configuration names it."""
    normal = posixpath.normpath(value)
    if value.startswith("/") or "\\" in value or "\0" in value or normal.startswith(".."):
        raise ValueError(f"{value!r} is not a relative path inside the repository")


# The schema lists the names; the validator keeps the error that says which ones there are.
CheckName = Annotated[
    str,
    _checked(_check_name, "a check's name"),
    WithJsonSchema({"type": "string", "enum": list(CHECK_NAMES)}),
]
TreePath = Annotated[str, _checked(_tree_path, "a path inside the repository")]


class RepositoryChecks(BaseModel):
    """The docs checks a repository declares (docs/checks.md): which run, their caps, and
    whether a new failure blocks the approval."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run: tuple[CheckName, ...] = Field(min_length=1, description="the checks, in order")
    block: bool = Field(
        default=False, description="a new failure refuses the approve until an admin overrides"
    )
    timeout_seconds: Seconds = Field(default=120.0, le=3600, description="wall time per check")
    cpu_seconds: Positive = Field(default=120, le=3600, description="CPU time per check")
    memory: MemoryLimit = Field(default="1g", description="address space per check process")
    processes: Positive = Field(default=32, le=1024, description="processes per check")
    output_bytes: Positive = Field(default=1 << 20, description="output kept per check")
    max_findings: Positive = Field(default=200, le=10_000, description="findings kept per check")
    mkdocs_config: TreePath = Field(default="mkdocs.yml", description="mkdocs's configuration")
    sphinx_source: TreePath = Field(default="docs", description="the folder holding conf.py")
    mdbook_root: TreePath = Field(default=".", description="the folder holding book.toml")

    @field_validator("run")
    @classmethod
    def _distinct(cls, run: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({name for name in run if run.count(name) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} named more than once")
        if len([name for name in run if name in SITE_CHECKS]) > 1:
            raise ValueError(f"name one site build at most ({', '.join(sorted(SITE_CHECKS))})")
        return run


class RepositoryConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    upstream: str = Field(min_length=1, description="URL or path of the upstream repository")
    credentials: Credentials = Field(default_factory=Credentials)
    protected_refs: Annotated[
        tuple[str, ...], _checked(ProtectedRefs, "a list of ref patterns")
    ] = DEFAULT_PROTECTED_REFS
    default_branch: BranchName = "main"
    publish_ref: BranchName | None = Field(default=None, description="branch a publish job moves")
    docs_build_webhook: HttpUrl | None = None
    approval_webhook: HttpUrl | None = Field(
        default=None, description="URL POSTed when a job parks on a push, waiting for a person"
    )
    summary_schedule: str | None = Field(default=None, description="cron expression")
    summary_webhook: HttpUrl | None = Field(default=None, description="where summaries are posted")
    allow_self_approval: bool = False
    site: Site | None = Field(
        default=None,
        description="how the pages become a site, for the link check (default: detected from"
        " book.toml, mkdocs.yml or conf.py)",
    )
    known_hosts: Path | None = Field(
        default=None,
        description="OpenSSH known_hosts file pinning an ssh:// upstream's host key "
        "(default: workspaces.known_hosts)",
    )
    checks: RepositoryChecks | None = Field(
        default=None, description="the docs checks run in the sandbox (docs/checks.md)"
    )


class SandboxLimits(BaseModel):
    """Per-job container settings. Every limit is configurable; the defaults are hardened."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    image: Annotated[
        str, _checked(_matches(_IMAGE_NAME, "riverbeam-sandbox"), "a Docker image name")
    ] = "riverbeam-sandbox"
    # Never 0: the sandbox never runs as root.
    uid: int = Field(default=10001, ge=1, le=2**31 - 2)
    mem_limit: MemoryLimit = "512m"
    pids_limit: Positive = 128
    nano_cpus: Positive = 1_000_000_000
    tmpfs_size: ByteSize = "64m"
    call_timeout: Seconds = 30.0
    max_message_bytes: Positive = 4 << 20
    max_read_bytes: Positive = 1 << 20
    max_write_bytes: Positive = 1 << 20
    job_deadline_seconds: Positive = 3600
    ready_timeout: Seconds = Field(default=10.0, description="seconds for the tool server to start")
    runtime: Annotated[str, _checked(_matches(_RUNTIME_NAME, "crun or runc"), "a runtime name")] = (
        Field(
            default="auto",
            description="the containers' OCI runtime: 'auto' (crun when the engine has it, "
            "else the engine's default) or a runtime registered with the engine",
        )
    )
    build_method: Literal["auto", "dockerfile", "rootfs"] = Field(
        default="auto", description="how `riverbeam sandbox build` makes the image"
    )
    build_cache: Path | None = Field(
        default=None, description="downloaded wheels and Debian root filesystems"
    )
    debian_mirror: HttpUrl = "http://deb.debian.org/debian"
    # The docs checks (docs/checks.md) run as a uid of their own, never the tool server's.
    checks_uid: int = Field(default=10002, ge=1, le=2**31 - 2)
    check_packages: tuple[Annotated[str, _checked(_pin, "name==version")], ...] = Field(
        default=(), description="more packages for the checks, each 'name==version'"
    )
    check_programs: tuple[Path, ...] = Field(
        default=(), description="executables copied in for the checks (a static mdbook)"
    )
    checks_trees_size: ByteSize = Field(default="256m", description="tmpfs of the checked trees")
    checks_work_size: ByteSize = Field(default="256m", description="tmpfs the checks write in")

    @model_validator(mode="after")
    def _two_uids(self) -> SandboxLimits:
        if self.checks_uid == self.uid:
            raise ValueError("checks_uid must differ from uid: the checks never run as the tools")
        return self


class WorkspaceSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    root: Path = Path("/var/lib/riverbeam/workspaces")
    mirrors: Path = Path("/var/lib/riverbeam/mirrors")
    branch_prefix: Annotated[
        str, _checked(lambda prefix: branch_name(f"{prefix}0"), "a branch name prefix")
    ] = "riverbeam/"
    retention_hours: Seconds = 24.0
    views: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="job trees as copy-on-write views of one checkout per commit (overlayfs):"
        " auto where the worker may mount, else a checkout per job",
    )
    known_hosts: Path = Field(
        default=Path("/var/lib/riverbeam/known_hosts"),
        description="OpenSSH known_hosts file pinning the host keys of SSH upstreams",
    )


Provider = Literal["openai", "azure-openai", "nvidia", "openai-compatible"]
TokenParameter = Literal["max_completion_tokens", "max_tokens"]


class ModelSettings(BaseModel):
    """Which model the workers use and how requests to it are made.

    Every field but ``factory`` may be left unset: the provider profile fills it in
    (``bot.clients.profiles``), after the conventional environment variables (``BEAM_*``,
    then ``OPENAI_*``). Sampling, seed and the like are sent only when set here.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    factory: (
        Annotated[str, _checked(_matches(_FACTORY, "'module:function'"), "a factory")] | None
    ) = Field(
        default=None,
        description="'module:function' returning a CompletionClient for a job (tests, demo)",
    )
    provider: Provider | None = Field(
        default=None, description="the family whose defaults apply (default: from the base URL)"
    )
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = Field(default=None, description="variable holding the API key")
    api_key_file: Path | None = Field(default=None, description="file holding the API key")
    organization: str | None = None
    project: str | None = None
    api_version: str | None = Field(default=None, description="azure-openai's api-version")
    azure_ad_token_provider: (
        Annotated[str, _checked(_matches(_FACTORY, "'module:function'"), "a factory")] | None
    ) = Field(
        default=None,
        description="azure-openai: 'module:function' returning an Entra ID token provider",
    )
    headers: dict[str, str] = Field(default_factory=dict, description="sent with every request")
    connect_timeout: float | None = Field(default=None, gt=0)
    read_timeout: float | None = Field(default=None, gt=0)
    max_retries: int | None = Field(default=None, ge=0, le=20)
    max_output_tokens: int | None = Field(default=None, ge=1)
    output_tokens_parameter: TokenParameter | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    parallel_tool_calls: bool | None = None
    reasoning_effort: str | None = Field(
        default=None, description="checked against the values the provider documents"
    )
    reasoning: bool | None = Field(
        default=None,
        description="a reasoning model (no temperature or top_p, max_completion_tokens);"
        " default: from the model name (o1, o3, o4-mini, gpt-5 ...)",
    )
    tool_choice: Literal["auto", "required", "none"] | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)
    context_window: int | None = Field(
        default=None, ge=1024, description="tokens the model reads and writes in one request"
    )
    max_result_chars: int = Field(
        default=24_000, ge=500, description="longest tool result sent back whole"
    )
    max_calls_per_reply: int = Field(
        default=16, ge=1, description="tool calls run from one reply; the rest are declined"
    )
    max_rounds: int = Field(
        default=8, ge=1, le=1000, description="model completions in one segment (BEM-088)"
    )
    compaction: bool = Field(default=True, description="compact older tool results near budget")
    context_budget: bool = Field(
        default=True, description="off: no result cap, call cap, compaction or size check"
    )
    max_requests: int | None = Field(
        default=100, ge=1, description="requests to the model in one run (None: no limit)"
    )
    max_tool_calls: int | None = Field(
        default=500, ge=1, description="tool calls run in one run (None: no limit)"
    )
    max_total_tokens: int | None = Field(
        default=None, ge=1, description="tokens reported for one run (None: no limit)"
    )

    @model_validator(mode="before")
    @classmethod
    def _no_key_here(cls, data: Any) -> Any:
        if isinstance(data, dict) and "api_key" in data:
            raise ValueError(
                "the API key never goes in the configuration: name a variable with"
                " api_key_env or a file with api_key_file"
            )
        return data


class JobSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: str = Field(
        default="riverbeam", pattern=r"^[^\s:]+$", description="prefix of every Redis key"
    )
    soft_time_limit_seconds: Positive = 900
    time_limit_seconds: Positive = 1200
    lease_seconds: Seconds = 60.0
    resume_grace_seconds: Seconds = Field(
        default=120.0, description="age of a decision whose resume is sent again"
    )
    snapshot_max_bytes: Positive = 32 << 20
    events_maxlen: Positive = 10_000
    diff_max_chars: Positive = 200_000
    webhook_timeout_seconds: Seconds = 10.0
    container_start: Literal["ahead", "on_demand", "eager"] = Field(
        default="ahead", description="when a segment starts its container (docs/jobs.md)"
    )
    spare_containers: int = Field(
        default=1, ge=0, le=4, description="spare containers per worker process (0: none)"
    )

    @model_validator(mode="after")
    def _limits_in_order(self) -> JobSettings:
        # Celery raises the soft limit first, so the segment can still record its failure.
        if self.soft_time_limit_seconds >= self.time_limit_seconds:
            raise ValueError("soft_time_limit_seconds must be less than time_limit_seconds")
        return self


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


# A Host pattern of api.mcp_allowed_hosts: a name or a bracketed IPv6 address, with a port or
# ``*`` for any port; ``*`` alone for any host.
_HOST_PATTERN = r"^(\*|([A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\])(:([0-9]{1,5}|\*))?)$"


class ApiSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = Field(default="127.0.0.1", pattern=r"^\S+$")
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
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="longest a request's headers may take to arrive; then the connection is "
        "closed (408, BEM-714)",
    )
    # Above the event streams' 64 reading threads: one host (a CI runner, an office behind
    # NAT) may follow more jobs than that at once.
    max_connections_per_address: int = Field(
        default=128,
        ge=1,
        description="open connections one client address may hold; more are refused (429, "
        "BEM-713); api.trusted_proxies are not counted",
    )
    public_url: HttpUrl | None = Field(
        default=None,
        description="where people reach the pages (https://riverbeam.example.org): what "
        "Riverbeam posts to a forge links its job page under it; unset, posts carry no link",
    )
    mcp_allowed_hosts: tuple[Annotated[str, Field(pattern=_HOST_PATTERN)], ...] = Field(
        default=("localhost:*", "127.0.0.1:*", "[::1]:*"),
        description="the Host names /mcp answers to (name, name:port, name:*; * for any), "
        "beside api.host:api.port; an Origin must be http(s):// one of them",
    )
    health_engine: bool = Field(
        default=True,
        description="/healthz checks the Docker engine and sandbox image here; false where "
        "the API has no engine (the compose deployment: only the worker has the socket)",
    )

    @model_validator(mode="after")
    def _unique(self) -> ApiSettings:
        digests = [token.sha256 for token in self.tokens]
        if len(set(digests)) != len(digests):
            raise ValueError("two api.tokens entries have the same sha256")
        return self


_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
_MCP_TOOL = r"^[A-Za-z0-9_-]{1,64}$"


class McpServerConfig(BaseModel):
    """One MCP server a job's agent may use (``[[mcp.servers]]``): started on the worker for
    each job segment whose skill names one of its tools, and stopped with the segment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    command: str | None = Field(default=None, min_length=1)
    args: tuple[str, ...] = ()
    url: Annotated[str, _checked(httpx.URL, "an http(s) URL")] | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # Exactly this (with PATH, and HOME set to the server's own empty directory): the
    # server never inherits the worker's environment, where tokens and passwords live.
    env: dict[Annotated[str, Field(pattern=_ENV_NAME)], str] = Field(default_factory=dict)
    startup_timeout_seconds: float = Field(default=20.0, gt=0, le=300)
    call_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    max_output_bytes: int = Field(default=65_536, ge=256, le=16 << 20)
    tools: tuple[Annotated[str, Field(pattern=_MCP_TOOL)], ...]
    confirm_required: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> McpServerConfig:
        if not re.fullmatch(MCP_SERVER_NAME_PATTERN, self.name):
            raise ValueError(
                f"{self.name!r} is not an MCP server name: lower-case letters, digits and "
                "'-', words joined by single '_', at most 32 characters a word, no dots"
            )
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r}: give either command or url, not both")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"MCP server {self.name!r}: url must be http:// or https://")
        if self.url is not None and (self.args or self.env):
            raise ValueError(f"MCP server {self.name!r}: args and env are for a command")
        if self.command is not None and self.headers:
            raise ValueError(f"MCP server {self.name!r}: headers are for a url")
        for tool in self.tools:
            if not re.fullmatch(TOOL_NAME_PATTERN, mcp_tool_name(self.name, tool)):
                raise ValueError(
                    f"MCP tool {self.name}.{tool}: {mcp_tool_name(self.name, tool)!r}, the "
                    "name the model sees, is over 64 characters; shorten the server's name"
                )
        unknown = sorted(set(self.confirm_required) - set(self.tools))
        if unknown:
            raise ValueError(
                f"MCP server {self.name!r}: confirm_required names {unknown}, which are not "
                "in its tools allowlist"
            )
        return self


class McpSettings(BaseModel):
    """MCP toolboxes for agents: the servers, and the tools each built-in skill is granted
    beyond its own allowlist (``[mcp.skills] author = ["everything.echo"]``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    servers: tuple[McpServerConfig, ...] = ()
    skills: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names_resolve(self) -> McpSettings:
        names = [server.name for server in self.servers]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"MCP servers named twice: {twice}")
        for skill, entries in self.skills.items():
            for entry in entries:
                problem = self.unresolved(entry)
                if problem:
                    raise ValueError(f"mcp.skills.{skill}: {problem}")
        return self

    def server(self, name: str) -> McpServerConfig | None:
        return next((server for server in self.servers if server.name == name), None)

    def unresolved(self, entry: str) -> str | None:
        """Why the allowlist entry ``server.tool`` names no configured tool, or None."""
        found = re.fullmatch(MCP_ALLOWLIST_PATTERN, entry)
        if found is None:
            return f"{entry!r} is not an MCP tool; write server.tool"
        server = self.server(found.group(1))
        if server is None:
            known = ", ".join(sorted(s.name for s in self.servers)) or "none"
            return f"{entry!r} names MCP server {found.group(1)!r}, not configured (known: {known})"
        if found.group(2) not in server.tools:
            return (
                f"{entry!r}: {found.group(2)!r} is not in the tools allowlist of MCP server "
                f"{server.name!r} ({', '.join(server.tools) or 'empty'})"
            )
        return None


ForgeKind = Literal["github", "gitlab"]
# The forge's own permission of a person on a repository, weakest first: GitHub's
# collaborator permissions; GitLab's access levels map onto them (docs/forges.md).
ForgePermissionName = Literal["none", "read", "triage", "write", "maintain", "admin"]
ForgeCommand = Literal["author", "address", "decide"]
_FORGE_REPOSITORY = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$"
_COMMAND_WORD = r"^@[A-Za-z0-9][A-Za-z0-9_.-]{0,38}$"
_DEFAULT_MINIMUMS: dict[ForgeCommand, ForgePermissionName] = {
    "author": "write",
    "address": "write",
    "decide": "maintain",
}


class ForgeRepositoryConfig(BaseModel):
    """One forge repository (GitHub ``owner/name``, GitLab project path) served as a
    registered Riverbeam repository, and what on it starts work."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repository: Annotated[str, Field(pattern=REPOSITORY_NAME)] = Field(
        description="the registered repository (a [repositories] name) the work runs on"
    )
    project_id: int | None = Field(
        default=None, ge=1, description="GitLab: the project's numeric id, checked as well"
    )
    command: Annotated[str, Field(pattern=_COMMAND_WORD)] = Field(
        default="@riverbeam", description="the word a comment starts with to ask for work"
    )
    label: str | None = Field(
        default=None, min_length=1, max_length=100, description="an issue given it gets work"
    )
    review: bool = Field(default=True, description="review pull requests opened or updated")
    review_paths: tuple[Annotated[str, Field(min_length=1, max_length=200)], ...] = Field(
        default=(), description="review only pull requests touching these globs (docs/**)"
    )
    commit_notes: bool = Field(default=False, description="draft commit notes for each PR")
    minimum: dict[ForgeCommand, ForgePermissionName] = Field(
        default_factory=lambda: dict(_DEFAULT_MINIMUMS),
        description="the forge permission each command needs (author, address, decide)",
    )

    @field_validator("minimum")
    @classmethod
    def _every_command(
        cls, minimum: dict[ForgeCommand, ForgePermissionName]
    ) -> dict[ForgeCommand, ForgePermissionName]:
        # A table naming one command keeps the defaults of the others.
        return {**_DEFAULT_MINIMUMS, **minimum}


class ForgeConfig(BaseModel):
    """One forge Riverbeam takes work from (``[forges.<name>]``): its webhook endpoint is
    ``/webhooks/<name>``. The webhook secret is read from ``webhook_secret_file`` on each
    delivery, never from this file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ForgeKind
    base_url: HttpUrl | None = Field(
        default=None,
        description="the forge's API (default https://api.github.com or https://gitlab.com; "
        "GitHub Enterprise Server: https://HOST/api/v3)",
    )
    webhook_secret_file: Path = Field(description="file holding the webhook secret")
    bot_login: str = Field(
        min_length=1, max_length=100, description="Riverbeam's own account: its events are ignored"
    )
    installations: tuple[Annotated[int, Field(ge=1)], ...] = Field(
        default=(), description="GitHub App installation ids accepted; others are refused"
    )
    repositories: dict[Annotated[str, Field(pattern=_FORGE_REPOSITORY)], ForgeRepositoryConfig] = (
        Field(default_factory=dict, description="forge repository -> Riverbeam repository")
    )
    deliveries_per_minute: int = Field(
        default=600, ge=1, description="accepted deliveries a minute; more are 429 (BEM-806)"
    )
    delivery_ttl_hours: float = Field(
        default=168.0, gt=0, description="how long a delivery id is remembered (redeliveries)"
    )
    app_id: int | None = Field(
        default=None, ge=1, description="GitHub App: its id (the JWT issuer), with private_key_file"
    )
    private_key_file: Path | None = Field(
        default=None, description="GitHub App: file holding its private key (PEM)"
    )
    token_file: Path | None = Field(
        default=None,
        description="file holding a token: GitHub fine-grained, GitLab project or group",
    )
    client_factory: (
        Annotated[str, _checked(_matches(_FACTORY, "'module:function'"), "a factory")] | None
    ) = Field(
        default=None,
        description="'module:function' returning the forge lookups the workers use (tests); "
        "unset: the built-in client of the kind, when there is one",
    )

    @model_validator(mode="after")
    def _one_credential(self) -> ForgeConfig:
        if (self.app_id is None) != (self.private_key_file is None):
            raise ValueError("app_id and private_key_file go together (a GitHub App)")
        if self.app_id is not None and self.kind != "github":
            raise ValueError("app_id is GitHub's: GitLab takes token_file")
        if self.app_id is not None and self.token_file is not None:
            raise ValueError("a GitHub App (app_id) or a token (token_file), not both")
        return self

    def repository_for(self, path: str) -> ForgeRepositoryConfig | None:
        """The entry of a forge repository; GitLab paths compare without case."""
        found = self.repositories.get(path)
        if found is None and self.kind == "gitlab":
            folded = path.lower()
            found = next((v for k, v in self.repositories.items() if k.lower() == folded), None)
        return found


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RIVERBEAM_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    redis_url: Annotated[str, _checked(_redis_url, "a Redis URL")] = "redis://127.0.0.1:6379/0"
    identity: Identity = Field(default_factory=Identity)
    repositories: dict[Annotated[str, Field(pattern=REPOSITORY_NAME)], RepositoryConfig] = Field(
        default_factory=dict
    )
    sandbox: SandboxLimits = Field(default_factory=SandboxLimits)
    workspaces: WorkspaceSettings = Field(default_factory=WorkspaceSettings)
    model: ModelSettings = Field(default_factory=ModelSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    forges: dict[Annotated[str, Field(pattern=REPOSITORY_NAME)], ForgeConfig] = Field(
        default_factory=dict
    )

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
        return (init_settings, _EnvironmentSource(settings_cls), toml)

    @model_validator(mode="after")
    def _schedules_parse(self) -> Settings:
        if not any(repo.summary_schedule for repo in self.repositories.values()):
            return self
        try:
            for name, repo in sorted(self.repositories.items()):
                if repo.summary_schedule is not None:
                    parse_cron(repo.summary_schedule, repo=name)
        except BeamError as error:
            raise ValueError(error.message) from None
        return self

    @model_validator(mode="after")
    def _forges_name_repositories(self) -> Settings:
        for name, forge in sorted(self.forges.items()):
            for path, entry in sorted(forge.repositories.items()):
                if entry.repository not in self.repositories:
                    raise ValueError(
                        f"forges.{name}.repositories.{path!r} names {entry.repository!r}, "
                        "which [repositories] does not register"
                    )
        return self

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


class _Unparsable(ValueError):
    """A variable whose value pydantic-settings could not parse: a list or table setting
    that is not JSON."""

    def __init__(self, variable: str, error: ValueError) -> None:
        super().__init__(f"${variable.upper()}: {error}")
        self.variable = variable
        self.reason = str(error)


class _EnvironmentSource(EnvSettingsSource):
    """The ``RIVERBEAM_*`` variables, read as pydantic-settings reads them, except that a
    value it cannot parse names its variable: pydantic-settings names only the top-level
    field ("model"), and the JSON error it chains names nothing."""

    def prepare_field_value(
        self, field_name: str, field: FieldInfo, value: Any, value_is_complex: bool
    ) -> Any:
        try:
            return super().prepare_field_value(field_name, field, value, value_is_complex)
        except _Unparsable:
            raise
        except ValueError as error:
            # The top-level variable itself (RIVERBEAM_MODEL='not json').
            raise _Unparsable(f"{self.env_prefix}{field_name}", error) from None

    def explode_env_vars(
        self, field_name: str, field: FieldInfo, env_vars: Mapping[str, str | None]
    ) -> dict[str, Any]:
        try:
            return super().explode_env_vars(field_name, field, env_vars)
        except ValueError:
            # A nested variable: which one is found by parsing each alone, the same way.
            for name, value in env_vars.items():
                try:
                    super().explode_env_vars(field_name, field, {name: value})
                except ValueError as error:
                    raise _Unparsable(name, error) from None
            raise


def config_path() -> Path:
    return Path(os.environ.get("RIVERBEAM_CONFIG", "riverbeam.toml"))


def load_settings(**overrides: Any) -> Settings:
    """Settings from the file and the environment; an invalid value is BEM-900."""
    try:
        return Settings(**overrides)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise BeamError("BEM-900", f"{config_path()} is not valid TOML: {error}") from None
    except OSError as error:
        raise BeamError("BEM-900", f"cannot read {config_path()}: {error.strerror}") from None
    except ValidationError as error:
        problems = "; ".join(_problem(item["loc"], item["msg"]) for item in error.errors()[:5])
        raise BeamError("BEM-900", f"invalid configuration ({config_path()}): {problems}") from None
    except SettingsError as error:
        cause = error.__cause__
        if not isinstance(cause, _Unparsable):
            raise BeamError(
                "BEM-900", f"invalid configuration ({config_path()}): {error}: {cause}"
            ) from None
        loc = tuple(cause.variable[len("RIVERBEAM_") :].lower().split("__"))
        # The value is not shown: a variable such as model.headers may carry a credential.
        example = """'["main", "release/*"]' or '{"X-Team": "docs"}'"""
        reason = (
            f"the value is not JSON ({cause.reason}); a list or table setting in a variable is "
            f"written as JSON, such as {example}"
        )
        problem = _problem(loc, reason)
        raise BeamError("BEM-900", f"invalid configuration ({config_path()}): {problem}") from None


def _problem(loc: tuple[int | str, ...], message: str) -> str:
    """One refused setting: its key, where its value came from (the variable, when one is
    set, overrides the file) and why."""
    key = ".".join(str(part) for part in loc)
    variable = "RIVERBEAM_" + "__".join(str(part) for part in loc).upper()
    where = f" (from ${variable})" if variable in {name.upper() for name in os.environ} else ""
    reason = message.removeprefix("Value error, ")
    return f"{key}{where}: {reason}" if key else reason
