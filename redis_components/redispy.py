"""The one place that reaches into redis-py's private connection attributes.

Two fast paths need what redis-py does not publish: the blocking wait of locks and
semaphores (``waiting.py``) keeps each connection's server-side id, asked once per
connection, so it must notice when redis-py has reconnected; and the worker's idle
wait (``tasks/waker.py``) selects on its Pub/Sub connection's socket beside a pipe.
Both read a private attribute here, and both have a fallback that is slower but
correct when a redis-py release renames it: the id is then asked before every wait
(one more command), and the worker polls its Pub/Sub connection every 100 ms.
"""

from __future__ import annotations

import socket
import threading
import weakref
from typing import Any

# What a connection talks through now (a new object after every reconnection): the
# socket of a sync connection, the stream writer of an asyncio one.
TRANSPORT_ATTRIBUTES = ("_sock", "_writer")
SOCKET_ATTRIBUTE = "_sock"

_client_ids: weakref.WeakKeyDictionary[Any, tuple[object, int]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _transport(connection: Any) -> object | None:
    for name in TRANSPORT_ATTRIBUTES:
        found: object = getattr(connection, name, None)
        if found is not None:
            return found
    return None


def known_client_id(connection: Any) -> int | None:
    """The server's id of ``connection`` (for CLIENT UNBLOCK) if it was asked since the
    connection last connected; ``None``: ask it (always, when the transport is unknown)."""
    transport = _transport(connection)
    if transport is None:
        return None
    with _lock:
        known = _client_ids.get(connection)
    return known[1] if known is not None and known[0] is transport else None


def remember_client_id(connection: Any, client_id: int) -> int:
    """Keep ``client_id`` as the id of ``connection`` until it reconnects; returns it."""
    transport = _transport(connection)
    if transport is not None:
        with _lock:
            _client_ids[connection] = (transport, client_id)
    return client_id


def pubsub_socket(pubsub: Any) -> socket.socket | None:
    """The socket a Pub/Sub object reads from, to select on; ``None`` when it is not
    connected or not known (then poll it with ``get_message(timeout=...)``)."""
    connection = getattr(pubsub, "connection", None)
    found = getattr(connection, SOCKET_ATTRIBUTE, None) if connection is not None else None
    return found if isinstance(found, socket.socket) else None
