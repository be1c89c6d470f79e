"""What the HTTP API and the web pages share: FastAPI dependencies and the event-stream
response. Neither ``bot.api`` nor ``bot.web`` imports the other."""
