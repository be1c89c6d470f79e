"""Every Riverbeam error, and every BEM code, in one place.

Each refusal or failure is a ``BeamError`` carrying a stable ``code`` and a message that says
what to do next. The tree groups codes by the part of the system that raises them::

    BeamError
    ├── RoutingError          BEM-02x, BEM-04x   picking an agent for a request
    ├── AgentContractError    BEM-086, BEM-087   an agent's frames break the contract
    ├── ModelError            BEM-06x, 07x, 081  talking to the language model
    ├── ToolLoopError         BEM-088..099       the tool loop and resumable runs
    ├── ToolError             BEM-10x            a tool refused or failed
    ├── SkillError            BEM-11x            skill files and lookups
    ├── JailError             BEM-300..305       a path the jail refuses
    ├── GitError              BEM-32x, 33x       working tree, refs and pushes
    │   ├── WorkspaceError    BEM-34x            mirrors and per-job workspaces on the host
    │   └── RelayError        BEM-35x, 36x       the relay and publishing upstream
    ├── ContainerError        BEM-40x, 411, 412  the per-job sandbox container
    ├── JobError              BEM-50x..52x       jobs, the store, the workers, outcomes
    ├── ApprovalError         BEM-60x            approvals of parked calls
    ├── AccessError           BEM-70x            the HTTP API and web pages: tokens, roles, requests
    ├── ToolboxError          BEM-721..726       MCP servers that a job's agent calls
    ├── ForgeInboundError     BEM-800..819       work from a forge: webhooks, events, commands
    ├── ForgeClientError      BEM-820..834       a forge's API (825.. GitHub's, 830.. GitLab's)
    │   ├── ForgeRetryLater                      the forge may answer later: retry
    │   ├── ForgeRefused                         the forge refused: retrying would not help
    │   └── ForgeCredentialsError                the forge's key or token cannot be read
    └── ConfigError           BEM-90x            configuration

``BeamError(code, message)`` builds the right family from the code, so a code travelling as
``{"code", "message"}`` (over the tool server's stream, through Celery, in an API problem
document) comes back as the same class. Errors pickle by code and message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast


class BeamError(Exception):
    """Root of every Riverbeam error: a BEM code and a message that says what to do."""

    def __new__(cls, code: str, message: str) -> BeamError:
        # The code decides the family: ``BeamError("BEM-302", ...)`` is a JailError.
        entry = CODES.get(code)
        if entry is None:
            raise ValueError(f"{code!r} is not a registered BEM code (see bot/core/errors.py)")
        if not issubclass(entry.family, cls):
            raise ValueError(f"{code} belongs to {entry.family.__name__}, not {cls.__name__}")
        return super().__new__(entry.family, code, message)

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (BeamError, (self.code, self.message))

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BeamError:
        return BeamError(str(data["code"]), str(data["message"]))


class RoutingError(BeamError):
    """The request cannot be routed to an agent."""


class AgentContractError(BeamError):
    """An agent's stream broke the frame contract."""


class ModelError(BeamError):
    """The model endpoint or a model client failed."""


class ToolLoopError(BeamError):
    """The tool loop stopped, or a saved run cannot resume."""


class ToolError(BeamError):
    """A tool refused its arguments or failed while running."""


class SkillError(BeamError):
    """A skill is unknown or its file is malformed."""


class JailError(BeamError):
    """A model-supplied path was refused by the sandbox jail."""


class GitError(BeamError):
    """A git operation on the working tree, a ref name or a push was refused or failed."""


class WorkspaceError(GitError):
    """A mirror or a per-job workspace could not be prepared."""


class RelayError(GitError):
    """The host relay refused or failed to push an approved commit upstream."""


class ContainerError(BeamError):
    """The sandbox container, its image or its tool server failed."""


class JobError(BeamError):
    """A job cannot be created, found, run or resumed."""


class ApprovalError(BeamError):
    """An approval cannot be decided or applied."""


class AccessError(BeamError):
    """An HTTP request is unauthenticated, not allowed, or malformed."""


