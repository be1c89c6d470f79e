"""What the HTTP API and the web pages share: FastAPI dependencies, problem documents, request
limits and the server-sent event stream. Neither ``bot.api`` nor ``bot.web`` imports the other."""
