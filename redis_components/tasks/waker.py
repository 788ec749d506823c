"""How an idle worker waits for work without polling.

A worker whose take found its queues empty waits on a Pub/Sub subscription to their
wake-up channels (each named like its queue's ready set), confirmed before its first
wait: the scripts that make an empty queue non-empty, or add a new earliest delayed task
(idle workers sleep until the earliest due time), publish there. The wait is a
client-side ``select`` on the subscription's socket and on a pipe that a signal or
:meth:`Waker.wake` writes to, so no blocking command holds a connection and the server's
``hz`` does not delay a wake-up.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from typing import Any

import redis
from redis.client import PubSub

from ..connection import pubsub as new_pubsub
from ..connection import subscribe
from ..redispy import pubsub_socket

# How long Redis may take to confirm a subscription before it counts as down.
CONFIRM_TIMEOUT = 10.0
# How often an idle worker reads its Pub/Sub connection when it cannot select on it.
POLL_INTERVAL = 0.1


def backoff(down_for: float) -> float:
    """Seconds to wait before trying Redis again after ``down_for`` seconds without it."""
    return min(5.0, 0.1 * 2.0 ** min(6, int(down_for / 0.5)))


def empty_pipe(fd: int) -> None:
    """Read the non-blocking pipe ``fd`` to its end."""
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 512):
            pass


class Waker:
    """The idle wait of one worker over the wake-up ``channels`` of its queues.

    Only the worker's loop calls :meth:`wait`, :meth:`subscribe`, :meth:`unsubscribe`
    and :meth:`pause`; :meth:`wake` and :meth:`heard` may be called from any thread, and
    :attr:`fd` given to ``signal.set_wakeup_fd``.
    """

    def __init__(self, channels: list[str]) -> None:
        self.channels = channels
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._pubsub: PubSub | None = None
        # The channels heard since :meth:`heard` was last called (None: subscribed since).
        self._heard: set[str] | None = None
        # A read by heard() lost the subscription: the loop's next wait makes it again.
        self._lost = False
        # Held while the subscription is read or changed, and the channels heard taken.
        self._reading = threading.Lock()
        self._loop: int | None = None  # the thread that subscribed (the worker's loop)
        # Once the pipe is closed its fd numbers may belong to anything (a socket to
        # Redis): a thread that outlives the worker (a task abandoned at its time limit)
        # must not write there. The lock makes the check and the write one step.
        self._closed = False
        self._lock = threading.Lock()

    @property
    def fd(self) -> int:
        """A non-blocking fd to pass to ``signal.set_wakeup_fd``: a signal ends a wait."""
        return self._write

    def wake(self) -> None:
        """End the current (or next) wait at once (nothing once closed)."""
        with self._lock, contextlib.suppress(OSError):  # a full pipe holds a wake-up
            if not self._closed:
                os.write(self._write, b"s")

    def wait(self, client: Any, timeout: float) -> None:
        """Wait for a wake-up message, a :meth:`wake` (or signal), or ``timeout`` seconds.

        The first call only subscribes (on ``client``) and returns: a task may have come
        before the subscription, so the worker takes again before it waits.
        """
        if self._lost:  # (a slot's heard() found it lost: it waited for the loop)
            self.unsubscribe()
        if self._pubsub is None:
            self.subscribe(client)
            return
        with self._reading:
            if self._drain():
                return
            sock = pubsub_socket(self._pubsub)
            if sock is None:  # not connected yet, or redis-py's socket is not known: poll
                message = self._pubsub.get_message(timeout=min(timeout, POLL_INTERVAL))
                if message is not None:
                    self._note(message)
                    self._drain()
                return
            fd = sock.fileno()
        # A slot's heard() may have lost the connection meanwhile (its fd closed): the
        # drain below reconnects, or raises that Redis is down.
        with contextlib.suppress(ValueError, OSError):
            select.select([fd, self._read], [], [], timeout)
        empty_pipe(self._read)
        with self._reading:
            if self._pubsub is not None:
                self._drain()

    def heard(self) -> set[str] | None:
        """The channels heard since the last call, reading the pending messages without
        waiting; ``None`` when the subscription was made (or lost) since: a message may
        have been missed. Nothing is heard before the first subscription, or while the
        loop reads it (it keeps what it reads for the next call). From another thread
        than the loop's, a message read also wakes the loop. Only the loop reconnects."""
        if not self._reading.acquire(blocking=False):
            return set()
        try:
            if self._pubsub is None:
                return set()
            if self._lost:
                return None
            try:
                self._drain()
            except (redis.exceptions.RedisError, OSError):
                self._lost = True
                heard = None
            else:
                heard, self._heard = self._heard, set()
        finally:
            self._reading.release()
        if heard != set() and threading.get_ident() != self._loop:
            self.wake()
        return heard

    def subscribe(self, client: Any) -> None:
        """Subscribe (on ``client``) unless subscribed: from then on, :meth:`heard` hears."""
        if self._pubsub is not None:
            return
        pubsub: PubSub = new_pubsub(client)
        try:
            if not subscribe(pubsub, self.channels, time.monotonic() + CONFIRM_TIMEOUT):
                raise redis.exceptions.TimeoutError("Redis did not confirm the subscription")
        except BaseException:
            pubsub.close()
            raise
        with self._reading:
            self._pubsub = pubsub
            self._heard = None
            self._loop = threading.get_ident()

    def pause(self, seconds: float) -> None:
        """Sleep ``seconds`` unless woken first (no wake-up message ends it)."""
        select.select([self._read], [], [], seconds)
        empty_pipe(self._read)

    def unsubscribe(self) -> None:
        """Drop the subscription (its connection is lost); the next wait subscribes again."""
        with self._reading:
            if self._pubsub is not None:
                self._pubsub.close()
                self._pubsub = None
                self._heard = None
                self._lost = False

    def close(self) -> None:
        self.unsubscribe()
        with self._lock:
            self._closed = True
            os.close(self._read)
            os.close(self._write)

    def _drain(self) -> bool:
        """Read every pending wake-up (or resubscription) message; True if there was one."""
        assert self._pubsub is not None
        got = False
        while (message := self._pubsub.get_message(timeout=0)) is not None:
            got = True
            self._note(message)
        return got

    def _note(self, message: dict[str, Any]) -> None:
        if message["type"] == "subscribe":  # redis-py subscribed again, on a new connection
            self._heard = None
        elif self._heard is not None and message["type"] == "message":
            channel = message["channel"]
            self._heard.add(channel.decode() if isinstance(channel, bytes) else channel)
