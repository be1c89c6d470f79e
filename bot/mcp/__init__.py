"""Riverbeam as an MCP server (docs/mcp.md): the same jobs, tokens, roles and scopes as
``/v1``, for people's assistants. Streamable HTTP at ``/mcp`` on the API
(``bot.mcp.streamable``) and ``riverbeam mcp`` over stdio (``bot.mcp.stdio_bridge``) serve one
set of tools (``bot.mcp.assistant_tools``) over two backends (``bot.mcp.backends``). No tool
decides an approval."""
