"""Agents in-process: ``RiverBeam`` (the host that registers and routes to them), the
registry, the echo agent, the notes agents remember (``remember``), and the ``consume``
skill's read-only tools (``bot.agents.consume``)."""
