"""Tokens and roles, without a server: who a token is, and what each role may do."""

from __future__ import annotations

from typing import cast, get_args

import pytest

from bot.config import ApiSettings, Role, TokenConfig
from bot.core.errors import AccessError, BeamError
from bot.service.access import SUBMITS, Principal, TokenRegistry, new_token, token_digest
from bot.store.models import JobKind, JobRecord, JobSpec


def _entry(name: str, role: Role, token: str, repos: tuple[str, ...] | None = None) -> TokenConfig:
    return TokenConfig.model_validate(
        {"name": name, "role": role, "sha256": token_digest(token), "repos": repos}
    )


def test_a_token_maps_to_its_holder_role_and_scope() -> None:
    alice, bob = new_token(), new_token()
    registry = TokenRegistry(
        [_entry("alice", "reviewer", alice), _entry("bob", "ci", bob, ("docs",))]
    )
    assert registry.authenticate(alice) == Principal("alice", "reviewer", None)
    assert registry.authenticate(bob) == Principal("bob", "ci", frozenset({"docs"}))


@pytest.mark.parametrize(
    ("token", "code"),
    [("", "BEM-700"), ("x" * 201, "BEM-700"), ("rb_é", "BEM-700"), ("rb_unknown", "BEM-701")],
)
def test_a_bad_token_is_refused_with_its_code(token: str, code: str) -> None:
    registry = TokenRegistry([_entry("alice", "admin", new_token())])
    with pytest.raises(AccessError) as caught:
        registry.authenticate(token)
    assert caught.value.code == code


def test_tokens_are_fresh_and_only_their_digest_is_configured() -> None:
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50 and all(token.startswith("rb_") for token in tokens)
    token = tokens.pop()
    assert token not in _entry("a", "admin", token).model_dump_json()


def test_two_entries_with_one_digest_are_a_configuration_error() -> None:
    token = new_token()
    with pytest.raises(ValueError, match="same sha256"):
        ApiSettings(tokens=(_entry("a", "admin", token), _entry("b", "ci", token)))


@pytest.mark.parametrize("role", get_args(Role))
def test_each_role_submits_exactly_its_kinds(role: Role) -> None:
    who = Principal("p", role, None)
    for kind in JobKind:
        if kind in SUBMITS[role]:
            who.check_submit(kind, "docs")
        else:
            with pytest.raises(BeamError, match="BEM-702"):
                who.check_submit(kind, "docs")
    assert who.submittable() == [kind for kind in JobKind if kind in SUBMITS[role]]


def test_publishing_and_deciding_need_a_reviewer_or_an_admin() -> None:
    assert JobKind.PUBLISH not in SUBMITS["submitter"] | SUBMITS["ci"]
    for role in ("submitter", "ci"):
        with pytest.raises(BeamError, match="BEM-702"):
            Principal("p", cast(Role, role), None).check_decide("docs")
    Principal("r", "reviewer", None).check_decide("docs")
    Principal("a", "admin", None).check_decide("docs")


def test_a_scoped_token_reaches_only_its_repositories() -> None:
    who = Principal("s", "admin", frozenset({"docs"}))
    who.check_repo("docs")
    for check in (
        lambda: who.check_repo("handbook"),
        lambda: who.check_submit(JobKind.AUTHOR, "handbook"),
        lambda: who.check_decide("handbook"),
    ):
        with pytest.raises(BeamError, match="BEM-703"):
            check()


def test_only_the_requester_or_an_admin_cancels_a_job() -> None:
    record = JobRecord(
        id="j1", spec=JobSpec(kind=JobKind.AUTHOR, repo="docs", request="x", requested_by="w")
    )
    Principal("w", "submitter", None).check_cancel(record)
    Principal("root", "admin", None).check_cancel(record)
    with pytest.raises(BeamError, match="BEM-702"):
        Principal("r", "reviewer", None).check_cancel(record)
