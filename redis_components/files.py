"""Distributing files through Redis (*Redis in Action* 6.6): one sender, many readers.

::

    send_files(["access.log.1", "access.log.2.gz"], channel="logs", readers=3)
    receive_files(channel="logs", reader="0", on_line=handle)  # in each reader process

The sender copies each file into Redis block by block (APPEND) and announces it; every
reader reads every file back block by block (GETRANGE), splits it into lines (``.gz``
files are gunzipped as a stream) and calls ``on_line`` for each; once every reader has
finished a file, it is deleted and its bytes are free for the next one. For channel
``logs``, everything shares the channel's hash tag::

    rc:files:{logs}            hash: the sender's token and heartbeat, state, limit,
                               bytes used, the last file announced, the chat id
    rc:files:{logs}:readers    zset: active reader -> seq of the last file it finished
    rc:files:{logs}:seen       hash: active reader -> when it was last heard from
    rc:files:{logs}:files      hash: seq -> JSON {"name", "size", "gzip"} of files held
    rc:files:{logs}:file:7     the bytes of file 7
    rc:files:{logs}:gone       hash: reader -> "finished" or "dropped"
    rc:files:{logs}:freed      list: a token pushed whenever bytes are freed

Every change is one call of ``lua/files.lua``, so Redis itself keeps the limit: the
sender reserves a file's size before copying it, waits (BLPOP on ``freed``) while there
is no room, and a file larger than the limit is refused before anything is sent. A
reader's acknowledgement and the deletion of a file every active reader has finished
are one step, counted in numbers (the book compared its done counter as bytes, so with
10 readers a file went after 2 had read it).

As in the book, announcements go through a group chat (:class:`GroupChat`) whose
members are the sender and the readers; it wakes waiting readers. A reader's place,
though, is kept by the channel (the last file it finished), not by which messages it
fetched, so a reader restarted with the same id continues with the first file it had
not finished. A file it was in the middle of is read again from its start: lines are
delivered at least once, and a finished file never again.

Readers send a heartbeat every ``min(stalled_after / 4, 0.5)`` seconds or so, while
reading or waiting. The sender reports a reader it is waiting for
that has been silent for ``stalled_after`` seconds (a log warning and ``progress``),
and with ``drop_stalled=True`` goes on without it: the files only that reader still
needed are freed, and if it comes back it gets :class:`ReaderDropped`.

Every call to Redis is safe to repeat (appends and acknowledgements name their offset
or file), so both loops log a lost connection, back off and retry until Redis answers
or ``stop()`` returns true. When the sender stops early it releases the channel, and
another sender may continue it with the same readers.
"""

from __future__ import annotations

import codecs
import contextlib
import gzip
import io
import json
import logging
import os
import re
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
from redis.client import NEVER_DECODE

from . import keys, scripts
from .conf import conf
from .connection import REDIS_DOWN, get_client, text
from .exceptions import ChannelBusy, FilesError, InvalidInput, MessagingError, ReaderDropped
from .messaging import GroupChat
from .twins import threaded
from .waiting import ms, new_token, positive_seconds

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

logger = logging.getLogger(__name__)

# The statuses that lua/files.lua returns first.
(OK, NO_CHANNEL, BUSY, NO_ROOM, NOT_A_READER, DROPPED, FINISHED, COMPLETE, FINISHING,
 OTHER_READERS) = range(10)  # fmt: skip

READER_ID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
MAX_CHANNEL_LENGTH = 200
MAX_READERS = 1000
MAX_BLOCK_SIZE = 2**26
# A reader fetches at least this much per GETRANGE: the sender's blocks bound what one
# APPEND adds, not how a finished file is read back, and fewer, larger reads cost less.
MIN_READ_SIZE = 2**20
# How many blocks the sender appends per round trip.
APPENDS_PER_TRIP = 8
# The longest a loop waits before it looks at stop() and sends a heartbeat again.
TICK = 0.5
# The pause after a failed call to Redis, doubled after each failure up to the maximum.
RETRY_FIRST, RETRY_MAX = 0.1, 5.0

