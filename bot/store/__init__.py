"""Riverbeam's Redis layer: the documents it stores (``bot.store.models``), the gateway
every other Redis user shares (``bot.store.gateway``, keys in ``bot.store.keys``), and one
module per stored concept, composed as ``bot.store.store.JobStore``. Nothing is imported
here, so a process that needs only the documents loads no Redis client."""
