"""The model factory of the model-endpoint fault tests: the real ``OpenAiCompatible`` client,
pointed at the stub server (``harness.stub_model``) the test runs on loopback.

``model.factory = "tests.faults.stub_client:for_job"``; the worker finds the stub's URL in
``FAULTS_MODEL_URL`` (``Stack.start_worker(env=...)``). A short read timeout and the SDK's
backoff (0.5 s, then 1 s) keep every retry path within a few seconds.
"""

from __future__ import annotations

import os

from bot.clients.openai_compatible import OpenAiCompatible
from bot.store.models import JobRecord
from harness.stub_model import STUB_MODEL

URL_VARIABLE = "FAULTS_MODEL_URL"
TIMEOUT_SECONDS = 1.5
MAX_RETRIES = 2


def for_job(job: JobRecord) -> OpenAiCompatible:
    return OpenAiCompatible(
        os.environ[URL_VARIABLE],
        "fault-test-key",
        STUB_MODEL,
        read_timeout=TIMEOUT_SECONDS,
        max_retries=MAX_RETRIES,
    )
