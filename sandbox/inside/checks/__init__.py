"""The docs checks' in-container side (docs/checks.md): the trees they read, written by the
sandbox uid (``export``), and the checks themselves, run as a uid of their own
(``runner``, with the built-in set in ``catalog``). The host starts each as its own process
in the job's container; neither is the tool server."""

__all__ = ["CHECK_PROGRAMS", "EXPORT_MODULE", "RUNNER_MODULE"]

EXPORT_MODULE = "sandbox.inside.checks.export"
RUNNER_MODULE = "sandbox.inside.checks.runner"
# What the host runs in a job's container besides the tool server (the image holds them).
CHECK_PROGRAMS = (EXPORT_MODULE, RUNNER_MODULE)
