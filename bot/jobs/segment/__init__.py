"""The phases of a job segment, beside ``bot.jobs.executor`` which runs them in order:
``workspace`` (the job's tree), ``container_start`` (how its container starts, run ahead or
at the first tool call), ``hooks`` (what the run reports and checks as it goes) and
``finish`` (the end of a run that did not park)."""
