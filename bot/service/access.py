"""Who is asking, and what they may do.

A bearer token maps to a ``Principal``: a name (recorded on the jobs it submits and the
decisions it makes), a role, and optionally the repositories it is limited to. Tokens are
stored as SHA-256 digests and compared in constant time, every entry every time, so the
answer's timing says nothing about which digest came closest.

Roles:

==========  ==================================================  ================
role        may submit                                          decides approvals
==========  ==================================================  ================
submitter   author, review, summarize, commit-notes             no
ci          review, summarize, commit-notes                     no
reviewer    every kind                                          yes
admin       every kind; cancels anyone's job                    yes
==========  ==================================================  ================

Everyone can read the jobs and approvals of the repositories in their scope.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from bot.config import Role, TokenConfig
from bot.core.errors import BeamError
from bot.store.models import JobKind, JobRecord

TOKEN_PREFIX = "rb_"
MAX_TOKEN_CHARS = 200

SUBMITS: dict[Role, frozenset[JobKind]] = {
    "submitter": frozenset(JobKind) - {JobKind.PUBLISH},
    "ci": frozenset({JobKind.REVIEW, JobKind.SUMMARIZE, JobKind.COMMIT_NOTES}),
    "reviewer": frozenset(JobKind),
    "admin": frozenset(JobKind),
}
DECIDES: frozenset[Role] = frozenset({"reviewer", "admin"})


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Principal:
    name: str
    role: Role
    repos: frozenset[str] | None

    @classmethod
    def operator(cls, name: str) -> Principal:
        """Someone who reaches the store without a token (the CLI, the scheduler of a
        worker): an admin on every repository, as anyone with the store's Redis is."""
        return cls(name=name, role="admin", repos=None)

    def sees(self, repo: str) -> bool:
        return self.repos is None or repo in self.repos

    def check_repo(self, repo: str) -> None:
        if not self.sees(repo):
            raise BeamError("BEM-703", f"{self.name}'s token may not use repository {repo!r}")

    def check_submit(self, kind: JobKind, repo: str) -> None:
        self.check_repo(repo)
        if kind not in SUBMITS[self.role]:
            allowed = ", ".join(sorted(kind.value for kind in SUBMITS[self.role]))
            raise BeamError(
                "BEM-702",
                f"the {self.role} role may not submit {kind.value} jobs (it may submit: {allowed})",
            )

    def check_decide(self, repo: str) -> None:
        self.check_repo(repo)
        if self.role not in DECIDES:
            raise BeamError(
                "BEM-702",
                f"the {self.role} role may not decide approvals; a reviewer or admin must",
            )

    def check_cancel(self, record: JobRecord) -> None:
        self.check_repo(record.spec.repo)
        if self.role != "admin" and record.spec.requested_by != self.name:
            raise BeamError(
                "BEM-702", f"only {record.spec.requested_by} or an admin may cancel this job"
            )

    @property
    def may_decide(self) -> bool:
        return self.role in DECIDES

    def submittable(self) -> list[JobKind]:
        return [kind for kind in JobKind if kind in SUBMITS[self.role]]


class TokenRegistry:
    """The configured tokens, looked up by digest in constant time."""

    def __init__(self, tokens: Iterable[TokenConfig]) -> None:
        self._tokens = tuple(tokens)

    def replace(self, tokens: Iterable[TokenConfig]) -> None:
        """Take ``tokens`` instead; requests under way see the old set or the new, whole."""
        self._tokens = tuple(tokens)

    def authenticate(self, token: str) -> Principal:
        if not token or len(token) > MAX_TOKEN_CHARS or not token.isascii():
            raise BeamError("BEM-700", "the bearer token is empty, too long or not ASCII")
        return self.for_digest(token_digest(token))

    def for_digest(self, digest: str) -> Principal:
        """The holder of the token with this SHA-256. A web session keeps the digest, never
        the token, so removing the token from the config ends its sessions (BEM-701)."""
        found: TokenConfig | None = None
        for entry in self._tokens:
            if hmac.compare_digest(digest.encode(), entry.sha256.encode()):
                found = entry
        if found is None:
            raise BeamError("BEM-701", "this token is not recognised; ask an admin for one")
        repos = None if found.repos is None else frozenset(found.repos)
        return Principal(name=found.name, role=found.role, repos=repos)
