"""``RedisGateway``: the one way into Riverbeam's Redis, shared by the job store's concepts
and by every other document kept beside them (scheduled runs, web sessions).

It holds the client and the key prefix (``keys``), turns an outage into BEM-504 naming the
host but never the URL (``reachable``), fails fast while Redis is known to be down (the
breaker), and runs optimistic transactions (``atomic``: WATCH, read, MULTI, EXEC, retried
when another writer got there first). Timestamps come from the Redis server's clock
(``server_now``), so leases mean the same thing on every worker host.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Self, TypeVar, cast

import redis
from redis.backoff import ExponentialBackoff
from redis.client import Pipeline
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from bot.config import Settings
from bot.core.errors import BeamError
from bot.store.keys import Keys

T = TypeVar("T")
# The writes of an optimistic transaction, queued on the pipeline after MULTI.
Writes = Callable[[Pipeline], None]

# Optimistic transactions retry when a watched key changed. Each round lets at least one
# writer through, so this bound is only reached under pathological contention.
MAX_WATCH_RETRIES = 100
# Keys one SCAN step of a backfill looks at (the documents among them are read whole).
_BACKFILL_BATCH = 1000
# Redis refuses writes with these replies while it is out of memory (noeviction), cannot
# persist, or is a read-only replica: for a caller that is the store being unavailable.
_UNAVAILABLE_REPLIES = ("OOM", "MISCONF", "READONLY")


class Breaker:
    """Fail fast while Redis is known to be down: after a call timed out or could not
    connect, calls fail at once for ``seconds``; then one call goes through to see whether
    Redis is back (the others still fail fast until it ends), and its outcome closes the
    breaker or opens it again. A hung Redis costs one call its socket timeout, not every call
    its timeout and retries. ``seconds`` 0: never open."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._lock = threading.Lock()
        self._tripped = False
        self._open_until = 0.0

    def wait_left(self) -> float:
        """Seconds the breaker stays open, 0 when this call may go to Redis."""
        with self._lock:
            now = time.monotonic()
            if now < self._open_until:
                return self._open_until - now
            if self._tripped:
                self._open_until = now + self._seconds  # this call is the trial
            return 0.0

    def record(self, *, failed: bool) -> None:
        if self._seconds <= 0:
            return
        with self._lock:
            if failed:
                self._tripped, self._open_until = True, time.monotonic() + self._seconds
            elif self._tripped:
                self._tripped, self._open_until = False, 0.0


