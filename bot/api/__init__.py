"""The HTTP face of the job service: the FastAPI app (``bot.app``), its access rules
(``bot.service.access``), problem documents (``bot.http.problems``) and the operations the API and
the web pages share (``bot.service.operations``)."""
