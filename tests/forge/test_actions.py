"""From an event and the configuration to the intended actions (``actions_for``), with the
forge's answers scripted (``FakeLookup``). The events come from GitHub's published examples
and GitLab's documented payloads through the normalizers, as the door makes them."""

from __future__ import annotations

import pytest

from bot.config import ForgeConfig
from bot.forge.inbound import github, gitlab
from bot.forge.inbound.actions import (
    Action,
    DecideApproval,
    Nothing,
    Refused,
    SubmitJob,
    actions_for,
)
from bot.forge.inbound.forge_events import (
    CommentCreated,
    ForgeEvent,
    Ignored,
    PullRequest,
    PullRequestChanged,
    ReviewThread,
    ThreadComment,
)
from bot.forge.permissions import ForgePermission
from bot.store.models import JobKind
from harness.forges import FakeLookup, check_github, github_example
from tests.forge.kit import (
    GITHUB_REPO,
    github_config,
    gitlab_config,
    gitlab_payload,
)

PREFIX = "riverbeam/"
WRITER = FakeLookup(permissions={"Codertocat": ForgePermission.WRITE})


def _comment(body: str, *, index: int = 1) -> CommentCreated:
    payload = github_example("issue_comment", "created", index)
    payload["comment"]["body"] = body
    event = github.normalize(
        "issue_comment", payload, forge="gh", delivery="d-7", config=github_config()
    )
    assert isinstance(event, CommentCreated)
    return event


