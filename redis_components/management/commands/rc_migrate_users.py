"""``manage.py rc_migrate_users``: move the messaging data that 0.1 keyed by username to
the users' primary keys (see docs/operations.md, "Upgrading from 0.1")."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError, CommandParser
from redis.client import NEVER_DECODE

from ... import keys, scripts
from ...conf import conf
from ...connection import get_client, text
from ...exceptions import InvalidInput
from ...messaging import _chat_keys
from ..base import RedisCommand

# Chats read per pipeline while looking for old names.
CHAT_BATCH = 100


@dataclass
class Summary:
    """What a run moved (or, with ``dry_run``, would move)."""

    users: int = 0
    mailbox_messages: int = 0
    chat_indexes: int = 0
    chats: int = 0
    memberships: int = 0
    senders: int = 0
    skipped: list[str] = field(default_factory=list)

    def line(self, dry_run: bool) -> str:
        verb = "Would move" if dry_run else "Moved"
        line = (
            f"{verb} the messaging data of {self.users} user(s) from their username to "
            f"their pk: {self.mailbox_messages} mailbox message(s), {self.chat_indexes} "
            f"chat index(es), {self.memberships} chat membership(s) and {self.senders} "
            f"message sender(s) in {self.chats} chat(s); skipped {len(self.skipped)} "
            "ambiguous user(s)."
        )
        return line + (" Nothing was changed (--dry-run)." if dry_run else "")


def renames() -> tuple[dict[str, str], list[str]]:
    """``{username: pk}`` for every user whose data may move, and why the others may not.

    A username that is another user's pk is ambiguous (its keys may hold that other
    user's data), and so is a pk that is another user's username: both users are skipped.
    """
    model = get_user_model()
    rows = [
        (str(pk), str(name))
        for pk, name in model._default_manager.values_list("pk", model.USERNAME_FIELD)
    ]
    owners_of_pk = dict(rows)
    owners_of_name = {name: pk for pk, name in rows}
    mapping: dict[str, str] = {}
    skipped: list[str] = []
    for pk, name in rows:
        if name == pk:
            continue  # the same key either way: nothing to move
        try:
            keys.validate_name(name, "username")
        except InvalidInput:
            continue  # 0.1 could not have stored anything under it
        if name in owners_of_pk:
            skipped.append(
                f"{name!r} (pk {pk}): the username is also the pk of user "
                f"{owners_of_pk[name]!r}; move its data by hand"
            )
        elif pk in owners_of_name:
            skipped.append(
                f"{name!r} (pk {pk}): the pk is also the username of user pk "
                f"{owners_of_name[pk]}; move its data by hand"
            )
        else:
            mapping[name] = pk
    return mapping, skipped


def migrate(*, dry_run: bool = False) -> Summary:
    """Move every user's 0.1 messaging data from their username to their pk."""
    mapping, skipped = renames()
    summary = Summary(skipped=skipped)
    client = get_client()
    moved: set[str] = set()
    _migrate_chats(client, mapping, dry_run, summary, moved)
    for old, new in mapping.items():
        if _migrate_user(client, old, new, dry_run, summary):
            moved.add(old)
    summary.users = len(moved)
    return summary


def _migrate_chats(
    client: Any, mapping: dict[str, str], dry_run: bool, summary: Summary, moved: set[str]
) -> None:
    """Rename the old names in every chat numbered up to the chat id counter."""
    last = int(client.get(keys.key("chat", "next-id")) or 0)
    for start in range(1, last + 1, CHAT_BATCH):
        chat_ids = [str(n) for n in range(start, min(last, start + CHAT_BATCH - 1) + 1)]
        pipe = client.pipeline(transaction=False)
        for chat_id in chat_ids:
            _, members, joins, messages = _chat_keys(chat_id)
            pipe.zrange(members, 0, -1)
            pipe.hkeys(joins)
            pipe.execute_command("ZRANGE", messages, 0, -1, **{NEVER_DECODE: True})
        replies = pipe.execute()
        for n, chat_id in enumerate(chat_ids):
            members, joins, messages = replies[3 * n : 3 * n + 3]
            member_names = {text(name) for name in members}
            senders = [_sender(message) for message in messages]
            found = member_names | {text(name) for name in joins} | set(senders)
            olds = sorted(name for name in found if name in mapping)
            if not olds:
                continue
            summary.chats += 1
            summary.memberships += len(member_names.intersection(olds))
            moved.update(olds)
            if dry_run:
                summary.senders += sum(sender in mapping for sender in senders)
                continue
            summary.senders += _rename_in_chat(
                client, chat_id, [(old, mapping[old]) for old in olds]
            )


