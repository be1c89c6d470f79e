"""The branch-name rules and the protected-ref policy, as pure decisions."""

from __future__ import annotations

import pytest

from bot.core.errors import BeamError, ConfigError, GitError
from sandbox.inside.refs import MAX_BRANCH_BYTES, ProtectedRefs, branch_name, full_ref

POLICY = ProtectedRefs(["main", "master", "release/*"])

VALID = [
    ("feature", "feature"),
    ("docs/fix-install", "docs/fix-install"),
    ("riverbeam/job-0123", "riverbeam/job-0123"),
    ("refs/heads/docs/fix", "docs/fix"),
    ("a.b_c-d", "a.b_c-d"),
    ("release", "release"),
    ("mainline", "mainline"),
    ("main-fix", "main-fix"),
    ("user@host", "user@host"),
    ("x" * MAX_BRANCH_BYTES, "x" * MAX_BRANCH_BYTES),
]


@pytest.mark.parametrize(("given", "expected"), VALID)
def test_valid_names_are_accepted_and_normalised(given: str, expected: str) -> None:
    assert POLICY.check_branch(given) == expected
    assert full_ref(expected) == "refs/heads/" + expected


REFSPEC_OR_OPTION = [
    ("+feature", "'+'"),
    ("-f", "'-'"),
    ("--force", "'-'"),
    ("--all", "'-'"),
    ("--mirror", "'-'"),
    ("--tags", "'-'"),
    ("--delete", "'-'"),
    ("a:b", "':'"),
    (":feature", "':'"),
    ("HEAD:feature", "':'"),
    ("refs/heads/*:refs/heads/*", "':'"),
    ("feature*", "'*'"),
    ("feature~1", "'^' and '~'"),
    ("feature^", "'^' and '~'"),
    ("feature^{tree}", "'^' and '~'"),
    ("@{-1}", "'@{'"),
    ("feature@{upstream}", "'@{'"),
    ("@", "'@'"),
    ("HEAD", "symbolic ref"),
    ("head", "symbolic ref"),
    ("FETCH_HEAD", "symbolic ref"),
    ("ORIG_HEAD", "symbolic ref"),
    ("refs/heads/HEAD", "symbolic ref"),
    ("refs/heads/-f", "'-'"),
    ("refs/heads/+x", "'+'"),
    ("refs/tags/v1", "refs/heads/"),
    ("refs/remotes/origin/feature", "refs/heads/"),
    ("refs/notes/commits", "refs/heads/"),
    ("Refs/Heads/feature", "refs/heads/"),
    ("REFS/HEADS/feature", "refs/heads/"),
    ("refs/heads/refs/tags/v1", "inside refs/heads/"),
    ("refs/heads/refs/heads/main", "inside refs/heads/"),
    ("refs/heads/Refs/x", "inside refs/heads/"),
]


@pytest.mark.parametrize(("given", "reason"), REFSPEC_OR_OPTION)
def test_refspec_and_option_syntax_is_bem_325_naming_the_reason(given: str, reason: str) -> None:
    with pytest.raises(GitError) as caught:
        POLICY.check_branch(given)
    assert caught.value.code == "BEM-325"
    assert repr(given) in caught.value.message
    assert reason in caught.value.message


INVALID = [
    ("", "empty"),
    ("refs/heads/", "nothing follows"),
    ("a..b", "'..'"),
    ("refs/heads/../heads/main", "'..'"),
    ("a//b", "'//'"),
    ("/a", "starts with '/'"),
    ("a/", "ends with '/'"),
    ("a.", "ends with '.'"),
    (".hidden", "starts with '.'"),
    ("docs/.hidden", "starts with '.'"),
    ("a.lock", "'.lock'"),
    ("a.LOCK", "'.lock'"),
    ("docs.lock/a", "'.lock'"),
    ("a b", "a space"),
    (" a", "a space"),
    ("a\tb", "U+0009"),
    ("x\nmain", "U+000A"),
    ("a\x00b", "U+0000"),
    ("a\x7fb", "U+007F"),
    ("a?b", "'?'"),
    ("a[b", "'['"),
    ("a\\b", "'\\\\'"),
    ("ma\u200bin", "ZERO WIDTH SPACE"),
    ("m\u0430in", "CYRILLIC SMALL LETTER A"),
    ("\uff4d\uff41\uff49\uff4e", "FULLWIDTH"),
    ("caf\u00e9", "LATIN SMALL LETTER E WITH ACUTE"),
    ("x" * (MAX_BRANCH_BYTES + 1), "the limit is"),
]


@pytest.mark.parametrize(("given", "reason"), INVALID)
def test_invalid_names_are_bem_324_saying_why(given: str, reason: str) -> None:
    with pytest.raises(GitError) as caught:
        POLICY.check_branch(given)
    assert caught.value.code == "BEM-324"
    assert reason in caught.value.message


PROTECTED = [
    "main",
    "MAIN",
    "Main",
    "mAiN",
    "refs/heads/main",
    "refs/heads/Main",
    "master",
    "Master",
    "release/1.0",
    "Release/1.0",
    "RELEASE/2",
    "release/1.0/hotfix",
    "refs/heads/release/x/y/z",
]


@pytest.mark.parametrize("given", PROTECTED)
def test_protected_refs_are_bem_328_whatever_the_case_or_depth(given: str) -> None:
    with pytest.raises(GitError) as caught:
        POLICY.check_branch(given)
    assert caught.value.code == "BEM-328"
    assert "protected" in caught.value.message


def test_a_huge_name_is_quoted_briefly() -> None:
    with pytest.raises(BeamError) as caught:
        POLICY.check_branch("+" + "a" * 100_000)
    assert len(caught.value.message) < 400


def test_branch_name_checks_format_but_not_protection() -> None:
    assert branch_name("main") == "main"
    assert branch_name("refs/heads/release/1.0") == "release/1.0"


def test_patterns_are_normalised_to_case_folded_full_refs() -> None:
    policy = ProtectedRefs(["Main", " release/* ", "refs/heads/prod", "refs/tags/*"])
    assert policy.patterns == (
        "refs/heads/main",
        "refs/heads/release/*",
        "refs/heads/prod",
        "refs/tags/*",
    )
    assert policy.is_protected("refs/tags/v1")
    assert policy.is_protected("PROD")
    assert not policy.is_protected("production")
    assert "refs/heads/main" in repr(policy)


def test_a_glob_covers_every_level_below_it_but_not_its_own_prefix() -> None:
    policy = ProtectedRefs(["release/*"])
    assert policy.matching_pattern("release/1") == "refs/heads/release/*"
    assert policy.is_protected("release/1/2/3")
    assert not policy.is_protected("release")
    assert not policy.is_protected("releases/1")
    assert not policy.is_protected("pre-release/1")


def test_a_star_inside_a_pattern_matches_across_levels() -> None:
    policy = ProtectedRefs(["hotfix-*"])
    assert policy.is_protected("hotfix-1")
    assert policy.is_protected("hotfix-1/a")
    assert not policy.is_protected("a/hotfix-1")


def test_pattern_metacharacters_other_than_star_are_literal() -> None:
    policy = ProtectedRefs(["v1.0"])
    assert policy.is_protected("v1.0")
    assert not policy.is_protected("v1x0")


def test_no_patterns_protect_nothing() -> None:
    assert ProtectedRefs([]).check_branch("main") == "main"


@pytest.mark.parametrize("pattern", ["", "   ", "ma in", "m\u0430in", "x\ny"])
def test_an_unusable_pattern_is_a_configuration_error(pattern: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ProtectedRefs(["main", pattern])
    assert caught.value.code == "BEM-900"