T = TypeVar("T")
Stop = Callable[[], bool]
_never: Stop = bool  # (bool() is False: the stop() of a loop nothing stops)
# A chat per channel (read, gone) among the channel's own accounts, not users of the site.
chats = GroupChat(keep_read=False, creates_per_minute=0, accounts=True)


@dataclass(frozen=True, slots=True)
class SendProgress:
    """Where :func:`send_files` is: a frozen snapshot, a new one passed to ``progress`` as
    it goes, the last one returned.

    ``waiting`` is true while the sender waits for readers (for room, or at the end);
    ``stalled`` names the readers it waits for that have been silent too long;
    ``complete`` says every reader finished (or was dropped) and the channel is gone.
    """

    channel: str
    files_total: int
    bytes_total: int
    files_sent: int = 0
    bytes_sent: int = 0
    bytes_in_redis: int = 0
    waiting: bool = False
    stalled: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()
    complete: bool = False
    stopped: bool = False
    elapsed: float = 0.0


@dataclass(frozen=True, slots=True)
class ReceiveProgress:
    """Where :func:`receive_files` is: a frozen snapshot, a new one passed to ``progress``
    as it goes, the last one returned.

    ``bytes_read`` counts the bytes read from Redis (compressed ones, for ``.gz``
    files); ``lines`` the lines of finished files; ``file`` is the file being read.
    """

    channel: str
    reader: str
    files_done: int = 0
    bytes_read: int = 0
    lines: int = 0
    file: str | None = None
    finished: bool = False
    stopped: bool = False
    elapsed: float = 0.0


@dataclass(frozen=True)
class ReceivedFile:
    """A file a reader has read to its end; what ``on_file_done`` receives.

    ``error`` says why a corrupt ``.gz`` file ended early (its lines up to there were
    delivered); it is ``None`` for a file read in full.
    """

    channel: str
    reader: str
    seq: int
    name: str
    size: int
    lines: int
    error: str | None = None


def send_files(
    paths: Iterable[str | os.PathLike[str]],
    *,
    channel: str = "logs",
    readers: int | Sequence[str] = 3,
    limit_bytes: int | None = None,
    block_size: int | None = None,
    stalled_after: float | None = None,
    drop_stalled: bool = False,
    progress: Callable[[SendProgress], object] | None = None,
    stop: Stop | None = None,
) -> SendProgress:
    """Copy files into Redis for ``readers`` and return once every reader has read them.

    ``paths`` are files, or directories that stand for the files in them (name order);
    they are sent in the order given. ``readers`` is a number (ids ``"0"``, ``"1"``,
    ...) or a list of ids. At most ``limit_bytes`` (default ``FILES_LIMIT_BYTES``) of
    file data are held in Redis at once; a file is sent as it was when this call began
    (its size then), in blocks of ``block_size`` bytes (default ``FILES_BLOCK_SIZE``).

    Raises :class:`InvalidInput` for bad arguments, a missing or unreadable path or a
    file larger than the limit, before anything is written; :class:`ChannelBusy` if
    another sender holds the channel. A channel whose sender stopped is continued (its
    readers must be the same). When ``stop()`` returns true, the sender releases the
    channel and returns with ``stopped`` set.
    """
    channel = _channel(channel)
    reader_ids = _reader_ids(readers)
    limit = _size(conf.FILES_LIMIT_BYTES if limit_bytes is None else limit_bytes, "limit_bytes")
    block = _block_size(block_size)
    stalled = positive_seconds(
        conf.FILES_STALLED_AFTER if stalled_after is None else stalled_after, "stalled_after"
    )
    files = _files(paths, limit)
    sender = _Sender(channel, reader_ids, files, limit, block, stalled, drop_stalled)
    return sender.run(progress, stop or _never)


