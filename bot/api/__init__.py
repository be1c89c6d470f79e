"""The HTTP API of the job service: its routers (jobs, events, approvals, catalog, health,
metrics), mounted by ``bot.app``. Access rules live in ``bot.service.access``, the operations
the API, the web pages and the CLI share in ``bot.service.jobs``, problem documents and the
event-stream framing in ``bot.http``."""
