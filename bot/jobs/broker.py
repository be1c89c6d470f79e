"""The broker's Redis transport: kombu's, except that a worker reads its broadcasts whatever
its prefetch credit.

kombu polls a channel's pub/sub socket (the hosts broadcast, ``bot.service.queues.HOSTS_QUEUE``)
with its task queues, but reads it only while the channel may take another message. A worker
with ``worker_prefetch_multiplier = 1`` that runs a job has no credit left, so a chore sent
meanwhile, or the reply to kombu's own health-check PING (every 25 s), leaves that socket
readable and unread: the event loop wakes on it at once, forever, and the worker's main process
takes a whole core until the job ends (34 of 75 CPU-seconds in a bare Celery worker; on a
two-core host it halved the live model's speed). Read at once, a broadcast waits in the
worker's reserved buffer, as any message does, and runs when the job has ended.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis

LISTEN = "LISTEN"  # kombu's name for a channel's pub/sub registration


class BroadcastReadingPoller(redis.MultiChannelPoller):
    def on_readable(self, fileno: int) -> None:
        # Private to kombu (5.4 to 5.7 keep the name): which channel and kind a socket is.
        registered: tuple[Any, str] | None = self._fd_to_chan.get(fileno)  # type: ignore[attr-defined]
        if registered is not None and registered[1] == LISTEN:
            channel, _ = registered
            channel.handlers[LISTEN]()
            return
        super().on_readable(fileno)


class Transport(redis.Transport):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cycle = BroadcastReadingPoller()