def receive_files(
    *,
    channel: str = "logs",
    reader: str = "0",
    on_line: Callable[[Any], object],
    on_file_done: Callable[[ReceivedFile], object] | None = None,
    encoding: str | None = "utf-8",
    errors: str = "replace",
    block_size: int | None = None,
    progress: Callable[[ReceiveProgress], object] | None = None,
    stop: Stop | None = None,
) -> ReceiveProgress:
    """Read every file sent on ``channel`` as ``reader``; return when the sender is done.

    Waits for the channel if it does not exist yet. Calls ``on_line`` with each line of
    each file, in order, with its line ending (``"\\n"`` only; the last line of a file
    may have none), decoded with ``encoding`` and ``errors``, or as ``bytes`` when
    ``encoding`` is None; then ``on_file_done`` with a :class:`ReceivedFile`. Only
    after that is the file acknowledged: an exception from either callback ends the
    call, and the file is read again when the reader is restarted. ``block_size`` is
    the most read per GETRANGE (default: 1 MiB, or ``FILES_BLOCK_SIZE`` if larger).

    Raises :class:`InvalidInput` if the channel has no such reader, and
    :class:`ReaderDropped` if the sender went on without it. When ``stop()`` returns
    true, returns with ``stopped`` set (the file being read is not acknowledged).
    """
    channel = _channel(channel)
    reader = _reader_id(reader, "reader")
    for name, callback in (("on_line", on_line), ("on_file_done", on_file_done)):
        if callback is not None and not callable(callback):
            raise InvalidInput(name, f"must be callable, not {callback!r}")
    # Looked up here rather than in the middle of the first file.
    for name, lookup, value in (
        ("encoding", codecs.lookup, encoding or "utf-8"),
        ("errors", codecs.lookup_error, errors),
    ):
        try:
            lookup(value)
        except LookupError as exc:
            raise InvalidInput(name, str(exc)) from None
    # A finished file is read back in large pieces unless the caller says otherwise.
    read_size = max(conf.FILES_BLOCK_SIZE, MIN_READ_SIZE)
    if block_size is not None:
        read_size = _block_size(block_size)
    receiver = _Receiver(channel, reader, on_line, on_file_done, encoding, errors, read_size)
    return receiver.run(progress, stop or _never)


asend_files, areceive_files = threaded(send_files), threaded(receive_files)


# The channel's keys and script, and the retry loop both sides share.


