"""The web tests' model factory (``model.factory`` of their stack). A job submitted through
the New-request form carries no metadata, so it names no playbook: its kind picks one. An
author job thinks for a few seconds before it reads the page, so a browser sees it running."""

from __future__ import annotations

from bot.clients.playbook import PlaybookClient
from bot.store.models import JobKind, JobRecord
from harness import playbooks

FORM_PLAYBOOKS = {
    JobKind.AUTHOR: "author-fix-slowly",
    JobKind.REVIEW: "review-approve",
    JobKind.SUMMARIZE: "summarize",
    JobKind.COMMIT_NOTES: "commit-notes",
}


def for_job(job: JobRecord) -> PlaybookClient:
    if "playbook" not in job.spec.metadata:
        metadata = {**job.spec.metadata, "playbook": FORM_PLAYBOOKS[job.spec.kind]}
        job = job.model_copy(update={"spec": job.spec.model_copy(update={"metadata": metadata})})
    return playbooks.for_job(job)