def _rename_in_chat(client: Any, chat_id: str, pairs: list[tuple[str, str]]) -> int:
    """Rename ``pairs`` in one chat (atomically); how many senders were renamed.

    As a join does, each new name's chat index lists the chat before the chat lists the
    new name; an entry for a chat the new name turns out not to be in is taken back.
    """
    add, remove = scripts.load("chat_index_add"), scripts.load("chat_index_remove")
    calls = [(add, _index_keys(new), [chat_id]) for _, new in pairs]
    versions = scripts.run_many(client, calls)
    for version in versions:
        if isinstance(version, Exception):
            raise version
    triples = [
        value
        for (old, new), version in zip(pairs, versions, strict=True)
        for value in (old, new, int(version))
    ]
    is_member, senders = scripts.load("chat_rename")(client, _chat_keys(chat_id), triples)
    for (_, new), version, member in zip(pairs, versions, is_member, strict=True):
        if not int(member):
            remove(client, [_index_keys(new)[0]], [chat_id, int(version)])
    return int(senders)


def _migrate_user(client: Any, old: str, new: str, dry_run: bool, summary: Summary) -> bool:
    """Move the mailbox, and drop the old chat index (its chats were renamed already);
    whether there was anything."""
    source, target = keys.key("mailbox", old), keys.key("mailbox", new)
    mail = client.execute_command("LRANGE", source, 0, -1, **{NEVER_DECODE: True})
    index = _index_keys(old)
    indexes = int(client.exists(index[0]))
    summary.mailbox_messages += len(mail)
    summary.chat_indexes += indexes
    if dry_run or not (mail or indexes or client.exists(index[1])):
        return bool(mail or indexes)
    if mail:
        # The old messages are older than any sent to the pk: they go first. Copied, then
        # removed from the old list (keeping any that came meanwhile): a crash in between
        # leaves them in both, never in neither.
        pipe = client.pipeline(transaction=True)
        pipe.lpush(target, *reversed(mail))
        pipe.ltrim(target, -conf.MAILBOX_MAX_MESSAGES, -1)
        pipe.execute()
        client.ltrim(source, len(mail), -1)
    client.delete(*index)  # one hash tag: the old name's
    return bool(mail or indexes)


def _index_keys(user: str) -> list[str]:
    return [keys.key("chat-index", user), keys.key("chat-index", user, "versions")]


def _sender(message: bytes) -> str | None:
    try:
        sender = json.loads(message).get("sender")
    except (ValueError, AttributeError, RecursionError):
        return None
    return sender if isinstance(sender, str) else None


class Command(RedisCommand):
    help = (
        "Upgrading from 0.1: move the messaging data that 0.1 kept under usernames (what "
        "its chat views used) to the users' primary keys, which identify users from 0.2 "
        "on. For every user of the user model: the mailbox, the chat index and its join "
        "counter, and in every chat the member entry, the joins entry and the sender of "
        "the stored messages (each chat rewritten atomically by one Lua script). Running "
        "it again changes nothing. A username that is another user's pk is ambiguous: "
        "both users are skipped, and named. Run it with the old version stopped, "
        "once the new version serves the site with MESSAGING_USER_KEY = 'pk' (the "
        "default)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Only count what would move; change nothing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = options["dry_run"]
        if conf.MESSAGING_USER_KEY != "pk" and not dry_run:
            raise CommandError(
                "MESSAGING_USER_KEY is 'username': the chat views would no longer find the "
                "moved data. Set it to 'pk' (the default) first, or use --dry-run."
            )
        summary = migrate(dry_run=dry_run)
        for reason in summary.skipped:
            self.stdout.write(self.style.WARNING(f"Skipped {reason}."))
        self.stdout.write(summary.line(dry_run))
