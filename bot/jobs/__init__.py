"""The job service: Celery tasks, the Redis store, approvals, schedules."""