class RedisGateway:
    """The client, the keys and the outage handling every Redis user of a deployment
    shares. ``events_maxlen`` and ``snapshot_max_bytes`` are the caps the job store's
    event streams and parked blobs apply; ``cancel_ttl_seconds`` is how long a running job's
    cancel flag lives (``jobs.time_limit_seconds`` + ``jobs.lease_seconds``: past that the
    segment it was meant for has ended, and its record still says so)."""

    def __init__(
        self,
        redis: redis.Redis,
        *,
        prefix: str = "riverbeam",
        events_maxlen: int = 10_000,
        snapshot_max_bytes: int = 32 << 20,
        cancel_ttl_seconds: float = 1260.0,
        breaker_seconds: float = 0.0,
    ) -> None:
        if redis.connection_pool.connection_kwargs.get("decode_responses"):
            # Snapshots are bytes; a decoding client would mangle them.
            raise ValueError("JobStore needs a Redis client with decode_responses=False")
        self._redis = redis
        self.keys = Keys(prefix)
        self.events_maxlen = events_maxlen
        self.snapshot_max_bytes = snapshot_max_bytes
        self.cancel_ttl_seconds = cancel_ttl_seconds
        self._breaker = Breaker(breaker_seconds)
        self._where = describe_redis(redis)
        self._deployment: str | None = None

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        socket_timeout: float = 10.0,
        retry_timeouts: bool = True,
        **kw: Any,
    ) -> Self:
        """A gateway on a new client for ``url`` (``redis://[user:password@]host:port/db``).

        Short connect and read timeouts and two quick reconnect attempts: a Redis outage
        surfaces as BEM-504 within seconds instead of hanging a worker. Without
        ``retry_timeouts`` a call that timed out is not tried again (a dropped connection
        still is): what the API wants, where a hung Redis must cost a request one timeout."""
        retried = (
            (RedisConnectionError, RedisTimeoutError) if retry_timeouts else (RedisConnectionError,)
        )
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=min(5.0, socket_timeout),
            socket_timeout=socket_timeout,
            health_check_interval=30,
            retry=Retry(
                ExponentialBackoff(cap=0.5, base=0.05), retries=2, supported_errors=retried
            ),
        )
        return cls(client, **kw)

    @classmethod
    def for_settings(cls, settings: Settings, *, api: bool = False) -> Self:
        """The gateway the configuration names, with its key prefix and caps. The API's
        (``api``) waits ``api.redis_timeout_seconds`` for an answer, never retries a
        timeout, and fails fast for ``api.redis_breaker_seconds`` after one."""
        limits: dict[str, Any] = {}
        if api:
            limits = {
                "socket_timeout": settings.api.redis_timeout_seconds,
                "retry_timeouts": False,
                "breaker_seconds": settings.api.redis_breaker_seconds,
            }
        return cls.from_url(
            settings.redis_url,
            prefix=settings.jobs.prefix,
            events_maxlen=settings.jobs.events_maxlen,
            snapshot_max_bytes=settings.jobs.snapshot_max_bytes,
            cancel_ttl_seconds=settings.jobs.time_limit_seconds + settings.jobs.lease_seconds,
            **limits,
        )

    @property
    def client(self) -> redis.Redis:
        return self._redis

    def key(self, *parts: str) -> str:
        """``<prefix>:<part>:<part>...``: a key of this deployment's Redis keyspace."""
        return self.keys.of(*parts)

    def deployment(self) -> str:
        """This deployment's identity: a random id stored once in the store (SET NX), so
        every worker and API process of one Redis database and key prefix reads the same,
        whatever host name they reach Redis by, and a second deployment never does. The
        sandbox containers of this deployment carry it as a label; its reaper removes only
        those (``sandbox.host.container.reaper``)."""
        if self._deployment is None:
            key = self.keys.deployment
            with self.reachable():
                self._redis.set(key, secrets.token_hex(8), nx=True)
                raw = self._redis.get(key)
            if raw is None:
                raise BeamError("BEM-504", f"the job store lost {key} as it was written")
            self._deployment = text(raw)
        return self._deployment

    def backfill(self, marker: str, match: str, apply: Callable[[list[bytes]], None]) -> None:
        """One step of writing what a release before a key existed did not: one SCAN page of
        the keys matching ``match`` per call, their documents handed to ``apply``, resumed
        from the cursor kept under ``marker`` and ``done`` once the keyspace was covered. So
        the first sweeps after an upgrade each cost one page, and later ones a GET."""
        with self.reachable():
            cursor = self._redis.get(marker)
            if cursor == b"done":
                return
            following, keys = self._redis.scan(int(cursor or 0), match=match, count=_BACKFILL_BATCH)
            raws = self._redis.mget(keys) if keys else []
            apply([as_bytes(raw) for raw in raws if raw])
            self._redis.set(marker, "done" if int(following) == 0 else str(following))

    @contextmanager
    def reachable(self) -> Iterator[None]:
        """Turn a Redis outage into BEM-504. The message names the host, never the URL,
        which may carry a password. While the breaker is open, BEM-504 comes at once."""
        left = self._breaker.wait_left()
        if left:
            raise BeamError(
                "BEM-504",
                f"the job store (Redis at {self._where}) did not answer a moment ago; "
                f"it is tried again in {left:.1f} s",
            )
        failed = False
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError) as exc:
            failed = True
            reason = "timed out" if isinstance(exc, RedisTimeoutError) else "connection failed"
            if isinstance(exc, redis.exceptions.AuthenticationError):
                reason = "authentication failed"
            elif isinstance(exc, redis.exceptions.BusyLoadingError):
                reason = "still loading its data after a restart"
            raise BeamError(
                "BEM-504",
                f"the job store (Redis at {self._where}) is unreachable: {reason}. "
                "Check that Redis is running and that redis_url points at it.",
            ) from exc
        except ResponseError as exc:
            if not str(exc).startswith(_UNAVAILABLE_REPLIES):
                raise
            raise BeamError(
                "BEM-504",
                f"the job store (Redis at {self._where}) refuses writes: {exc}",
            ) from exc
        finally:
            self._breaker.record(failed=failed)

    def atomic(
        self,
        watch: Collection[str],
        body: Callable[[Pipeline], tuple[T, Writes | None]],
    ) -> T:
        """Run ``body`` under WATCH on ``watch``; it reads through the pipeline (immediate
        mode) and returns its value and the writes to queue, or None to write nothing. The
        writes run in MULTI/EXEC; when a watched key changed meanwhile, everything reruns,
        at most ``MAX_WATCH_RETRIES`` times (then BEM-504)."""
        attempts = 0

        def attempt(pipe: Pipeline) -> T:
            nonlocal attempts
            if attempts == MAX_WATCH_RETRIES:
                raise BeamError(
                    "BEM-504",
                    f"the job store is overloaded: {', '.join(sorted(watch))} changed under "
                    f"{MAX_WATCH_RETRIES} attempts in a row to update it; try again",
                )
            if attempts:
                # Jitter spreads the retries of writers that collided, before they watch again.
                time.sleep(random.uniform(0, 0.001 * min(attempts, 20)))
            attempts += 1
            if watch:
                pipe.watch(*watch)  # type: ignore[no-untyped-call]
            value, writes = body(pipe)
            if writes is None:
                # Nothing to write: no EXEC, so nothing to retry.
                pipe.unwatch()
            else:
                pipe.multi()
                writes(pipe)
            return value

        with self.reachable():
            # ``transaction`` runs ``attempt`` and EXEC, and runs both again on WatchError.
            # redis-py types ``func`` as returning None; value_from_callable hands its value.
            value = self._redis.transaction(attempt, value_from_callable=True)  # type: ignore[arg-type]
        return cast(T, value)


def server_now(pipe: redis.Redis) -> datetime:
    """The Redis server's clock: the same on every worker host."""
    seconds, micros = pipe.time()
    return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=micros)


def describe_redis(client: redis.Redis) -> str:
    """Where the client connects, for messages: host and port (or socket path), no user
    and no password."""
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def text(value: bytes | str) -> str:
    # The gateway's client never decodes (see __init__); str only satisfies redis-py's types.
    return value.decode() if isinstance(value, bytes) else value


def as_bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()
