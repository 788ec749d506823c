"""Every public blocking method of autocomplete, messaging and files has an asyncio twin
(``name`` -> ``aname``), and each twin does what its method does, on the real server."""

from __future__ import annotations

import asyncio
import inspect
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from redis_components import autocomplete, files, messaging
from redis_components.autocomplete import Guild, RecentContacts
from redis_components.connection import aclose_async_client
from redis_components.messaging import GroupChat, Mailbox, Message

# What needs no twin, and why: what sends nothing to Redis, or is no method of a service.
EXEMPT = {
    "autocomplete.normalize": "pure: text in, text out",
    "autocomplete.find_prefix_range": "pure: the bounds of a prefix",
    "autocomplete.validate_prefix": "pure: input checking",
    "autocomplete.validate_limit": "pure: input checking",
    "autocomplete.validate_member": "pure: input checking",
    "autocomplete.validate_contact": "pure: input checking",
    "autocomplete.members_only": "the sync guild views' access rule (it takes their request)",
    "messaging.Message": "a value: no I/O",
    "messaging.MessageList": "a value: no I/O",
    "messaging.UnreadCounts": "a value: no I/O",
    "messaging.ChatSummary": "a value: no I/O",
    "messaging.Pending": "a value: no I/O",
    "messaging.UnreadableMessage": "a value: no I/O",
    "files.SendProgress": "a value: no I/O",
    "files.ReceiveProgress": "a value: no I/O",
    "files.ReceivedFile": "a value: no I/O",
}
MODULES = (autocomplete, messaging, files)


def _blocking(module: types.ModuleType) -> dict[str, Any]:
    """The module's public functions and the public methods of its public classes, by
    name (``module.Class.method``), those named in EXEMPT left out, async ones too."""
    found: dict[str, Any] = {}
    short = module.__name__.rpartition(".")[2]
    for name, value in vars(module).items():
        where = f"{short}.{name}"
        if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
            continue
        if where in EXEMPT:
            continue
        if inspect.isfunction(value):
            found[where] = value
        elif inspect.isclass(value):
            for attribute, method in vars(value).items():
                if not attribute.startswith("_") and inspect.isfunction(method):
                    found[f"{where}.{attribute}"] = method
    return found


def test_every_public_blocking_method_has_an_async_twin() -> None:
    found = {name: value for module in MODULES for name, value in _blocking(module).items()}
    missing = []
    for name, value in found.items():
        if inspect.iscoroutinefunction(value):
            continue
        owner, _, method = name.rpartition(".")
        twin = found.get(f"{owner}.a{method}")
        if twin is None or not inspect.iscoroutinefunction(twin):
            missing.append(f"{name} (no coroutine {owner}.a{method}; or say why in EXEMPT)")
    assert not missing, "without an async twin:\n" + "\n".join(missing)
    # Every twin stands beside its method, with the method's parameters.
    for name, value in found.items():
        owner, _, method = name.rpartition(".")
        if inspect.iscoroutinefunction(value):
            assert f"{owner}.{method[1:]}" in found, name
            sync = inspect.signature(found[f"{owner}.{method[1:]}"])
            assert inspect.signature(value) == sync, name


def test_the_exemptions_name_what_exists() -> None:
    modules = {module.__name__.rpartition(".")[2]: module for module in MODULES}
    for name in EXEMPT:
        module, _, attribute = name.partition(".")
        assert hasattr(modules[module], attribute), name


def test_the_parity_test_notices_a_method_without_a_twin() -> None:
    module = types.ModuleType("redis_components.example")

    class Service:
        def lookup(self) -> None: ...

    Service.__module__ = module.__name__
    module.Service = Service  # type: ignore[attr-defined]
    assert list(_blocking(module)) == ["example.Service.lookup"]


# The twins against the real server: each scenario runs with the methods, then, on an
# empty database, with their twins; the results must be the same.

Call = Callable[..., Awaitable[Any]]


