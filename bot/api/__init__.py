"""The HTTP face of the job service: the FastAPI app (``bot.api.app``), its access rules
(``bot.api.access``), problem documents (``bot.api.problems``) and the operations the API and
the web pages share (``bot.api.operations``)."""