class _Channel:
    """The keys of one channel, and ``lua/files.lua`` run on them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.client = get_client()  # it reconnects by itself after a lost connection
        self.meta = keys.key("files", name)
        parts = ("readers", "seen", "files", "gone", "freed")
        self.keys = [self.meta, *(f"{self.meta}:{part}" for part in parts)]
        self.files, self.freed = self.keys[3], self.keys[5]

    def data_key(self, seq: int) -> str:
        return f"{self.meta}:file:{seq}"

    def run(
        self, operation: str, actor: str, *args: scripts.Arg, seqs: Iterable[int] = ()
    ) -> list[Any]:
        """Run one operation; ``seqs`` name the files whose data keys it receives."""
        names = [*self.keys, *(self.data_key(seq) for seq in seqs)]
        return cast(list[Any], scripts.load("files")(self.client, names, [operation, actor, *args]))

    def run_many(self, actor: str, calls: list[tuple[str, int, list[scripts.Arg]]]) -> list[Any]:
        """Several operations, each on one file, in one round trip (in order)."""
        script = scripts.load("files")
        batch = [
            (script, [*self.keys, self.data_key(seq)], [operation, actor, *args])
            for operation, seq, args in calls
        ]
        replies = scripts.run_many(self.client, batch)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies


class _Stopped(Exception):
    """stop() returned true."""


def _retry(call: Callable[[], T], stop: Stop) -> T:
    """``call()``, repeated with back-off while Redis cannot be reached."""
    delay, failures = RETRY_FIRST, 0
    while True:
        if stop():
            raise _Stopped
        try:
            result = call()
        except REDIS_DOWN as exc:
            failures += 1
            logger.warning("Redis cannot be reached (%s); retrying in %.1f s", exc, delay)
            _sleep(delay, stop)
            delay = min(delay * 2, RETRY_MAX)
            continue
        if failures:
            logger.info("Redis answers again, after %d failed attempts", failures)
        return result


def _sleep(seconds: float, stop: Stop) -> None:
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        if stop():
            raise _Stopped
        time.sleep(min(remaining, 0.1))


def _sender_account(channel: str) -> str:
    """The sender's name in the channel's chat."""
    return f"rc-files-sender:{channel}"


def _reader_account(channel: str, reader: str) -> str:
    """A reader's name in the channel's chat: unique, since reader ids have no ":"."""
    return f"rc-files:{reader}:{channel}"


def _chat_text(value: str) -> str:
    return value[: conf.CHAT_MAX_MESSAGE_LENGTH]


# The sender.


class _Sender:
    def __init__(
        self,
        channel: str,
        readers: list[str],
        files: list[tuple[Path, int]],
        limit: int,
        block: int,
        stalled_after: float,
        drop_stalled: bool,
    ) -> None:
        self.channel = _Channel(channel)
        self.readers = readers
        self.files = files
        self.limit = limit
        self.block = block
        self.stalled_after = stalled_after
        self.drop_stalled = drop_stalled
        self.tick = min(TICK, stalled_after / 4)
        self.token = new_token()
        self.account = _sender_account(channel)
        self.chat_id = ""
        self.next_seq = 1
        self.report = SendProgress(channel, len(files), sum(size for _, size in files))

    def run(self, progress: Callable[[SendProgress], object] | None, stop: Stop) -> SendProgress:
        self.progress, self.stop = progress, stop
        self.started = time.monotonic()
        try:
            self._open()
            for path, size in self.files:
                self._send(path, size)
            self._finish()
            while not self.report.complete:
                self._wait_for_readers()
            # The wake-up pushed when the channel completed, if this sender did not pop it.
            _retry(lambda: self.channel.client.delete(self.channel.freed), self.stop)
        except _Stopped:
            self._release()
            self.report = replace(self.report, stopped=True)
        except BaseException:
            self._release()
            raise
        self.report = replace(self.report, waiting=False)
        self.notify()
        return self.report

    def notify(self) -> None:
        self.report = replace(self.report, elapsed=time.monotonic() - self.started)
        if self.progress is not None:
            self.progress(self.report)

    def _call(self, operation: str, *args: scripts.Arg, seqs: Iterable[int] = ()) -> list[Any]:
        """Run one of the sender's operations, as the sender holding the channel."""
        seqs = list(seqs)
        reply = _retry(lambda: self.channel.run(operation, self.token, *args, seqs=seqs), self.stop)
        return self._check(reply, operation)

    def _check(self, reply: list[Any], operation: str) -> list[Any]:
        """Raise when the channel is gone or another sender took it over."""
        if reply[0] == NO_CHANNEL and operation != "status":
            raise FilesError(f"channel {self.channel.name!r} was deleted", self.channel.name)
        if reply[0] == BUSY:
            raise ChannelBusy(
                f"another sender took channel {self.channel.name!r} over, after this one was "
                f"silent for {self.stalled_after:g} s",
                self.channel.name,
            )
        return reply

    def _open(self) -> None:
        name = self.channel.name
        reply = _retry(
            lambda: self.channel.run(
                "open", self.token, self.limit, ms(self.stalled_after), *self.readers
            ),
            self.stop,
        )
        if reply[0] == FINISHING:
            raise ChannelBusy(
                f"channel {name!r} is finishing: its sender sent every file and its readers "
                "are still reading; wait for them, or use another channel",
                name,
            )
        if reply[0] == BUSY:
            raise ChannelBusy(
                f"channel {name!r} has a sender already (heard from {reply[1] / 1000:.1f} s "
                "ago); wait for it, or use another channel",
                name,
            )
        if reply[0] == OTHER_READERS:
            raise InvalidInput(
                "readers",
                f"channel {name!r} exists with the readers {sorted(map(text, reply[1]))}; "
                "a sender that continues it must name the same",
            )
        continued, last_seq, self.chat_id = reply[1], int(reply[2]), text(reply[3])
        self.next_seq = last_seq + 1
        if continued:
            logger.info("Continuing channel %r after its file %d", name, last_seq)
        if not self.chat_id:
            accounts = [_reader_account(name, reader) for reader in self.readers]
            hello = _chat_text(f"Files on channel {name} for readers {', '.join(self.readers)}")
            self.chat_id = _retry(lambda: chats.create(self.account, accounts, hello), self.stop)
            self._call("chat", self.chat_id)

    def _send(self, path: Path, size: int) -> None:
        seq = self.next_seq
        self._reserve(seq, size)
        copied = 0
        with path.open("rb") as source:
            while copied < size:
                # Up to APPENDS_PER_TRIP blocks go in one round trip, in order; a repeat
                # after a lost connection is safe, since each append names its offset.
                calls: list[tuple[str, int, list[scripts.Arg]]] = []
                offset = copied
                while len(calls) < APPENDS_PER_TRIP and offset < size:
                    block = source.read(min(self.block, size - offset))
                    if not block:
                        break
                    calls.append(("append", seq, [seq, offset, block]))
                    offset += len(block)
                if not calls:
                    break
                replies = _retry(partial(self.channel.run_many, self.token, calls), self.stop)
                for reply in replies:
                    self._check(reply, "append")
                self.report = replace(
                    self.report, bytes_sent=self.report.bytes_sent + offset - copied
                )
                copied = offset
                self.notify()
        # Valid text for JSON and the chat, even if the file system's name is not.
        name = path.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        info = json.dumps({"name": name, "size": copied, "gzip": name.endswith(".gz")})
        reply = self._call("announce", seq, info, copied, seqs=[seq])
        self.next_seq += 1
        self.report = replace(
            self.report,
            files_sent=self.report.files_sent + 1,
            bytes_total=self.report.bytes_total - (size - copied),  # the file shrank meanwhile
            bytes_in_redis=int(reply[1]),
        )
        self._tell_readers(f"file {seq}: {json.dumps(name)}")
        self.notify()

    def _reserve(self, seq: int, size: int) -> None:
        while True:
            reply = self._call("reserve", seq, size, seqs=[seq])
            self.report = replace(self.report, bytes_in_redis=int(reply[1]))
            if reply[0] == OK:
                self.report = replace(self.report, waiting=False)
                return
            self._wait_for_readers()

    def _wait_for_readers(self) -> None:
        """Report (or drop) stalled readers, then wait until bytes are freed or a tick."""
        self.report = replace(self.report, waiting=True)
        reply = self._call("status")
        if reply[0] == NO_CHANNEL:
            self.report = replace(self.report, complete=True)
            return
        used, last_seq, finished_by_all, entries = reply[1:]
        self.report = replace(self.report, bytes_in_redis=int(used))
        stalled = [
            (text(entries[i]), int(entries[i + 1]) / 1000, int(entries[i + 2]))
            for i in range(0, len(entries), 3)
        ]
        for reader, silent, left in stalled:
            if reader not in self.report.stalled:
                logger.warning(
                    "Reader %r of channel %r has been silent for %.1f s with %d file(s) to "
                    "finish; %s",
                    reader,
                    self.channel.name,
                    silent,
                    left,
                    "going on without it" if self.drop_stalled else "still waiting for it",
                )
        self.report = replace(self.report, stalled=tuple(reader for reader, _, _ in stalled))
        self.notify()
        if stalled and self.drop_stalled:
            self._drop(self.report.stalled, int(finished_by_all) + 1, int(last_seq))
        if self.report.complete:
            return
        _retry(lambda: self.channel.client.blpop([self.channel.freed], self.tick), self.stop)

    def _drop(self, readers: Sequence[str], first_held: int, last_seq: int) -> None:
        held = range(first_held, last_seq + 1)
        status, dropped = self._call("drop", first_held, *readers, seqs=held)
        for reader in map(text, dropped):
            logger.warning("Dropped reader %r of channel %r", reader, self.channel.name)
            self._leave_chat(_reader_account(self.channel.name, reader))
            self.report = replace(self.report, dropped=(*self.report.dropped, reader))
        stalled = tuple(r for r in self.report.stalled if r not in self.report.dropped)
        self.report = replace(self.report, stalled=stalled, complete=status == COMPLETE)

    def _finish(self) -> None:
        reply = self._call("finish")
        self.report = replace(self.report, complete=reply[0] == COMPLETE)
        self._tell_readers(f"done: {self.report.files_sent} files")
        self._leave_chat(self.account)

    def _tell_readers(self, message: str) -> None:
        """Ring the readers' doorbell; they also look at the channel every tick."""
        try:
            _retry(lambda: chats.send(self.chat_id, self.account, _chat_text(message)), self.stop)
        except MessagingError as exc:
            logger.warning("Channel %r: could not announce %r: %s", self.channel.name, message, exc)

    def _leave_chat(self, account: str) -> None:
        with contextlib.suppress(MessagingError):  # left already
            _retry(lambda: chats.leave(self.chat_id, account), self.stop)
        _retry(lambda: chats.forget(account), self.stop)

    def _release(self) -> None:
        """Let another sender continue the channel (best effort: Redis may be down)."""
        try:
            self.channel.run("release", self.token, seqs=[self.next_seq])
            self.channel.client.delete(self.channel.freed)
        except redis.exceptions.RedisError as exc:
            logger.warning("Could not release channel %r: %s", self.channel.name, exc)


