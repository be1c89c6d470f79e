"""Agents in-process: ``RiverBeam`` (the host that registers and routes to them), the
registry, the echo agent, and the notes agents remember (``remember``)."""
