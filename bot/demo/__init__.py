"""The demo: a sample docs repository, its configuration, and the scripted demo model.

``riverbeam demo`` (``bot.cli.demo_command``) builds a bare upstream holding a small handbook whose
install page has typos and a broken relative link, registers it in a generated
``riverbeam.toml``, and asks an author job to fix the page.

Without a model API key the workers use ``demo_model`` (``model.factory =
"bot.demo:demo_model"``): a scripted model, a ``PlaybookClient`` with a plan for every kind
that works through the real tools and computes its answers from what they return. Its whole
knowledge is a list of common misspellings and the rule that a relative link must point at a
file that exists:

- author: lists the tree, reads the install page, writes it back corrected (misspellings
  replaced word by word; a link to a missing page pointed at the closest page that exists),
  looks at the diff, commits and pushes, which parks for approval;
- review: reads the log, the diff, the tree and every changed file, and delivers with
  ``review_change`` one finding per misspelling (minor) and per broken relative link
  (major), the verdict following from them;
- summarize and commit-notes: read the log and the diff and describe the commits, the files
  and the fixes the diff makes;
- publish: states what it publishes, from its brief, and calls ``publish_docset``.

Nothing about the pages is hard-coded in its steps: change them and it finds what is there.
With a key, the workers use the live model and this package only provides the repository.

The parts: ``sample_repo`` (the pages, their upstream and configuration), ``fixes`` (the
misspellings and the link rule) and ``scripted_model`` (the plans). ``demo_model`` is named
here, at ``bot.demo:demo_model``, because generated configurations name it so.
"""

from bot.demo.fixes import MISSPELLINGS, Fix, fix_links, fix_typos
from bot.demo.sample_repo import (
    DEMO_MODEL_FACTORY,
    PAGE,
    PAGES,
    PUBLISH_REF,
    REPO_NAME,
    REQUEST,
    SCRIPTED_LABEL,
    UpstreamCommit,
    branch_commit,
    config_text,
    create_upstream,
)
from bot.demo.scripted_model import DemoModel, demo_model

__all__ = [
    "DEMO_MODEL_FACTORY",
    "MISSPELLINGS",
    "PAGE",
    "PAGES",
    "PUBLISH_REF",
    "REPO_NAME",
    "REQUEST",
    "SCRIPTED_LABEL",
    "DemoModel",
    "Fix",
    "UpstreamCommit",
    "branch_commit",
    "config_text",
    "create_upstream",
    "demo_model",
    "fix_links",
    "fix_typos",
]