# The readers.


class _Receiver:
    def __init__(
        self,
        channel: str,
        reader: str,
        on_line: Callable[[Any], object],
        on_file_done: Callable[[ReceivedFile], object] | None,
        encoding: str | None,
        errors: str,
        read_size: int,
    ) -> None:
        self.channel = _Channel(channel)
        self.reader = reader
        self.on_line = on_line
        self.on_file_done = on_file_done
        self.encoding = encoding
        self.errors = errors
        self.read_size = read_size
        self.account = _reader_account(channel, reader)
        self.chat_id = ""
        self.joined = False  # whether the channel has answered as this reader's
        self.tick = TICK
        self.last_heartbeat = 0.0
        self.report = ReceiveProgress(channel, reader)

    def run(
        self, progress: Callable[[ReceiveProgress], object] | None, stop: Stop
    ) -> ReceiveProgress:
        self.progress, self.stop = progress, stop
        self.started = time.monotonic()
        try:
            while not self.report.finished:
                self._step()
        except _Stopped:
            self.report = replace(self.report, stopped=True)
        self.report = replace(self.report, file=None)
        self.notify()
        return self.report

    def notify(self) -> None:
        self.report = replace(self.report, elapsed=time.monotonic() - self.started)
        if self.progress is not None:
            self.progress(self.report)

    def _step(self) -> None:
        """Read what is announced, say goodbye when the sender is done, or wait."""
        reply = self.heartbeat()
        if reply[0] == FINISHED:
            self.report = replace(self.report, finished=True)
        elif reply[0] == OK:
            finished, last_seq, state = int(reply[1]), int(reply[2]), text(reply[3])
            if finished < last_seq:
                self._read_files(finished + 1, last_seq)
                return
            if state == "done":
                self._say_goodbye()
                return
        # No channel yet, or nothing new: wait for an announcement, or a tick.
        _retry(lambda: chats.fetch_pending(self.account, wait=self.tick), self.stop)

    def heartbeat(self) -> list[Any]:
        """Tell the channel this reader lives; raise if it was dropped or is unknown."""
        reply = self._call("hello")
        if reply[0] == NOT_A_READER:
            raise InvalidInput(
                "reader",
                f"channel {self.channel.name!r} has the readers "
                f"{sorted(map(text, reply[1]))}, not {self.reader!r}",
            )
        if reply[0] == NO_CHANNEL and self.last_heartbeat == 0:
            logger.info("Reader %r waits for channel %r", self.reader, self.channel.name)
        if reply[0] == OK:
            self.joined = True
            self.chat_id = text(reply[4]) or self.chat_id
            self.tick = min(TICK, int(reply[5]) / 4000)
        self.last_heartbeat = time.monotonic()
        return reply

    def _call(self, operation: str, *args: scripts.Arg, seqs: Iterable[int] = ()) -> list[Any]:
        seqs = list(seqs)
        reply = _retry(
            lambda: self.channel.run(operation, self.reader, *args, seqs=seqs), self.stop
        )
        # A channel cannot finish without a reader it has (it waits for its goodbye),
        # unless the sender dropped it.
        if reply[0] == DROPPED or (reply[0] == NO_CHANNEL and self.joined):
            raise ReaderDropped(
                f"reader {self.reader!r} was dropped from channel {self.channel.name!r}: the "
                "sender went on without it after it stalled, and the files it had not "
                "finished are gone",
                self.channel.name,
            )
        return reply

    def _read_files(self, first: int, last: int) -> None:
        seqs = list(range(first, last + 1))
        infos = _retry(lambda: self.channel.client.hmget(self.channel.files, seqs), self.stop)
        for seq, info in zip(seqs, infos, strict=True):
            if info is None:
                self.heartbeat()  # raises ReaderDropped: the only way it can be gone
                name = self.channel.name
                raise FilesError(f"file {seq} of channel {name!r} is gone", name)
            self._read_file(seq, json.loads(info))

    def _read_file(self, seq: int, info: dict[str, Any]) -> None:
        self.report = replace(self.report, file=info["name"])
        raw = _StoredFile(self, self.channel.data_key(seq), info["size"])
        stream: io.BufferedReader[io.RawIOBase] = io.BufferedReader(raw, self.read_size)
        if info["gzip"]:
            stream = io.BufferedReader(_Gunzip(stream), self.read_size)
        lines: Iterable[Any] = stream
        if self.encoding is not None:
            text = io.TextIOWrapper(stream, self.encoding, self.errors, newline="\n")
            # It reads 8 KiB at a time, and each read below it is one GETRANGE.
            text._CHUNK_SIZE = self.read_size  # type: ignore[attr-defined]
            lines = text
        count, error, on_line = 0, None, self.on_line
        try:
            for count, line in enumerate(lines, 1):  # noqa: B007 - the count is kept
                on_line(line)
        except _Corrupt as exc:
            error = str(exc)
            logger.error(
                "File %d (%s) of channel %r is corrupt after %d lines: %s",
                seq,
                info["name"],
                self.channel.name,
                count,
                error,
            )
        if self.on_file_done is not None:
            self.on_file_done(
                ReceivedFile(
                    self.channel.name, self.reader, seq, info["name"], info["size"], count, error
                )
            )
        self._call("ack", seq, seqs=[seq])
        self.report = replace(
            self.report,
            files_done=self.report.files_done + 1,
            lines=self.report.lines + count,
            file=None,
        )
        self.notify()

    def _say_goodbye(self) -> None:
        """Leave the chat, then tell the channel; the last reader's goodbye deletes it."""
        if self.chat_id:
            with contextlib.suppress(MessagingError):  # left already, before a restart
                _retry(lambda: chats.leave(self.chat_id, self.account), self.stop)
        _retry(lambda: chats.forget(self.account), self.stop)
        self._call("bye")
        self.report = replace(self.report, finished=True)

    def read_block(self, key: str, offset: int, most: int) -> bytes:
        """Up to ``most`` bytes of a stored file; also the heartbeat and stop point."""
        if time.monotonic() - self.last_heartbeat >= self.tick:
            self.heartbeat()
        end = offset + min(most, self.read_size) - 1
        data: bytes = _retry(
            lambda: self.channel.client.execute_command(  # type: ignore[no-untyped-call]
                "GETRANGE", key, offset, end, **{NEVER_DECODE: True}
            ),
            self.stop,
        )
        self.report = replace(self.report, bytes_read=self.report.bytes_read + len(data))
        self.notify()
        return data