class ToolboxError(BeamError):
    """An MCP server of a job's toolbox is not configured, failed to start, or failed a call."""


class ForgeInboundError(BeamError):
    """A forge's webhook was refused, or an event from it started nothing."""


class ForgeClientError(BeamError):
    """A call to a forge's API (GitHub, GitLab) failed; a subclass says what may follow."""


class ForgeRetryLater(ForgeClientError):
    """The forge was unreachable, slow, failing (5xx) or rate limiting: the same call may
    succeed later. ``retry_after_seconds`` is the forge's own wait (``Retry-After``, the rate
    limit's reset), or None when it named none and the caller's backoff applies."""

    def __new__(
        cls, code: str, message: str, retry_after_seconds: float | None = None
    ) -> ForgeRetryLater:
        return cast(ForgeRetryLater, super().__new__(cls, code, message))

    def __init__(self, code: str, message: str, retry_after_seconds: float | None = None) -> None:
        super().__init__(code, message)
        self.retry_after_seconds = retry_after_seconds

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (ForgeRetryLater, (self.code, self.message, self.retry_after_seconds))


class ForgeRefused(ForgeClientError):
    """The forge refused the call (a 4xx other than a rate limit, a reply that is not its
    API's): the same call would be refused again, so it is not retried."""


class ForgeCredentialsError(ForgeClientError):
    """The forge's private key or token file cannot be read on this host (the path is
    named, never what it holds)."""


class ConfigError(BeamError):
    """Configuration is missing or invalid."""


@dataclass(frozen=True)
class Code:
    code: str
    family: type[BeamError]
    meaning: str


