"""Riverbeam's Redis layer: the documents it stores (``bot.store.models``), the gateway
every other Redis user shares, and one module per stored concept."""
