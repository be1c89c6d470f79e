"""Properties of the ref policy over generated names, checked against independent oracles:
a plain reading of the protected set, git's own ``check-ref-format``, and a real upstream
after every push the policy lets through."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.errors import BeamError
from sandbox.inside.refs import ProtectedRefs, branch_name
from tests.sandbox.git_kit import GitEnv, build_git_env, refs_of

POLICY = ProtectedRefs(["main", "master", "release/*"])
REFUSALS = {"BEM-324", "BEM-325", "BEM-328"}

# Pieces that make near-misses likely: case variants of protected names, separators,
# refspec and revision syntax, confusables and invisible characters.
PIECES = [
    "main", "MAIN", "Main", "mAin", "master", "MASTER", "release", "Release", "RELEASE",
    "/", "/", "//", ":", "+", "-", "--", "*", ".", "..", ".lock", "@", "@{", "{", "}", "^",
    "~", "?", "[", "\\", " ", "\t", "\n", "\x00", "\x7f", "a", "b", "x1", "0", "_",
    "HEAD", "FETCH_HEAD", "refs/", "refs/heads/", "refs/tags/", "heads/",
    "\u200b", "\u00e9", "\u0430", "\uff4d", "\u0301", "\ufeff",
]  # fmt: skip
names = st.one_of(
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join),
    st.text(max_size=12),
)
# Mostly-valid names, so that many examples get as far as a real push.
PLAUSIBLE = [
    "main", "MAIN", "Main", "master", "Master", "release", "Release", "feature", "docs",
    "a", "b1", "x", "/", "/", "-", "_", ".", "@", "+", "main.", "lock",
]  # fmt: skip
plausible = st.lists(st.sampled_from(PLAUSIBLE), min_size=1, max_size=5).map("".join)


def protected_by_reading(name: str) -> bool:
    """The protected set as a person reads it: main, master, release/ and below, any case."""
    low = name.lower()
    return low in ("main", "master") or low.startswith("release/")


def decision(candidate: str) -> str:
    try:
        return POLICY.check_branch(candidate)
    except BeamError as error:
        assert error.code in REFUSALS, error
        return error.code


@settings(max_examples=2_000, deadline=None)
@given(names)
def test_every_name_is_accepted_plainly_or_refused_with_a_ref_code(candidate: str) -> None:
    result = decision(candidate)
    if result in REFUSALS:
        return
    assert not protected_by_reading(result)
    assert result.isascii() and result.isprintable() and " " not in result
    assert not set(result) & set(":*^~?[\\") and not result.startswith(("-", "+"))
    assert branch_name(result) == result == branch_name("refs/heads/" + result)


@settings(max_examples=1_000, deadline=None)
@given(st.sampled_from(["main", "master", "release/x", "release/1/2"]), st.data())
def test_every_case_variant_of_a_protected_name_is_protected(
    name: str, data: st.DataObject
) -> None:
    flips = data.draw(st.lists(st.booleans(), min_size=len(name), max_size=len(name)))
    variant = "".join(ch.upper() if flip else ch for ch, flip in zip(name, flips, strict=True))
    prefix = data.draw(st.sampled_from(["", "refs/heads/"]))
    assert decision(prefix + variant) == "BEM-328"


@settings(max_examples=300, deadline=None)
@given(st.one_of(plausible, names.filter(lambda name: "\x00" not in name)))
def test_accepted_names_are_valid_for_git_too(candidate: str) -> None:
    result = decision(candidate)
    if result in REFUSALS:
        return
    checked = subprocess.run(
        ["git", "check-ref-format", f"refs/heads/{result}"], capture_output=True, check=False
    )
    assert checked.returncode == 0, result


@pytest.fixture(scope="module")
def upstream_env(tmp_path_factory: pytest.TempPathFactory) -> GitEnv:
    return build_git_env(tmp_path_factory.mktemp("push-property"))


@settings(max_examples=150, deadline=None)
@given(st.one_of(plausible, names))
def test_no_accepted_push_reaches_a_protected_ref(upstream_env: GitEnv, candidate: str) -> None:
    env = upstream_env
    tree = env.tree
    before = refs_of(env.upstream)
    guarded = {ref: sha for ref, sha in before.items() if _protected_ref(ref)}
    try:
        tree.checkout_branch(candidate, create=True)
        pushed = tree.push(candidate)
    except BeamError as error:
        # BEM-326: a case variant exists locally; BEM-327: the upstream refused the ref
        # (a name like 'release' clashes with the directory of 'release/1.0').
        assert error.code in REFUSALS | {"BEM-326", "BEM-327"}, error
        assert refs_of(env.upstream) == before
        return
    finally:
        _forget_branches(env)
    after = refs_of(env.upstream)
    assert not protected_by_reading(pushed.ref.removeprefix("refs/heads/"))
    assert {ref: sha for ref, sha in after.items() if _protected_ref(ref)} == guarded
    assert set(after) - set(before) <= {pushed.ref}
    assert pushed.ref == "refs/heads/" + POLICY.check_branch(candidate)


def _forget_branches(env: GitEnv) -> None:
    """Back on 'feature' with no other local branches, so examples do not interact."""
    env.tree.checkout_branch("feature")
    repo = env.repo
    for name in list(repo.branches.local):
        if name not in ("feature", "main"):
            repo.branches.local.delete(name)


def _protected_ref(ref: str) -> bool:
    return ref.startswith("refs/heads/") and protected_by_reading(ref.removeprefix("refs/heads/"))


def test_the_push_property_upstream_starts_with_protected_refs(tmp_path: Path) -> None:
    env = build_git_env(tmp_path)
    refs = refs_of(env.upstream)
    assert {"refs/heads/main", "refs/heads/master", "refs/heads/release/1.0"} <= set(refs)
