"""Waiting for a grant without polling, and without trusting Redis's coarse timer.

A waiter blocks with BLPOP on a grant list that a release pushes to. The wait must end
when the holder's lease ends (the holder may have died), but an idle Redis checks
blocking timeouts only ``hz`` times a second (every 100 ms by default). So the deadline
is kept on the client: if Redis has not answered shortly after it, the waiter unblocks
its own BLPOP with CLIENT UNBLOCK from another connection, and reads the reply (nil, or
a grant that arrived just in time; nothing is lost).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from .connection import text

if TYPE_CHECKING:
    import redis
    import redis.asyncio

# How long after its own deadline the client gives up on a BLPOP that Redis has not
# answered yet, and unblocks it itself.
CLIENT_SLACK = 0.002


def wait_for_grant(client: redis.Redis, grant_key: str, seconds: float) -> str | None:
    """BLPOP the grant list for ``seconds``, with the deadline kept on the client."""
    pool = client.connection_pool
    connection: Any = pool.get_connection()
    try:
        # CLIENT ID rides along in the same round trip, for CLIENT UNBLOCK below.
        connection.send_packed_command(
            connection.pack_commands([("CLIENT", "ID"), ("BLPOP", grant_key, f"{seconds:.3f}")])
        )
        client_id = int(connection.read_response())
        if not connection.can_read(timeout=seconds + CLIENT_SLACK):
            client.client_unblock(client_id)
        reply = connection.read_response()
    except BaseException:
        connection.disconnect()
        raise
    finally:
        pool.release(connection)
    return None if reply is None else text(reply[1])


async def await_grant(client: redis.asyncio.Redis, grant_key: str, seconds: float) -> str | None:
    pool = client.connection_pool
    connection: Any = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        await connection.send_packed_command(
            connection.pack_commands([("CLIENT", "ID"), ("BLPOP", grant_key, f"{seconds:.3f}")])
        )
        client_id = int(await connection.read_response())
        reading = asyncio.ensure_future(connection.read_response())
        done, _ = await asyncio.wait({reading}, timeout=seconds + CLIENT_SLACK)
        if not done:
            await client.client_unblock(client_id)
        reply = await reading
    except BaseException:
        await connection.disconnect()
        raise
    finally:
        await pool.release(connection)
    return None if reply is None else text(reply[1])