class _Corrupt(Exception):
    """A ``.gz`` file could not be decompressed to its end."""


class _StoredFile(io.RawIOBase):
    """A file held in Redis, read block by block with GETRANGE."""

    def __init__(self, receiver: _Receiver, key: str, size: int) -> None:
        self.receiver, self.key, self.size, self.position = receiver, key, size, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        most = min(len(memoryview(buffer)), self.size - self.position)
        if most <= 0:
            return 0
        data = self.receiver.read_block(self.key, self.position, most)
        if not data:
            self.receiver.heartbeat()  # raises ReaderDropped: the only way it can be gone
            raise FilesError(
                f"{self.key} ended at byte {self.position} of {self.size}",
                self.receiver.channel.name,
            )
        memoryview(buffer).cast("B")[: len(data)] = data
        self.position += len(data)
        return len(data)


class _Gunzip(io.RawIOBase):
    """The decompressed bytes of a gzip stream (:mod:`gzip` does the work)."""

    def __init__(self, compressed: io.BufferedReader[io.RawIOBase]) -> None:
        self.file = gzip.GzipFile(fileobj=compressed, mode="rb")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        try:
            return self.file.readinto(buffer)
        except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
            raise _Corrupt(str(exc)) from None


# Validation.


def _channel(value: object) -> str:
    return keys.validate_name(value, "channel", max_length=MAX_CHANNEL_LENGTH)


