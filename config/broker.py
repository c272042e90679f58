"""One fix to kombu's Redis transport, so a worker survives a restart of its broker.

When Redis goes away while a task is in flight (acks_late, so its message is unacknowledged),
Celery's consumer first `collect()`s the lost connection and then `close()`s it. The collect drops
the transport (`connection.client = None`) but can leave the default channel open when closing it
already failed on the dead socket; the close then closes that channel again, which tries to put
the unacknowledged message back through a new Redis pool built from `connection.client` — None —
and the `AttributeError: 'NoneType' object has no attribute 'hostname'` is not one of the
connection errors kombu's clean-up ignores, so the worker stopped for good (kombu 5.7 / Celery 5.7,
either pool; reproduced in tests/askdb/test_broker_restart.py).

The fix says what really happened: a channel whose connection is gone cannot reach the broker,
which is a connection error, so the clean-up ignores it as it does every other one, the consumer
reconnects, and the message comes back with Redis' own unacked-restore on the next connection.
Imported by config/celery.py, so every process that talks to the broker (web and worker) has it.
"""

from __future__ import annotations

from kombu.transport import redis as kombu_redis
from redis import exceptions as redis_exceptions

_original_connparams = kombu_redis.Channel._connparams


def _connparams(self, asynchronous: bool = False) -> dict:
    connection = self.connection
    if connection is None or connection.client is None:
        raise redis_exceptions.ConnectionError(
            "the broker connection of this channel is closed; a new connection is needed"
        )
    return _original_connparams(self, asynchronous=asynchronous)


def install() -> None:
    """Idempotent: patching twice keeps the one wrapper."""
    if kombu_redis.Channel._connparams is not _connparams:
        kombu_redis.Channel._connparams = _connparams