_TABLE = [
    Code("BEM-020", RoutingError, "agent not registered"),
    Code("BEM-021", RoutingError, "an agent with this name is already registered"),
    Code("BEM-040", RoutingError, "request content uses a modality the agent does not list"),
    Code("BEM-041", RoutingError, "non-text content while the built-in text-only model is in use"),
    Code("BEM-060", ModelError, "model endpoint unreachable or timed out after retries"),
    Code("BEM-061", ModelError, "model endpoint refused the request (non-retryable HTTP status)"),
    Code("BEM-062", ModelError, "model endpoint kept failing (429/5xx) until retries ran out"),
    Code("BEM-063", ModelError, "model reply is malformed"),
    Code("BEM-064", ModelError, "model client is not configured (no API key)"),
    Code("BEM-065", ModelError, "requests to a non-loopback model endpoint are disabled"),
    Code("BEM-066", ModelError, "the provider's content filter stopped the model's reply"),
    Code("BEM-067", ModelError, "the model's reply was cut off at its output-token limit"),
    Code("BEM-068", ModelError, "the model's reply ended for a reason Riverbeam does not know"),
    Code("BEM-069", ModelError, "no reply within the read timeout; not repeated"),
    Code("BEM-070", ModelError, "the next request does not fit the context budget"),
    Code("BEM-071", ModelError, "the model replied with nothing: no text and no tool calls"),
    Code("BEM-072", ModelError, "the model refused the request as over its context window"),
    Code("BEM-073", ModelError, "the run reached a run limit (requests, tool calls or tokens)"),
    Code("BEM-081", ModelError, "scripted client has no steps left"),
    Code("BEM-086", AgentContractError, "an agent's stream ended without a done frame"),
    Code("BEM-087", AgentContractError, "an agent's stream produced an error frame"),
    Code("BEM-088", ToolLoopError, "tool loop hit its round limit"),
    Code("BEM-089", ToolLoopError, "the model named a tool the agent does not have"),
    Code("BEM-090", ToolLoopError, "tool arguments are not valid JSON or do not match the schema"),
    Code("BEM-091", ToolLoopError, "saved run state has an unsupported version"),
    Code("BEM-092", ToolLoopError, "saved run state does not match the agent it resumes on"),
    Code("BEM-093", ToolLoopError, "the run has no pending call, or the decision names another"),
    Code("BEM-094", ToolLoopError, "a person refused the pending tool call"),
    Code("BEM-095", ToolLoopError, "a lifecycle hook raised an exception that is not a BeamError"),
    Code("BEM-096", ToolLoopError, "the model client raised an exception that is not a BeamError"),
    Code("BEM-097", ToolLoopError, "saved run state is not JSON or does not match the schema"),
    Code("BEM-098", ToolLoopError, "the run has ended or waits for a decision; it cannot run on"),
    Code("BEM-099", ToolLoopError, "a tool call was not run: over the per-reply cap"),
    Code("BEM-100", ToolError, "tool failed while running"),
    Code("BEM-101", ToolError, "tool result is not JSON"),
    Code("BEM-102", ToolError, "remember note is empty or too long"),
    Code("BEM-110", SkillError, "unknown skill name"),
    Code("BEM-111", SkillError, "skill file is malformed"),
    Code("BEM-112", SkillError, "skill prompt failed to render"),
    Code("BEM-300", JailError, "path is empty, contains NUL, or is too long"),
    Code("BEM-301", JailError, "path is absolute"),
    Code("BEM-302", JailError, "path contains a '..' component"),
    Code("BEM-303", JailError, "path resolves outside the root (symlink or hard link)"),
    Code("BEM-304", JailError, "path is inside repository metadata (.git)"),
    Code("BEM-305", JailError, "not a regular file, or over the size cap"),
    Code("BEM-320", GitError, "git operation failed"),
    Code("BEM-321", GitError, "nothing is staged to commit"),
    Code("BEM-322", GitError, "the working tree has no origin remote"),
    Code("BEM-323", GitError, "HEAD is detached or unborn"),
    Code("BEM-324", GitError, "branch name is not a valid plain-ASCII git branch name"),
    Code("BEM-325", GitError, "push target looks like a refspec or an option"),
    Code("BEM-326", GitError, "branch does not exist, or already exists"),
    Code("BEM-327", GitError, "push was rejected by the remote (not a fast-forward)"),
    Code(
        "BEM-328",
        GitError,
        "push (or checkout) of a protected ref, or of a branch a job may not work on",
    ),
    Code("BEM-329", GitError, "working tree is not a repository, or has no commits"),
    Code("BEM-330", GitError, "a branch is a symbolic ref, or HEAD names no branch"),
    Code("BEM-331", GitError, "commit message contains a NUL character"),
    Code("BEM-332", GitError, "text is not valid Unicode (a lone surrogate)"),
    Code("BEM-333", GitError, "directory nested too deep for git to look into"),
    Code("BEM-340", WorkspaceError, "fetching the upstream into the mirror failed"),
    Code("BEM-341", WorkspaceError, "branch or commit not found upstream, or no shared history"),
    Code("BEM-342", WorkspaceError, "preparing the job's workspace failed"),
    Code("BEM-343", WorkspaceError, "the repository's credentials are not available"),
    Code("BEM-344", WorkspaceError, "the SSH upstream's host key is not pinned in known_hosts"),
    Code("BEM-345", WorkspaceError, "the SSH upstream's host key changed (or is revoked)"),
    Code("BEM-346", WorkspaceError, "the known_hosts file cannot be read or written"),
    Code("BEM-347", WorkspaceError, "the SSH upstream's host key cannot be checked"),
    Code("BEM-348", WorkspaceError, "`repos trust` cannot pin the upstream's host key"),
    Code("BEM-349", WorkspaceError, "the upstream is damaged: an object it needs is missing"),
    Code("BEM-350", RelayError, "the approved commit is not in the job's outbox"),
    Code("BEM-351", RelayError, "the upstream branch moved since approval (not a fast-forward)"),
    Code("BEM-352", RelayError, "the outbox branch does not point at the approved commit"),
    Code("BEM-353", RelayError, "pushing to the upstream failed"),
    Code("BEM-354", RelayError, "the relay refused the upstream's SSH host key; nothing pushed"),
    Code("BEM-360", RelayError, "the review does not approve this commit"),
    Code("BEM-361", RelayError, "the publish ref is not configured or is protected"),
    Code("BEM-362", RelayError, "the docs-build webhook failed"),
    Code("BEM-363", RelayError, "the reviewed commit is no longer upstream"),
    Code("BEM-370", JobError, "the parked-push webhook failed"),
    Code("BEM-400", ContainerError, "the Docker engine is unreachable"),
    Code("BEM-401", ContainerError, "the sandbox image is missing or stale"),
    Code("BEM-402", ContainerError, "the sandbox container failed to start or become ready"),
    Code("BEM-403", ContainerError, "a tool call timed out in the sandbox"),
    Code("BEM-404", ContainerError, "the tool server exited or its container died"),
    Code("BEM-405", ContainerError, "the sandbox container hit its memory limit and was killed"),
    Code("BEM-406", ContainerError, "a tool server message is over the size cap"),
    Code("BEM-407", ContainerError, "the tool server broke the protocol"),
    Code("BEM-408", ContainerError, "building the sandbox image failed"),
    Code("BEM-409", ContainerError, "building the service or Redis image failed"),
    Code("BEM-410", ContainerError, "no worker on this host answered a health-check ping"),
    Code("BEM-411", ContainerError, "the configured container runtime is not registered"),
    Code("BEM-412", ContainerError, "the docs checks could not run in the sandbox"),
    Code("BEM-500", JobError, "no job with this id"),
    Code("BEM-501", JobError, "the job request is invalid"),
    Code("BEM-502", JobError, "the job's saved state is missing or cannot resume"),
    Code("BEM-503", JobError, "the parked workspace is over the snapshot size cap"),
    Code("BEM-504", JobError, "the job store (Redis) is unreachable"),
    Code("BEM-505", JobError, "the job ran past its time limit"),
    Code("BEM-506", JobError, "the job was cancelled"),
    Code("BEM-507", JobError, "the job's worker was lost and the job could not be taken over"),
    Code("BEM-508", JobError, "no model is configured for the workers"),
    Code("BEM-509", JobError, "the worker failed unexpectedly while running the job"),
    Code("BEM-510", JobError, "a service of the local stack failed to start"),
    Code("BEM-511", JobError, "posting a scheduled run's summaries to its webhook failed"),
    Code("BEM-512", JobError, "the job's push is under way upstream and cannot be cancelled"),
    Code("BEM-516", JobError, "a stored job document cannot be read"),
    Code("BEM-517", JobError, "a stored event cannot be read"),
    Code("BEM-520", JobError, "the run ended on a tool error it did not recover from"),
    Code("BEM-521", JobError, "the review job delivered no verdict"),
    Code("BEM-522", JobError, "the summarize job produced no summary"),
    Code("BEM-523", JobError, "the commit-notes job produced no commit message"),
    Code("BEM-524", JobError, "the author job left changes it did not push"),
    Code("BEM-525", JobError, "the publish job published nothing"),
    Code("BEM-526", JobError, "the author job changed nothing and did not say why"),
    Code("BEM-535", JobError, "no worker serves a job queue"),
    Code("BEM-600", ApprovalError, "the job has no approval waiting"),
    Code("BEM-601", ApprovalError, "the approval has already been decided"),
    Code("BEM-602", ApprovalError, "a requester cannot approve their own job here"),
    Code("BEM-603", ApprovalError, "the parked call no longer matches what was approved"),
    Code("BEM-604", ApprovalError, "the decision names another approval than the one waiting"),
    Code("BEM-605", ApprovalError, "an approve must name the approval, commit and diff digest"),
    Code("BEM-606", ApprovalError, "a new docs-check failure blocks the approve"),
    Code("BEM-700", AccessError, "no bearer token, or a malformed one"),
    Code("BEM-701", AccessError, "the token is not recognised"),
    Code("BEM-702", AccessError, "the token's role does not allow this"),
    Code("BEM-703", AccessError, "the repository is outside the token's scope"),
    Code("BEM-704", AccessError, "the form's CSRF token is missing or wrong"),
    Code("BEM-705", AccessError, "the request does not match the API schema"),
    Code("BEM-706", AccessError, "no such endpoint or page"),
    Code("BEM-707", AccessError, "the endpoint does not allow this HTTP method"),
    Code("BEM-708", AccessError, "the sign-in session expired or was signed out"),
    Code("BEM-709", AccessError, "the server failed unexpectedly while answering"),
    Code("BEM-710", AccessError, "a JSON document is nested too deep or too large"),
    Code("BEM-711", AccessError, "the request body is over the size limit"),
    Code("BEM-712", AccessError, "too many failed sign-ins or tokens from this client"),
    Code("BEM-713", AccessError, "the client's address holds the most connections allowed"),
    Code("BEM-714", AccessError, "the request's headers did not arrive in time"),
    Code("BEM-720", AccessError, "riverbeam mcp got no answer the API would give"),
    Code("BEM-721", ToolboxError, "an MCP server of the job did not start"),
    Code("BEM-722", ToolboxError, "an MCP server stopped answering during a call"),
    Code("BEM-723", ToolboxError, "an MCP tool call ran past its time limit"),
    Code("BEM-724", ToolboxError, "an MCP tool answered the call with an error"),
    Code("BEM-725", ToolboxError, "a skill names an MCP tool that is not configured"),
    Code("BEM-726", ToolboxError, "an MCP server does not offer a configured tool"),
    Code("BEM-740", AccessError, "/mcp does not answer to the request's Host name"),
    Code("BEM-741", AccessError, "/mcp does not answer requests from the page's Origin"),
    Code("BEM-800", ForgeInboundError, "the webhook's signature or token is missing or wrong"),
    Code("BEM-801", ForgeInboundError, "no forge is configured under this name"),
    Code("BEM-802", ForgeInboundError, "the webhook's installation or project is not configured"),
    Code("BEM-803", ForgeInboundError, "the forge's webhook secret file cannot be read"),
    Code("BEM-804", ForgeInboundError, "the webhook body is not the JSON event its headers name"),
    Code("BEM-805", ForgeInboundError, "the webhook has no delivery id"),
    Code("BEM-806", ForgeInboundError, "too many webhook deliveries for this forge"),
    Code("BEM-807", ForgeInboundError, "the commenter's forge permission is below the command's"),
    Code("BEM-808", ForgeInboundError, "a pull request from a fork gets a review, nothing else"),
    Code("BEM-809", ForgeInboundError, "the comment is not a command Riverbeam knows"),
    Code("BEM-810", ForgeInboundError, "the workers cannot ask this forge (no forge client)"),
    Code("BEM-820", ForgeRetryLater, "the forge could not be reached or did not answer in time"),
    Code("BEM-821", ForgeRetryLater, "the forge failed with a server error (5xx)"),
    Code("BEM-822", ForgeRetryLater, "the forge is rate limiting the calls (429)"),
    Code("BEM-823", ForgeRefused, "the forge refused the call (4xx)"),
    Code("BEM-824", ForgeCredentialsError, "the forge's key or token file cannot be read"),
    Code("BEM-825", ForgeRetryLater, "GitHub's secondary rate limit stopped the call"),
    Code("BEM-826", ForgeRetryLater, "GitHub's rate limit is used up until its reset"),
    Code("BEM-827", ForgeRefused, "GitHub refused the App's JWT or the token (401)"),
    Code("BEM-828", ForgeRefused, "the GitHub App is not installed on the repository"),
    Code("BEM-829", ForgeRefused, "GitHub's reply is not what its API description says"),
    Code("BEM-830", ForgeRefused, "GitLab refused the access token (401)"),
    Code("BEM-831", ForgeRetryLater, "GitLab is rate limiting the calls (429)"),
    Code("BEM-832", ForgeRefused, "GitLab's reply is not what its API documentation says"),
    Code("BEM-833", ForgeRetryLater, "GitLab has not worked out the merge request's diff yet"),
    Code("BEM-834", ForgeRefused, "the merge request moved past the reviewed commit"),
    Code("BEM-900", ConfigError, "configuration is missing or invalid"),
    Code("BEM-906", ConfigError, "a service cannot listen on its address"),
]

CODES: dict[str, Code] = {entry.code: entry for entry in _TABLE}