def _pull(*, fork: bool = False, draft: bool = False, action: str = "opened") -> ForgeEvent:
    payload = github_example("pull_request", action, 1)
    if fork:
        payload["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    payload["pull_request"]["draft"] = draft
    config = github_config(installations=[1])
    event = github.normalize("pull_request", payload, forge="gh", delivery="d-8", config=config)
    assert isinstance(event, PullRequestChanged)
    return event


def _one(
    event: ForgeEvent | Ignored,
    lookup: FakeLookup | None = WRITER,
    config: ForgeConfig | None = None,
) -> Action:
    assert not isinstance(event, Ignored), event
    actions = actions_for(event, config or github_config(), lookup, branch_prefix=PREFIX)
    assert len(actions) == 1, actions
    return actions[0]


def test_a_command_on_an_issue_submits_an_author_job_with_the_issue_and_its_thread() -> None:
    lookup = FakeLookup(
        permissions={"Codertocat": ForgePermission.WRITE},
        threads={1: [ThreadComment(author="octocat", body="The link on line 3 is broken too.")]},
    )
    event = _comment("@riverbeam fix the broken links on the install page")
    action = _one(event, lookup)
    assert isinstance(action, SubmitJob) and action.kind is JobKind.AUTHOR
    assert (action.repo, action.requester, action.role) == ("docs", "gh:Codertocat", "submitter")
    assert action.request.startswith("fix the broken links on the install page")
    assert event.thread.title in action.request and event.thread.url in action.request
    assert "@octocat: The link on line 3 is broken too." in action.request
    assert action.idempotency_key == "forge:gh:d-7:author"
    forge = action.metadata["forge"]
    assert isinstance(forge, dict) and forge["number"] == 1 and forge["thread"] == "issue"
    assert ("permission", GITHUB_REPO, "Codertocat") in lookup.asked


def test_a_commenter_below_the_minimum_starts_nothing_and_gets_one_short_reply() -> None:
    for permission in (ForgePermission.NONE, ForgePermission.READ, ForgePermission.TRIAGE):
        lookup = FakeLookup(permissions={"Codertocat": permission})
        action = _one(_comment("@riverbeam rewrite everything"), lookup)
        assert isinstance(action, Refused) and action.code == "BEM-807"
        assert action.reply is not None and "write" in action.reply and len(action.reply) < 200


def test_the_minimum_is_configurable_per_command() -> None:
    config = github_config(entry={"minimum": {"author": "triage"}})
    lookup = FakeLookup(permissions={"Codertocat": ForgePermission.TRIAGE})
    assert isinstance(_one(_comment("@riverbeam fix it"), lookup, config), SubmitJob)


def test_without_a_forge_client_nothing_that_needs_a_permission_starts() -> None:
    action = _one(_comment("@riverbeam fix it"), None)
    assert isinstance(action, Refused) and action.code == "BEM-810"


@pytest.mark.parametrize(
    "body", ["Thanks, looks good", "please ask @riverbeam later", "> @riverbeam fix it"]
)
def test_a_comment_without_a_command_starts_nothing(body: str) -> None:
    lookup = FakeLookup()
    assert isinstance(_one(_comment(body), lookup), Nothing)
    assert lookup.asked == [], "nobody's permission is asked for a plain comment"


@pytest.mark.parametrize(
    "body", ["@riverbeam", "/riverbeam merge it", "/riverbeam refuse a1", "/riverbeam approve"]
)
def test_an_unknown_command_is_bem_809(body: str) -> None:
    action = _one(_comment(body))
    assert isinstance(action, Refused) and action.code == "BEM-809" and action.reply


def test_approve_and_refuse_name_the_approval() -> None:
    maintainer = FakeLookup(permissions={"Codertocat": ForgePermission.MAINTAIN})
    approve = _one(_comment("/riverbeam approve ap-123"), maintainer)
    assert isinstance(approve, DecideApproval) and approve.approve
    assert (approve.approval_id, approve.decider, approve.repo) == (
        "ap-123",
        "gh:Codertocat",
        "docs",
    )
    assert approve.comment_url.startswith("https://github.com/")
    refuse = _one(_comment("/riverbeam refuse ap-123 the link target is wrong"), maintainer)
    assert isinstance(refuse, DecideApproval) and not refuse.approve
    assert refuse.reason == "the link target is wrong"
    # Deciding needs maintain by default: write is not enough.
    below = _one(_comment("/riverbeam approve ap-123"), WRITER)
    assert isinstance(below, Refused) and below.code == "BEM-807"


def test_the_configured_label_on_an_issue_submits_an_author_job() -> None:
    payload = github_example("issues", "labeled", 0)
    payload["label"]["name"] = "riverbeam"
    event = github.normalize("issues", payload, forge="gh", delivery="d", config=github_config())
    action = _one(event)
    assert isinstance(action, SubmitJob) and action.kind is JobKind.AUTHOR
    assert payload["issue"]["title"] in action.request
    other = github.normalize(
        "issues",
        github_example("issues", "labeled", 0),
        forge="gh",
        delivery="d",
        config=github_config(),
    )
    assert isinstance(_one(other), Nothing)


def test_a_pull_request_gets_a_review_of_its_head_and_commit_notes() -> None:
    event = _pull()
    assert isinstance(event, PullRequestChanged)
    actions = actions_for(event, github_config(installations=[1]), None, branch_prefix=PREFIX)
    review, notes = actions
    assert isinstance(review, SubmitJob) and review.kind is JobKind.REVIEW
    assert review.branch == event.pull.head_ref and review.role == "ci"
    forge = review.metadata["forge"]
    assert isinstance(forge, dict) and forge["head_sha"] == event.pull.head_sha
    assert isinstance(notes, SubmitJob) and notes.kind is JobKind.COMMIT_NOTES
    assert notes.range == f"{event.pull.base_ref}..{event.pull.head_ref}"


def test_a_fork_pull_request_gets_a_review_only() -> None:
    event = _pull(fork=True)
    assert isinstance(event, PullRequestChanged)
    review, notes = actions_for(
        event, github_config(installations=[1]), WRITER, branch_prefix=PREFIX
    )
    assert isinstance(review, SubmitJob) and review.kind is JobKind.REVIEW
    # The fork's branch is not upstream: the head is read through the forge's pull ref.
    assert review.branch == f"refs/pull/{event.pull.number}/head"
    assert isinstance(notes, Refused) and notes.code == "BEM-808"


def test_no_author_work_on_a_fork_pull_request() -> None:
    payload = gitlab_payload("note-merge-request")
    payload["merge_request"]["source_project_id"] = 99
    payload["object_attributes"]["note"] = "@riverbeam fix the typo in this branch"
    config = gitlab_config()
    event = gitlab.normalize("Note Hook", payload, forge="gl", delivery="d", config=config)
    lookup = FakeLookup(permissions={"root": ForgePermission.ADMIN})
    action = _one(event, lookup, config)
    assert isinstance(action, Refused) and action.code == "BEM-808"
    payload["object_attributes"]["note"] = "@riverbeam address the review"
    event = gitlab.normalize("Note Hook", payload, forge="gl", delivery="d", config=config)
    action = _one(event, lookup, config)
    assert isinstance(action, Refused) and action.code == "BEM-808"


def test_a_gitlab_fork_merge_request_is_reviewed_through_its_merge_request_ref() -> None:
    payload = gitlab_payload("merge-request")
    payload["object_attributes"]["source_project_id"] = 99
    config = gitlab_config()
    event = gitlab.normalize("Merge Request Hook", payload, forge="gl", delivery="d", config=config)
    action = _one(event, None, config)
    assert isinstance(action, SubmitJob) and action.branch == "refs/merge-requests/1/head"


def test_a_draft_is_reviewed_once_it_is_ready() -> None:
    assert isinstance(
        actions_for(
            _pull(draft=True), github_config(installations=[1]), None, branch_prefix=PREFIX
        )[0],
        Nothing,
    )


def test_review_paths_filter_on_the_changed_paths() -> None:
    config = github_config(
        installations=[1], entry={"review_paths": ["docs/**"], "commit_notes": False}
    )
    event = _pull()
    assert isinstance(event, PullRequestChanged)
    number = event.pull.number
    elsewhere = FakeLookup(paths={number: ["src/main.py"]})
    assert isinstance(_one(event, elsewhere, config), Nothing)
    in_docs = FakeLookup(paths={number: ["src/main.py", "docs/install.md"]})
    assert isinstance(_one(event, in_docs, config), SubmitJob)


def _address(head_ref: str) -> tuple[CommentCreated, FakeLookup]:
    payload = gitlab_payload("note-merge-request")
    payload["merge_request"]["source_branch"] = head_ref
    payload["object_attributes"]["note"] = "@riverbeam address the review"
    config = gitlab_config()
    event = gitlab.normalize("Note Hook", payload, forge="gl", delivery="d", config=config)
    assert isinstance(event, CommentCreated)
    lookup = FakeLookup(
        permissions={"root": ForgePermission.WRITE},
        threads={1: [ThreadComment(author="user1", body="Say 'sign in', not 'login'.")]},
        reviews={1: [ReviewThread(id="6a9c1750", author="user2", body="Passive.", path="a.md")]},
    )
    return event, lookup


def test_address_the_review_on_a_riverbeam_pull_request_works_on_its_branch() -> None:
    event, lookup = _address("riverbeam/job-1")
    action = _one(event, lookup, gitlab_config())
    assert isinstance(action, SubmitJob) and action.kind is JobKind.AUTHOR
    # On the pull request's own branch, from its head: its push moves the pull request.
    assert (action.branch, action.base) == ("riverbeam/job-1", None)
    assert "Say 'sign in', not 'login'." in action.request
    assert "@user2 on a.md: Passive." in action.request
    forge = action.metadata["forge"]
    assert isinstance(forge, dict) and forge["threads"] == ["6a9c1750"]
    assert isinstance(forge, dict) and forge["head_sha"] == event.pull.head_sha  # type: ignore[union-attr]


def test_address_the_review_is_only_for_riverbeams_pull_requests() -> None:
    event, lookup = _address("feature/x")
    action = _one(event, lookup, gitlab_config())
    assert isinstance(action, Refused) and action.code == "BEM-809"


def _pull_request(number: int, head_ref: str, *, fork: bool) -> PullRequest:
    """What the forge says of a pull request (``ForgeLookup.pull_request``)."""
    return PullRequest(
        number=number,
        title="Fix the install page",
        url=f"https://github.com/{GITHUB_REPO}/pull/{number}",
        author="mallory" if fork else "Codertocat",
        head_sha="e" * 40,
        head_ref=head_ref,
        base_ref="main",
        from_fork=fork,
    )


def test_address_the_review_asks_the_forge_for_the_pull_request_when_the_event_lacks_it() -> None:
    event = _comment("@riverbeam address the review", index=1)
    pulled = event.model_copy(
        update={"thread": event.thread.model_copy(update={"kind": "pull_request"})}
    )
    head = _pull_request(1, "riverbeam/job-2", fork=False)
    lookup = FakeLookup(permissions={"Codertocat": ForgePermission.WRITE}, pulls={1: head})
    action = _one(pulled, lookup)
    assert isinstance(action, SubmitJob) and action.branch == "riverbeam/job-2"
    assert ("pull_request", GITHUB_REPO, 1) in lookup.asked


def test_no_author_work_from_a_github_conversation_comment_on_a_fork_pull_request() -> None:
    # GitHub's issue_comment on a pull request marks its issue as one, and says no more.
    payload = github_example("issue_comment", "created", 1)
    payload["comment"]["body"] = "@riverbeam fix the typo in this branch"
    number = payload["issue"]["number"]
    payload["issue"]["pull_request"] = {
        "url": f"https://api.github.com/repos/{GITHUB_REPO}/pulls/{number}",
        "html_url": f"https://github.com/{GITHUB_REPO}/pull/{number}",
        "diff_url": f"https://github.com/{GITHUB_REPO}/pull/{number}.diff",
        "patch_url": f"https://github.com/{GITHUB_REPO}/pull/{number}.patch",
        "merged_at": None,
    }
    check_github("issue_comment", "created", payload)
    event = github.normalize(
        "issue_comment", payload, forge="gh", delivery="d", config=github_config()
    )
    assert isinstance(event, CommentCreated) and event.thread.kind == "pull_request"
    assert event.pull is None
    fork = _pull_request(number, "patch-1", fork=True)
    lookup = FakeLookup(permissions={"Codertocat": ForgePermission.ADMIN}, pulls={number: fork})
    action = _one(event, lookup)
    assert isinstance(action, Refused) and action.code == "BEM-808"
    # The same comment on a pull request from a branch of the repository: author work.
    same = fork.model_copy(update={"from_fork": False})
    allowed = _one(event, FakeLookup(permissions=lookup.permissions, pulls={number: same}))
    assert isinstance(allowed, SubmitJob) and allowed.kind is JobKind.AUTHOR
    # Without a forge client, where the pull request comes from cannot be known: nothing.
    unknown = _one(event, None)
    assert isinstance(unknown, Refused) and unknown.code == "BEM-810"
