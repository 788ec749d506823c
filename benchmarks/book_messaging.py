"""The book's group chat (*Redis in Action* 6.5.2), as its listing prints it.

Changed only so that it runs on redis-py 5+ (each change is marked ``# fix:``):
``zadd`` takes a mapping, and ``zip`` is a list before items are assigned. Its lock is
the book's simple lock, in book_lock.py. Nothing else is changed: not the lock without a
timeout, not the round trips.
"""

from __future__ import annotations

import json
import time

from book_lock import acquire_lock, release_lock


def create_chat(conn, sender, recipients, message, chat_id=None):
    chat_id = chat_id or str(conn.incr("ids:chat:"))

    recipients.append(sender)
    recipientsd = dict((r, 0) for r in recipients)  # noqa: C402 - as printed

    pipeline = conn.pipeline(True)
    pipeline.zadd("chat:" + chat_id, recipientsd)  # fix: mapping, not **kwargs
    for rec in recipients:
        pipeline.zadd("seen:" + rec, {chat_id: 0})  # fix: mapping
    pipeline.execute()

    return send_message(conn, chat_id, sender, message)


def send_message(conn, chat_id, sender, message):
    identifier = acquire_lock(conn, "chat:" + chat_id)
    if not identifier:
        raise Exception("Couldn't get the lock")
    try:
        mid = conn.incr("ids:" + chat_id)
        ts = time.time()
        packed = json.dumps(
            {
                "id": mid,
                "ts": ts,
                "sender": sender,
                "message": message,
            }
        )

        conn.zadd("msgs:" + chat_id, {packed: mid})  # fix: mapping
    finally:
        release_lock(conn, "chat:" + chat_id, identifier)
    return chat_id


def fetch_pending_messages(conn, recipient):
    seen = conn.zrange("seen:" + recipient, 0, -1, withscores=True)

    pipeline = conn.pipeline(True)

    for chat_id, seen_id in seen:
        pipeline.zrangebyscore("msgs:" + chat_id, seen_id + 1, "inf")
    chat_info = list(zip(seen, pipeline.execute()))  # noqa: B905  fix: a list, as items are assigned

    for i, ((chat_id, seen_id), messages) in enumerate(chat_info):
        if not messages:
            continue
        messages[:] = map(json.loads, messages)
        seen_id = messages[-1]["id"]
        conn.zadd("chat:" + chat_id, {recipient: seen_id})  # fix: mapping

        min_id = conn.zrange("chat:" + chat_id, 0, 0, withscores=True)

        pipeline.zadd("seen:" + recipient, {chat_id: seen_id})  # fix: mapping
        if min_id:
            pipeline.zremrangebyscore("msgs:" + chat_id, 0, min_id[0][1])
        chat_info[i] = (chat_id, messages)
    pipeline.execute()

    return chat_info
