"""Waiting for a grant without polling, and without trusting Redis's coarse timer.

A waiter blocks with BLPOP on a grant list that a release pushes to. The wait must end
when the holder's lease ends (the holder may have died), but an idle Redis checks
blocking timeouts only ``hz`` times a second (every 100 ms by default). So the deadline
is kept on the client: if Redis has not answered shortly after it, the waiter unblocks
its own BLPOP with CLIENT UNBLOCK from another connection, and reads the reply (nil, or
a grant that arrived just in time; nothing is lost). The connection's id, which CLIENT
UNBLOCK needs, is asked once per connection (again after it reconnects).
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from typing import Any

from .connection import is_cluster, text
from .exceptions import InvalidInput
from .keys import is_integer, seconds, shorten
from .redispy import known_client_id, remember_client_id

# How long after its own deadline the client gives up on a BLPOP that Redis has not
# answered yet, and unblocks it itself.
CLIENT_SLACK = 0.002
# How much longer than its wait a waiter's registration lives: covers the time between
# registering and blocking, so a release in between still counts the waiter.
REGISTRATION_SLACK_MS = 1000


# The longest a waiter blocks at once; one that waits longer (or without a limit) asks again.
MAX_SLICE = 60.0
# The longest registration (see Attempt.register_ms), in ms: how long a set of waiters
# lives after its last registration.
LONGEST_REGISTRATION_MS = math.ceil(MAX_SLICE * 1000) + REGISTRATION_SLACK_MS


def wait_seconds(value: object, field: str) -> float:
    """How long to wait: ``value`` seconds (0: try once), or ``math.inf``: no limit."""
    if value == math.inf and not isinstance(value, bool):
        return math.inf
    try:
        return seconds(value, field)
    except InvalidInput:
        if (is_integer(value) or isinstance(value, float)) and value > 0:
            raise  # too long: that message says the longest
        problem = f"must be a non-negative number of seconds or math.inf, not {shorten(value)}"
        raise InvalidInput(field, problem) from None


def positive_seconds(value: object, field: str) -> float:
    """``value`` as a positive, finite number of seconds, or :class:`InvalidInput`."""
    return seconds(value, field, positive=True)


def ms(seconds: float) -> int:
    """Seconds as whole milliseconds, at least 1."""
    return max(1, math.ceil(seconds * 1000))


def new_token() -> str:
    """A random token: a version-4 UUID's 32 hex digits (122 random bits; no host or
    clock data, as a version-1 UUID would hold), as redis-py's lock tests expect."""
    return uuid.uuid4().hex


class Attempt:
    """One acquisition of a lock or permit: its token, its deadline, what Redis last said.

    ``wait`` is how long it may block (0: try once). ``retry_after`` is what the last
    refusal said: seconds until the current holder's lease ends.
    """

    def __init__(self, wait: float) -> None:
        self.waits = wait > 0
        self.token = new_token()
        self.deadline = time.monotonic() + wait
        self.retry_after = 0.0

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def expired(self) -> bool:
        return self.remaining() <= 0

    def register_ms(self) -> int:
        """How long to stay registered as a waiter if refused (0: do not wait); a caller
        that waits without a limit registers for a slice at a time."""
        remaining = min(self.remaining(), MAX_SLICE)
        return ms(remaining) + REGISTRATION_SLACK_MS if remaining > 0 else 0

    def wait_slice(self) -> float:
        """Block until the holder's lease ends (it may have died), or until our deadline
        (at most :data:`MAX_SLICE`: then the caller asks again)."""
        remaining = min(self.remaining(), MAX_SLICE)
        if self.retry_after > 0:
            remaining = min(remaining, self.retry_after + 0.001)
        return max(remaining, 0.001)  # BLPOP takes 0 as "forever"


def _blpop(connection: Any, grant_key: str, seconds: float) -> tuple[Any, int | None]:
    """BLPOP packed for ``connection``, preceded by CLIENT ID while the connection's id is
    unknown (its reply then comes first), and the id if known."""
    client_id = known_client_id(connection)
    blpop = ("BLPOP", grant_key, f"{seconds:.3f}")
    commands = [blpop] if client_id is not None else [("CLIENT", "ID"), blpop]
    return connection.pack_commands(commands), client_id


def wait_for_grant(client: Any, grant_key: str, seconds: float) -> str | None:
    """BLPOP the grant list for ``seconds``, with the deadline kept on the client."""
    if is_cluster(client):
        # The list's node: BLPOP and CLIENT UNBLOCK both go there.
        client = client.get_redis_connection(client.get_node_from_key(grant_key))
    pool = client.connection_pool
    connection: Any = pool.get_connection()
    try:
        packed, client_id = _blpop(connection, grant_key, seconds)
        connection.send_packed_command(packed)
        if client_id is None:
            client_id = remember_client_id(connection, int(connection.read_response()))
        if not connection.can_read(timeout=seconds + CLIENT_SLACK):
            client.client_unblock(client_id)
        reply = connection.read_response()
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
    return None if reply is None else text(reply[1])


async def await_grant(client: Any, grant_key: str, seconds: float) -> str | None:
    """:func:`wait_for_grant` on a ``redis.asyncio`` client."""
    if is_cluster(client):
        node = client.get_node_from_key(grant_key)
        connection: Any = node.acquire_connection()

        async def unblock(client_id: int) -> None:
            await client.execute_command("CLIENT UNBLOCK", client_id, target_nodes=node)

        async def give_back() -> None:
            node.release(connection)
    else:
        pool = client.connection_pool
        connection = await pool.get_connection()

        async def unblock(client_id: int) -> None:
            await client.client_unblock(client_id)

        async def give_back() -> None:
            await pool.release(connection)

    try:
        packed, client_id = _blpop(connection, grant_key, seconds)
        await connection.send_packed_command(packed)
        if client_id is None:
            client_id = remember_client_id(connection, int(await connection.read_response()))
        reading = asyncio.ensure_future(connection.read_response())
        done, _ = await asyncio.wait({reading}, timeout=seconds + CLIENT_SLACK)
        if not done:
            await unblock(client_id)
        reply = await reading
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        await give_back()
    return None if reply is None else text(reply[1])
