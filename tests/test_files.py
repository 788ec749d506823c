from __future__ import annotations

import gzip
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.test import override_settings
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_components import (
    GroupChat,
    InvalidInput,
    ReceivedFile,
    SendProgress,
    receive_files,
    send_files,
)
from redis_components.embedded import EmbeddedRedis, free_port
from redis_components.exceptions import ChannelBusy, ReaderDropped
from tests.processes import FORK, wait_until

# What is left once a channel is done: the chat id counter that every group chat uses.
CHAT_COUNTER = [b"rc:chat:{next-id}"]
META = "rc:files:{logs}"

# The sum of the lengths of a channel's file keys, read atomically (tests only: KEYS).
# KEYS[1], the channel's meta key, sends it to the node that holds the channel's slot.
HELD = (
    "local n = 0 for _, k in ipairs(redis.call('KEYS', ARGV[1])) do "
    "n = n + redis.call('STRLEN', k) end return n"
)


def lines_of(text: str) -> list[str]:
    """The lines a reader should get: split after each "\\n" only, endings kept."""
    pieces = text.split("\n")
    return [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def sample_texts() -> dict[str, str]:
    """Plain and gzipped files with what tends to break readers, in sending order."""
    return {
        "a.log": "".join(f"2024-05-01 GET /items/{n} {'é' * (n % 7)}€\n" for n in range(25)),
        # A line longer than any block, then CRLF line endings (the "\r" is the line's).
        "b.log.gz": "2024-05-01 " + "x" * 700 + "\n"
        + "".join(f"2024-05-02 GET /日本/{n}\r\n" for n in range(40)),
        "c.log": "",
        "d.log": "".join(f"2024-05-02 POST /buy/{n}\n" for n in range(30))
        + "2024-05-03 the last line has no newline",
        # Two gzip members in one file, and no final newline either.
        "e.log.gz": "2024-05-03 first member\n" + "2024-05-03 second member",
        "f.log": "\n\n2024-05-04 after two empty lines\n",
    }  # fmt: skip


def write_files(folder: Path, texts: dict[str, str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in texts.items():
        data = text.encode()
        if name == "e.log.gz":
            first, second = text.split("\n", 1)
            data = gzip.compress((first + "\n").encode()) + gzip.compress(second.encode())
        elif name.endswith(".gz"):
            data = gzip.compress(data)
        path = folder / name
        path.write_bytes(data)
        paths.append(path)
    return paths


def read_into(out: Path, reader: str, block_size: int = 50, **options: Any) -> None:
    """A reader that records, per file, the lines it got, then writes them to ``out``."""
    files: list[list[Any]] = []
    lines: list[str] = []

    def done(file: ReceivedFile) -> None:
        files.append([file.name, lines.copy(), file.lines, file.error])
        lines.clear()

    receive_files(
        reader=reader, on_line=lines.append, on_file_done=done, block_size=block_size, **options
    )
    (out / f"reader-{reader}.json").write_text(json.dumps(files))


def received(out: Path, reader: str) -> list[list[Any]]:
    result: list[list[Any]] = json.loads((out / f"reader-{reader}.json").read_text())
    return result


def expected(texts: dict[str, str]) -> list[list[Any]]:
    return [[name, lines_of(text), len(lines_of(text)), None] for name, text in texts.items()]


# The processes the running test started: any left alive when it ends is killed (a reader
# that lost its channel waits for the next one, and a stopped one for SIGCONT), so that
# a failed test neither disturbs the next nor holds up the session's exit.
_started: list[Any] = []


@pytest.fixture(autouse=True)
def _kill_leftovers() -> Iterator[None]:
    yield
    while _started:
        process = _started.pop()
        if process.is_alive():
            process.kill()
            process.join()


def start(target: Callable[..., object], *args: Any) -> Any:
    process = FORK.Process(target=target, args=args)
    process.start()
    _started.append(process)
    return process


def finish(processes: list[Any], timeout: float = 60) -> list[int | None]:
    """Each process's exit code, once all end or ``timeout`` seconds (for them all) pass:
    those still alive then are killed."""
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()
    return [process.exitcode for process in processes]


def in_thread(target: Callable[..., object], *args: Any, **kwargs: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True)
    thread.start()
    return thread


class Sampler:
    """Samples the bytes a channel holds, in a thread, while a test runs."""

    def __init__(self, r: redis.Redis) -> None:
        self.r, self.samples, self.used = r, [0], [0]
        self.running = True
        self.thread = in_thread(self.run)

    def run(self) -> None:
        while self.running:
            self.samples.append(int(self.r.eval(HELD, 1, META, "rc:files:{logs}:file:*")))
            self.used.append(int(self.r.hget(META, "used") or 0))
            time.sleep(0.002)

    def stop(self) -> None:
        self.running = False
        self.thread.join()


# The book's scenario, with real processes


def test_three_readers_get_every_line_once_and_the_limit_holds(
    redis_mode: str, r: redis.Redis, tmp_path: Path
) -> None:
    texts = sample_texts()
    paths = write_files(tmp_path / "logs", texts)
    largest = max(path.stat().st_size for path in paths)
    limit = largest + 50  # less than the total: the sender must wait for readers
    assert limit < sum(path.stat().st_size for path in paths)

    readers = [start(read_into, tmp_path, reader) for reader in "012"]
    sampler = Sampler(r)
    seen: list[SendProgress] = []
    report = send_files(paths, readers=3, limit_bytes=limit, block_size=64, progress=seen.append)
    codes = finish(readers)
    sampler.stop()

    assert codes == [0, 0, 0]
    for reader in "012":
        assert received(tmp_path, reader) == expected(texts)
    assert report.complete
    assert report.files_sent == len(texts)
    assert report.bytes_sent == sum(path.stat().st_size for path in paths)
    assert any(progress.waiting for progress in seen)  # the limit did make it wait
    assert max(sampler.samples) > largest // 2  # the sampler saw files being held
    assert max(sampler.samples) <= limit
    assert max(sampler.used) <= limit
    assert sorted(r.keys()) == CHAT_COUNTER  # every key of the channel and its chat is gone


def test_readers_that_start_after_the_sender_get_everything(
    redis_mode: str, r: redis.Redis, tmp_path: Path
) -> None:
    texts = sample_texts()
    paths = write_files(tmp_path / "logs", texts)
    sender = in_thread(send_files, [tmp_path / "logs"], readers=["x", "y"], block_size=100)
    wait_until(lambda: r.exists(META))
    for reader in ("x", "y"):
        read_into(tmp_path, reader, block_size=10_000)
    sender.join(10)
    assert not sender.is_alive()
    # A directory stands for its files, sent in name order.
    assert [path.name for path in paths] == sorted(texts)
    for reader in ("x", "y"):
        assert received(tmp_path, reader) == expected(texts)
    assert sorted(r.keys()) == CHAT_COUNTER


def test_bytes_lines_are_the_files_bytes_exactly(tmp_path: Path) -> None:
    data = b"\xff\xfe not utf-8\n\r\nline\x00with nul\n" + b"z" * 300 + b"\nend"
    (tmp_path / "raw.bin").write_bytes(data)
    (tmp_path / "raw.bin.gz").write_bytes(gzip.compress(data))
    got: list[bytes] = []
    sender = in_thread(send_files, [tmp_path / "raw.bin", tmp_path / "raw.bin.gz"], readers=1)
    receive_files(on_line=got.append, encoding=None, block_size=7)
    sender.join(10)
    assert (
        got
        == [b"\xff\xfe not utf-8\n", b"\r\n", b"line\x00with nul\n", b"z" * 300 + b"\n", b"end"] * 2
    )


def test_undecodable_bytes_are_replaced_by_default(tmp_path: Path) -> None:
    (tmp_path / "bad.log").write_bytes(b"caf\xe9\nok\n")
    got: list[str] = []
    sender = in_thread(send_files, [tmp_path / "bad.log"], readers=1)
    receive_files(on_line=got.append)
    sender.join(10)
    assert got == ["caf\ufffd\n", "ok\n"]


def test_characters_cut_by_a_block_come_out_whole(tmp_path: Path) -> None:
    text = "é€日本😀\n" * 20  # 2, 3, 3, 3 and 4 bytes: 3-byte blocks cut most of them
    (tmp_path / "utf8.log").write_text(text, encoding="utf-8")
    got: list[str] = []
    sender = in_thread(send_files, [tmp_path / "utf8.log"], readers=1, block_size=3)
    receive_files(on_line=got.append, block_size=3)
    sender.join(10)
    assert got == lines_of(text)


def test_a_corrupt_gz_file_is_reported_and_the_reader_goes_on(
    r: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    whole = gzip.compress("".join(f"line {n}\n" for n in range(2000)).encode())
    (tmp_path / "1-truncated.log.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "2-not-gzip.log.gz").write_bytes(b"plain text\n")
    (tmp_path / "3-fine.log").write_text("fine\n")
    files: list[ReceivedFile] = []
    lines: list[str] = []
    sender = in_thread(send_files, [tmp_path], readers=1, block_size=100)
    receive_files(on_line=lines.append, on_file_done=files.append, block_size=100)
    sender.join(10)

    truncated, not_gzip, fine = files
    assert truncated.error is not None
    assert not_gzip.error is not None
    assert fine.error is None
    assert 0 < truncated.lines < 2000  # what could be decompressed was delivered, in order
    assert lines[: truncated.lines] == [f"line {n}\n" for n in range(truncated.lines)]
    assert not_gzip.lines == 0
    assert lines[-1] == "fine\n"
    assert "File 1 (1-truncated.log.gz) of channel 'logs' is corrupt" in caplog.text
    assert r.keys() == CHAT_COUNTER


def test_any_file_name_is_passed_on(tmp_path: Path) -> None:
    (tmp_path / "日本😀 a\tb.log").write_text("a\n")
    (tmp_path / os.fsdecode(b"bad\xff.log")).write_text("b\n")  # not UTF-8
    names: list[str] = []
    sender = in_thread(send_files, [tmp_path], readers=1)
    receive_files(on_line=print, on_file_done=lambda file: names.append(file.name))
    sender.join(10)
    assert sorted(names) == ["bad\ufffd.log", "日本😀 a\tb.log"]


# Bad input


def one_file(folder: Path, size: int = 10) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "one.log"
    path.write_bytes(b"x" * (size - 1) + b"\n")
    return path


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda path: send_files([path], limit_bytes=9), "paths"),  # larger than the limit
        (lambda path: send_files([path.parent / "missing.log"]), "paths"),
        (lambda path: send_files([]), "paths"),
        (lambda path: send_files(str(path)), "paths"),
        (lambda path: send_files([7]), "paths"),
        (lambda path: send_files([path], channel=""), "channel"),
        (lambda path: send_files([path], channel="x" * 201), "channel"),
        (lambda path: send_files([path], readers=0), "readers"),
        (lambda path: send_files([path], readers=["a", "a"]), "readers"),
        (lambda path: send_files([path], readers=["a:b"]), "readers"),
        (lambda path: send_files([path], readers="3"), "readers"),
        (lambda path: send_files([path], limit_bytes=0), "limit_bytes"),
        (lambda path: send_files([path], limit_bytes=True), "limit_bytes"),
        (lambda path: send_files([path], block_size=2**27), "block_size"),
        (lambda path: send_files([path], stalled_after=0), "stalled_after"),
        (lambda path: receive_files(reader="", on_line=print), "reader"),
        (lambda path: receive_files(channel="a\nb", on_line=print), "channel"),
        (lambda path: receive_files(on_line=print, block_size=-1), "block_size"),
        (lambda path: receive_files(on_line="print"), "on_line"),
        (lambda path: receive_files(on_line=print, encoding="klingon"), "encoding"),
        (lambda path: receive_files(on_line=print, errors="shrug"), "errors"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    call: Callable[[Path], object], field: str, r: redis.Redis, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as caught:
        call(one_file(tmp_path))
    assert caught.value.field == field
    assert r.keys() == []


def test_a_file_larger_than_the_limit_is_refused_with_a_clear_error(
    r: redis.Redis, tmp_path: Path
) -> None:
    small = one_file(tmp_path / "small", 10)
    large = one_file(tmp_path / "large", 1001)
    with pytest.raises(InvalidInput, match="1001 bytes, more than the limit of 1000"):
        send_files([small, large], limit_bytes=1000)
    assert r.keys() == []  # not even the small file was sent


def test_a_reader_the_channel_does_not_have_is_refused(r: redis.Redis, tmp_path: Path) -> None:
    sender = in_thread(send_files, [one_file(tmp_path)], readers=2)
    wait_until(lambda: r.exists(META))
    with pytest.raises(InvalidInput, match=r"has the readers \['0', '1'\], not '7'"):
        receive_files(reader="7", on_line=print)
    for reader in "01":
        receive_files(reader=reader, on_line=print)
    sender.join(10)
    assert r.keys() == CHAT_COUNTER


# Senders: one at a time, and continuing


def test_one_sender_at_a_time(r: redis.Redis, tmp_path: Path) -> None:
    paths = write_files(tmp_path, {"1.log": "a\n", "2.log": "b\n"})
    sender = in_thread(send_files, paths, readers=1, limit_bytes=2)
    wait_until(lambda: r.hget(META, "last_seq") == b"1")  # and waits for room for file 2
    with pytest.raises(ChannelBusy, match="'logs' has a sender already"):
        send_files(paths, readers=1)

    release = threading.Event()
    reader = in_thread(
        receive_files, on_line=print, on_file_done=lambda file: file.seq < 2 or release.wait(10)
    )
    wait_until(lambda: r.hget(META, "state") == b"done")
    with pytest.raises(ChannelBusy, match="'logs' is finishing"):
        send_files(paths, readers=1)
    release.set()
    reader.join(10)
    sender.join(10)
    assert r.keys() == CHAT_COUNTER


def test_a_stopped_sender_releases_and_another_continues(r: redis.Redis, tmp_path: Path) -> None:
    texts = sample_texts()
    paths = write_files(tmp_path / "logs", texts)
    stopping = threading.Event()
    first = send_files(
        paths, readers=2, block_size=64, stop=stopping.is_set,
        progress=lambda p: p.files_sent == 2 and stopping.set(),
    )  # fmt: skip
    assert first.stopped
    assert first.files_sent == 2
    assert r.hget(META, "sender") is None  # released
    with pytest.raises(InvalidInput, match="must name the same"):
        send_files(paths[2:], readers=3)

    readers = [start(read_into, tmp_path, reader) for reader in "01"]
    second = send_files(paths[2:], readers=2, block_size=64)
    assert finish(readers) == [0, 0]
    assert second.complete
    assert second.files_sent == len(texts) - 2
    for reader in "01":
        assert received(tmp_path, reader) == expected(texts)
    assert r.keys() == CHAT_COUNTER


def test_a_silent_sender_is_taken_over_and_told(r: redis.Redis, tmp_path: Path) -> None:
    paths = write_files(tmp_path, {"1.log": "a\n", "2.log": "b\n", "3.log": "c\n"})
    release, refused = threading.Event(), []

    def first() -> None:
        try:  # it stalls after its first file, in progress()
            send_files(
                paths[:2], readers=1, stalled_after=0.3,
                progress=lambda p: p.files_sent == 1 and release.wait(10),
            )  # fmt: skip
        except ChannelBusy as exc:
            refused.append(str(exc))

    stalled = in_thread(first)
    wait_until(lambda: r.hget(META, "last_seq") == b"1")
    wait_until(lambda: 1000 * r.time()[0] - int(r.hget(META, "sender_seen") or 0) > 300)
    second = in_thread(send_files, paths[2:], readers=1)
    wait_until(lambda: r.hget(META, "last_seq") == b"2")  # the second sent its file
    release.set()
    stalled.join(10)
    assert refused == [
        "another sender took channel 'logs' over, after this one was silent for 0.3 s"
    ]
    names: list[str] = []
    receive_files(on_line=print, on_file_done=lambda file: names.append(file.name))
    second.join(10)
    assert names == ["1.log", "3.log"]
    assert r.keys() == CHAT_COUNTER


# Stalled readers


def test_a_stalled_reader_is_reported_and_the_sender_keeps_waiting(
    r: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reports: list[SendProgress] = []
    stop_reader = threading.Event()
    reader = in_thread(receive_files, reader="0", on_line=print, stop=stop_reader.is_set)
    report = send_files(
        [one_file(tmp_path)], readers=2, stalled_after=0.3,
        progress=reports.append, stop=lambda: bool(reports and reports[-1].stalled),
    )  # fmt: skip
    stop_reader.set()
    reader.join(10)
    assert report.stopped
    assert report.stalled == ("1",)
    assert report.dropped == ()
    assert "Reader '1' of channel 'logs' has been silent" in caplog.text
    assert "still waiting for it" in caplog.text
    assert r.zscore(f"{META}:readers", "1") == 0  # still a reader: it may come back


def stall_in_file(out: Path, reader: str, seq: int) -> None:
    """A reader that stops (SIGSTOP) at the first line of file ``seq``."""

    def on_line(line: str) -> None:
        if line == f"file {seq} line 0\n":
            os.kill(os.getpid(), signal.SIGSTOP)

    try:
        receive_files(reader=reader, on_line=on_line, block_size=50)
    except ReaderDropped:
        os._exit(3)


def test_a_stalled_reader_process_is_dropped_when_told(
    r: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    texts = {f"{n}.log": "".join(f"file {n} line {m}\n" for m in range(20)) for n in range(1, 5)}
    paths = write_files(tmp_path / "logs", texts)
    readers = [start(read_into, tmp_path, reader) for reader in "01"]
    stalling = start(stall_in_file, tmp_path, "2", 2)
    reports: list[SendProgress] = []
    limit = 2 * paths[0].stat().st_size  # files 3 and 4 need the room of files 1 and 2
    # Silent for 3 s: a reader process may take over a second to start on a busy machine,
    # and only the one that stops may be taken for stalled.
    report = send_files(
        paths, readers=3, limit_bytes=limit, stalled_after=3, drop_stalled=True,
        progress=reports.append,
    )  # fmt: skip
    assert finish(readers) == [0, 0]
    for reader in "01":
        assert received(tmp_path, reader) == expected(texts)
    assert report.complete
    assert report.dropped == ("2",)
    assert any(progress.stalled == ("2",) for progress in reports)
    assert "Dropped reader '2'" in caplog.text
    assert r.keys() == CHAT_COUNTER

    # Slowed down, it may not have stopped yet: a SIGCONT before its SIGSTOP would leave
    # it stopped for good. Once stopped (or gone, having found itself dropped first):
    wait_until(lambda: not stalling.is_alive() or _stopped(stalling.pid))
    os.kill(stalling.pid, signal.SIGCONT)  # it wakes up to find itself dropped
    assert finish([stalling]) == [3]


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (by a signal), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0] == "T"


def test_a_dropped_reader_that_comes_back_is_told(r: redis.Redis, tmp_path: Path) -> None:
    paths = write_files(tmp_path, {"1.log": "a\n", "2.log": "b\n"})
    release = threading.Event()
    reader = in_thread(receive_files, reader="0", on_line=print)
    # Room for one file: the sender waits for both readers to finish file 1, drops
    # reader 1, and then, still sending, blocks in progress() until released.
    sender = in_thread(
        send_files, paths, readers=2, limit_bytes=2, stalled_after=0.3, drop_stalled=True,
        progress=lambda progress: progress.dropped and release.wait(10),
    )  # fmt: skip
    wait_until(lambda: r.hget(f"{META}:gone", "1") == b"dropped")
    with pytest.raises(ReaderDropped, match="reader '1' was dropped from channel 'logs'"):
        receive_files(reader="1", on_line=print)
    release.set()
    reader.join(10)
    sender.join(10)
    assert r.keys() == CHAT_COUNTER


# Resuming


def die_in_file(out: Path, reader: str, seq: int, line: int) -> None:
    """A reader that records each file it finishes, and is killed in file ``seq``."""

    def on_line(text: str) -> None:
        if text == f"file {seq} line {line}\n":
            os.kill(os.getpid(), signal.SIGKILL)

    def done(file: ReceivedFile) -> None:
        with open(out / f"{reader}-{os.getpid()}.done", "a") as record:
            record.write(f"{file.name} {file.lines}\n")

    receive_files(reader=reader, on_line=on_line, on_file_done=done, block_size=40)


def test_a_reader_restarted_with_its_id_resumes(r: redis.Redis, tmp_path: Path) -> None:
    texts = {f"{n}.log": "".join(f"file {n} line {m}\n" for m in range(20)) for n in range(1, 5)}
    paths = write_files(tmp_path / "logs", texts)
    other = start(read_into, tmp_path, "0")
    sender = in_thread(send_files, paths, readers=2, block_size=64)
    killed = start(die_in_file, tmp_path, "1", 3, 10)
    assert finish([killed]) == [-signal.SIGKILL]
    [before] = tmp_path.glob(f"1-{killed.pid}.done")
    assert before.read_text() == "1.log 20\n2.log 20\n"

    restarted = start(die_in_file, tmp_path, "1", 99, 0)
    assert finish([restarted, other]) == [0, 0]
    sender.join(10)
    [after] = tmp_path.glob(f"1-{restarted.pid}.done")
    # File 3, interrupted, is read again from its start; files 1 and 2 never again.
    assert after.read_text() == "3.log 20\n4.log 20\n"
    assert received(tmp_path, "0") == expected(texts)
    assert r.keys() == CHAT_COUNTER


def test_a_stopped_reader_resumes_with_the_file_it_was_reading(tmp_path: Path) -> None:
    texts = {"1.log": "a\nb\n", "2.log": "c\nd\n"}
    sender = in_thread(send_files, write_files(tmp_path, texts), readers=1, block_size=2)
    lines: list[str] = []
    first = receive_files(on_line=lines.append, block_size=2, stop=lambda: lines[-1:] == ["c\n"])
    assert first.stopped
    assert first.files_done == 1
    second = receive_files(on_line=lines.append, block_size=2)
    sender.join(10)
    assert second.finished
    assert second.files_done == 1
    assert lines == ["a\n", "b\n", "c\n", "c\n", "d\n"]


# Connections


def test_a_reader_waits_for_redis_to_come_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="redis_components.files")
    port = free_port()
    # One server of its own (also when the suite runs on a cluster), without redis-py's
    # own retries (10 by default), so that the reader's show.
    cache = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": f"redis://127.0.0.1:{port}/0",
        "OPTIONS": {"CONNECTION_POOL_KWARGS": {"retry": Retry(NoBackoff(), 0)}},
    }
    with override_settings(CACHES={"default": cache}):
        lines: list[str] = []
        reader = in_thread(receive_files, on_line=lines.append)
        wait_until(lambda: "Redis cannot be reached" in caplog.text)
        with EmbeddedRedis(port=port):
            send_files([one_file(tmp_path)], readers=1)
            reader.join(10)
        assert lines == ["x" * 9 + "\n"]
        assert "Redis answers again" in caplog.text


def test_every_key_of_a_channel_shares_its_hash_tag(r: redis.Redis, tmp_path: Path) -> None:
    paths = write_files(tmp_path, sample_texts())
    sender = in_thread(send_files, paths, channel="a{b}c", readers=1)
    wait_until(lambda: r.hget("rc:files:{a%7Bb%7Dc}", "state") == b"done")
    names = [key.decode() for key in r.keys("rc:files:*")]
    assert len(names) > 3
    assert all(name.startswith("rc:files:{a%7Bb%7Dc}") for name in names)
    receive_files(channel="a{b}c", on_line=print)
    sender.join(10)


def test_the_chat_announces_the_files(tmp_path: Path) -> None:
    paths = write_files(tmp_path, {"x.log": "1\n", "y.log.gz": "2\n"})
    sender = in_thread(send_files, paths, readers=1)
    messages: list[str] = []
    while not messages or not messages[-1].startswith("done"):
        for chat in GroupChat(accounts=True).fetch_pending("rc-files:0:logs", wait=1):
            messages += [message.message for message in chat.messages]
    assert messages[1:] == ['file 1: "x.log"', 'file 2: "y.log.gz"', "done: 2 files"]
    receive_files(on_line=print)
    sender.join(10)


# Settings


def test_the_settings_are_the_defaults(tmp_path: Path) -> None:
    path = one_file(tmp_path, 10)
    with (
        override_settings(REDIS_COMPONENTS={"FILES_LIMIT_BYTES": 9}),
        pytest.raises(InvalidInput, match="more than the limit of 9 bytes"),
    ):
        send_files([path])


@pytest.mark.parametrize(
    ("name", "value"),
    [("FILES_LIMIT_BYTES", 0), ("FILES_BLOCK_SIZE", 1.5), ("FILES_STALLED_AFTER", -1)],
)
def test_the_checks_refuse_bad_settings(name: str, value: object) -> None:
    from redis_components.checks import check_settings

    with override_settings(REDIS_COMPONENTS={name: value}):
        assert [message.id for message in check_settings()] == ["redis_components.E005"]
