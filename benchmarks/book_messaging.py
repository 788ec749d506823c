"""The book's group chat (*Redis in Action* 6.5.2), as its listing prints it.

Changed only so that it runs on redis-py 5+ (each change is marked ``# fix:``):
``zadd`` takes a mapping, ``zip`` is a list before items are assigned, and
``release_lock`` creates the pipeline it uses. The client must decode responses (the
book compares the lock's value with a str). Nothing else is changed: not the lock
without a timeout, not the round trips.
"""

from __future__ import annotations

import json
import time
import uuid

import redis


def acquire_lock(conn, lockname, timeout=10):
    identifier = str(uuid.uuid4())
    end = time.time() + timeout
    while time.time() < end:
        if conn.setnx("lock:" + lockname, identifier):
            return identifier
        time.sleep(0.001)
    return False


def release_lock(conn, lockname, identifier):
    key = "lock:" + lockname
    pipe = conn.pipeline(True)  # fix: the listing uses `pipe` without creating it
    while True:
        try:
            pipe.watch(key)
            if pipe.get(key) == identifier:
                pipe.multi()
                pipe.delete(key)
                pipe.execute()
                return True

            pipe.unwatch()
            break
        except redis.exceptions.WatchError:
            pass
    return False


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