def _reader_id(value: object, field: str) -> str:
    if not isinstance(value, str) or not READER_ID.fullmatch(value):
        raise InvalidInput(
            field,
            f"a reader id is 1 to 64 letters, digits, '_', '.' or '-', not {value!r}",
        )
    return value


def _reader_ids(value: object) -> list[str]:
    if keys.is_integer(value):
        if not 1 <= value <= MAX_READERS:
            raise InvalidInput("readers", f"must be from 1 to {MAX_READERS}, not {value}")
        return [str(n) for n in range(value)]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidInput("readers", f"must be a number or a list of reader ids, not {value!r}")
    ids = [_reader_id(reader, "readers") for reader in value]
    if not 1 <= len(ids) <= MAX_READERS or len(set(ids)) != len(ids):
        raise InvalidInput("readers", f"must be 1 to {MAX_READERS} distinct ids, not {ids}")
    return ids


def _size(value: object, field: str, most: int | None = None) -> int:
    if not keys.is_integer(value) or value < 1:
        raise InvalidInput(field, f"must be a positive number of bytes, not {value!r}")
    if most is not None and value > most:
        raise InvalidInput(field, f"must be at most {most} bytes, not {value}")
    return value


def _block_size(value: int | None) -> int:
    return _size(conf.FILES_BLOCK_SIZE if value is None else value, "block_size", MAX_BLOCK_SIZE)


def _files(paths: object, limit: int) -> list[tuple[Path, int]]:
    """Each file to send, with its size now; directories stand for their files."""
    if isinstance(paths, (str, bytes, os.PathLike)) or not isinstance(paths, Iterable):
        raise InvalidInput("paths", f"must be a list of paths, not {paths!r}")
    files = []
    for given in paths:
        if not isinstance(given, (str, os.PathLike)):
            raise InvalidInput("paths", f"must be a list of paths, not one of {given!r}")
        path = Path(given)
        if path.is_dir():
            files += sorted(entry for entry in path.iterdir() if entry.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise InvalidInput("paths", f"{str(path)!r} is not a file or a directory")
    if not files:
        raise InvalidInput("paths", "there is no file to send")
    sized = []
    for path in files:
        try:
            with path.open("rb"):
                size = path.stat().st_size
        except OSError as exc:
            raise InvalidInput("paths", f"cannot read {str(path)!r}: {exc.strerror}") from None
        if size > limit:
            raise InvalidInput(
                "paths",
                f"{str(path)!r} is {size} bytes, more than the limit of {limit} bytes held "
                "in Redis at once; raise the limit or split the file",
            )
        sized.append((path, size))
    return sized
