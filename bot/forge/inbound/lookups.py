"""What the workers ask a forge while they turn an event into work. The forge clients
implement ``ForgeLookup``; ``[forges.<name>] client_factory`` names the function that makes
one for a forge (the tests' fake forge, until the built-in clients)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bot.forge.inbound.forge_events import PullRequest, ReviewThread, ThreadComment, ThreadKind
from bot.forge.permissions import ForgePermission


class ForgeLookup(Protocol):
    """What the workers ask a forge while they turn an event into work: each call may go to
    the forge (never inside a webhook request). ``repository`` is the forge's path
    (``owner/name``, a GitLab project path); ``number`` an issue's or pull request's
    number (GitLab: its ``iid``). ``on`` says which of the two ``number`` is: GitLab numbers
    issues and merge requests apart, GitHub's pull requests are issues too."""

    def permission(self, repository: str, login: str) -> ForgePermission: ...

    def pull_request(self, repository: str, number: int) -> PullRequest: ...

    def changed_paths(self, repository: str, number: int) -> Sequence[str]: ...

    def thread(
        self, repository: str, number: int, on: ThreadKind = "issue"
    ) -> Sequence[ThreadComment]: ...

    def review_threads(self, repository: str, number: int) -> Sequence[ReviewThread]:
        """The open review threads of pull request ``number`` (line comments and their
        replies), each as its first comment."""
        ...