async def _sync(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return method(*args, **kwargs)


async def _twin(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    twin = getattr(method.__self__, f"a{method.__name__}")  # type: ignore[attr-defined]
    return await twin(*args, **kwargs)


def both(r: redis.Redis, scenario: Callable[[Call], Awaitable[Any]]) -> tuple[Any, Any]:
    async def run(call: Call) -> Any:
        try:
            return plain(await scenario(call))
        finally:
            await aclose_async_client()

    sync = asyncio.run(run(_sync))
    r.flushall()
    return sync, asyncio.run(run(_twin))


def plain(value: Any) -> Any:
    """``value`` without the servers' timestamps, which differ from run to run."""
    if isinstance(value, Message):
        return (value.id, value.sender, value.message)
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, messaging.Pending):
        return (value.chat_id, plain(list(value.messages)), value.missed)
    return value


def test_the_guild_twins_do_what_its_methods_do(r: redis.Redis) -> None:
    async def scenario(call: Call) -> list[Any]:
        guild = Guild("readers")
        return [
            await call(guild.join, "Zoë"),
            await call(guild.join, "Zoë"),
            await call(guild.join_many, ["Zack", "zoe", "Ærwyn"]),
            await call(guild.suggest, "zo"),
            await call(guild.suggest, "", limit=2),
            await call(guild.leave, "Zack"),
            await call(guild.leave, "Zack"),
            await call(guild.suggest, "z"),
        ]

    sync, twins = both(r, scenario)
    assert sync == twins
    assert sync[:3] == [True, False, 3]
    assert sync[3:] == [["Zoë", "zoe"], ["Ærwyn", "Zack"], True, False, ["Zoë", "zoe"]]


def test_the_recent_contacts_twins_do_what_its_methods_do(r: redis.Redis) -> None:
    async def scenario(call: Call) -> list[Any]:
        contacts = RecentContacts(capacity=3)
        for name in ("ann", "Anders", "bob", "ann", "Åsa"):
            await call(contacts.add, "7", name)
        return [
            await call(contacts.all, "7"),
            await call(contacts.suggest, "7", "a"),
            await call(contacts.suggest, "7", "a", limit=1),
            await call(contacts.remove, "7", "bob"),
            await call(contacts.remove, "7", "bob"),
            await call(contacts.all, "7"),
        ]

    sync, twins = both(r, scenario)
    assert sync == twins
    assert sync[0] == ["Åsa", "ann", "bob"]


def test_an_invalid_input_is_refused_by_the_twin_as_by_its_method(r: redis.Redis) -> None:
    async def scenario() -> None:
        try:
            await Guild("readers").ajoin("")
        finally:
            await aclose_async_client()

    with pytest.raises(autocomplete.InvalidInput):
        asyncio.run(scenario())
    assert r.dbsize() == 0


def test_the_messaging_twins_do_what_its_methods_do(r: redis.Redis) -> None:
    async def scenario(call: Call) -> list[Any]:
        chats, mailbox = GroupChat(creates_per_minute=0, accounts=True), Mailbox()
        chat_id = await call(chats.create, "alice", ["bob"], "hello", public=True)
        results = [
            chat_id,
            await call(chats.send, chat_id, "alice", "are you there?"),
            await call(chats.unread_counts, "bob"),
            await call(chats.chat_list, "bob"),
            await call(chats.history, chat_id, "bob", limit=1),
            await call(chats.messages_after, chat_id, "bob", 1),
            await call(chats.fetch_pending, "bob"),
            await call(chats.fetch_pending, "bob"),
            await call(chats.send, chat_id, "bob", "yes"),
            await call(chats.mark_read, chat_id, "alice"),
            await call(chats.join, chat_id, "carol"),
            await call(chats.members, chat_id),
            await call(chats.is_public, chat_id),
            await call(chats.chats_of, "carol"),
            await call(chats.leave, chat_id, "carol"),
            await call(chats.forget, "carol"),
            await call(mailbox.send, "bob", {"sold": 42}),
            await call(mailbox.fetch, "bob"),
            await call(mailbox.fetch, "bob"),
        ]
        with pytest.raises(messaging.NotAMember):
            await call(chats.send, chat_id, "carol", "hi")
        return results

    sync, twins = both(r, scenario)
    assert sync == twins
    assert sync[6] == [("1", [(1, "alice", "hello"), (2, "alice", "are you there?")], 0)]


def test_the_waiting_twins_wake_when_a_message_arrives() -> None:
    chats = GroupChat(creates_per_minute=0, accounts=True)

    async def scenario() -> list[Any]:
        try:
            chat_id = await chats.acreate("alice", ["bob", "carol"], "hello")
            await chats.afetch_pending("bob")
            await chats.afetch_pending("carol")
            # (carol's counts: bob's fetch marks his messages seen, whichever wakes first)
            waits = [
                chats.afetch_pending("bob", wait=30),
                chats.amessages_after(chat_id, "bob", 1, wait=30),
                chats.aunread_counts("carol", wait=30),
            ]
            waiting = [asyncio.ensure_future(wait) for wait in waits]
            await asyncio.sleep(0.2)  # the loop runs on while they wait
            assert not any(task.done() for task in waiting)
            await chats.asend(chat_id, "alice", "again")
            started = asyncio.get_running_loop().time()
            done = await asyncio.gather(*waiting)
            assert asyncio.get_running_loop().time() - started < 30  # woken, not timed out
            return done
        finally:
            await aclose_async_client()

    pending, after, counts = asyncio.run(scenario())
    assert plain(after) == [(2, "alice", "again")]
    assert counts.per_chat == {"1": 1}
    assert plain(pending) == [("1", [(2, "alice", "again")], 0)]


def test_a_cancelled_wait_cleans_up() -> None:
    chats = GroupChat(creates_per_minute=0, accounts=True)

    async def scenario() -> None:
        try:
            waiting = asyncio.ensure_future(chats.afetch_pending("bob", wait=30))
            await asyncio.sleep(0.2)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert await chats.afetch_pending("bob") == []  # the client still works
        finally:
            await aclose_async_client()

    asyncio.run(scenario())


def test_the_files_twins_send_and_receive(tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text("one\ntwo\nthree\n")
    lines: list[str] = []

    async def scenario() -> tuple[Any, Any]:
        receiving = files.areceive_files(channel="logs", reader="0", on_line=lines.append)
        sending = files.asend_files([log], channel="logs", readers=1)
        sent, received = await asyncio.gather(sending, receiving)
        return sent, received

    sent, received = asyncio.run(scenario())
    assert lines == ["one\n", "two\n", "three\n"]
    assert sent.complete
    assert sent.files_sent == 1
    assert received.finished
    assert received.lines == 3


def test_cancelling_a_files_twin_stops_its_loop() -> None:
    stopped: list[bool] = []

    async def scenario() -> None:
        def stop() -> bool:
            return False

        receiving = asyncio.ensure_future(
            files.areceive_files(channel="nobody", on_line=print, stop=stop)
        )
        await asyncio.sleep(0.2)
        receiving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await receiving
        stopped.append(True)  # (the thread returned: cancelling waited for it)

    asyncio.run(scenario())
    assert stopped == [True]
