"""Skills: a system prompt and a tool allowlist per kind of docs work."""
