from __future__ import annotations

import argparse
import io
import logging
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import redis
from django.core.management import call_command, load_command_class
from django.core.management.base import CommandError, OutputWrapper
from django.test import override_settings

from demo_project.marketplace.logs import requests_per_day
from redis_components.files import ReceiveProgress, SendProgress
from redis_components.management.base import redis_address, without_password
from redis_components.management.commands._console import (
    ProgressLine,
    configure_logging,
    receiver_line,
    sender_line,
    size,
    stop_on_signals,
)
from tests.settings import sentinel_caches
from tests.test_files import one_file, write_files

ROOT = Path(__file__).resolve().parent.parent
HANDLER = "demo_project.marketplace.logs.RequestsPerDay"
PRINT = "builtins.print"


def manage(*arguments: str) -> subprocess.Popen[str]:
    """``manage.py <arguments>`` in a new process, on the test server (see conftest)."""
    return subprocess.Popen(
        [sys.executable, "-m", "django", *arguments, "--settings=tests.settings"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def access_logs(folder: Path) -> tuple[list[Path], Counter[str]]:
    """Four access logs in which days span files, and the true count per day."""
    days = ["2024-05-01"] * 30 + ["2024-05-02"] * 45 + ["2024-05-03"] * 25 + ["2024-05-04"] * 20
    lines = [f"{day}T12:00:{n % 60:02d} GET /items/{n} 200\n" for n, day in enumerate(days)]
    texts = {
        "access.log.4.gz": "".join(lines[:35]),
        "access.log.3": "".join(lines[35:70]),
        "access.log.2.gz": "".join(lines[70:100]),
        "access.log.1": "".join(lines[100:]).rstrip("\n"),  # no final newline
    }
    return write_files(folder, texts), Counter(days)


def test_the_commands_distribute_files_and_the_example_counts_per_day(
    r: redis.Redis, tmp_path: Path
) -> None:
    paths, truth = access_logs(tmp_path / "logs")
    readers = [
        manage("rc_files_receive", "--reader", reader, "--handler", HANDLER, "--block-size", "1K")
        for reader in "012"
    ]
    out = io.StringIO()
    call_command(
        "rc_files_send", *map(str, paths), "--readers", "3", "--limit", "3KiB",
        "--block-size", "256", stdout=out,
    )  # fmt: skip
    outputs = [reader.communicate(timeout=60) for reader in readers]

    assert [reader.returncode for reader in readers] == [0, 0, 0], outputs
    assert "Sent 4 files" in out.getvalue()
    for reader, (stdout, _) in zip("012", outputs, strict=True):
        assert f"Reader {reader} read 4 files" in stdout
        # Days whose lines span two files are added up, not overwritten (the book's bug).
        assert requests_per_day(reader) == truth
    r.delete(*(f"demo:requests-per-day:{{{reader}}}" for reader in "012"))
    assert r.keys() == [b"rc:chat:{next-id}"]


def test_a_reader_stops_on_sigterm_and_says_how_to_continue(r: redis.Redis) -> None:
    reader = manage("rc_files_receive", "--reader", "4", "--handler", HANDLER)
    assert reader.stderr is not None
    # Once it says it waits, its loop runs (and its signal handlers are in place).
    for line in reader.stderr:
        if "Reader '4' waits for channel 'logs'" in line:
            break
    else:
        pytest.fail("the reader ended before it waited for its channel")
    reader.send_signal(signal.SIGTERM)
    _, stderr = reader.communicate(timeout=30)
    assert reader.returncode == 130
    assert "Stopped after 0 files; run again with --reader 4 to continue." in stderr


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["rc_files_send", "{big}", "--limit", "100"], "more than the limit of 100 bytes"),
        (["rc_files_send", "{big}", "--limit", "lots"], "'lots' is not a size"),
        (["rc_files_send", "{big}", "--readers", "a,a"], "readers: must be 1 to"),
        (["rc_files_receive", "--handler", "no.such.thing"], "cannot import 'no.such.thing'"),
        (["rc_files_receive", "--handler", "os.sep"], "'os.sep' is not callable"),
        (
            ["rc_files_receive", "--handler", "builtins.print", "--reader", "a b"],
            "reader: a reader id",
        ),
        (
            ["rc_files_receive", "--handler", "builtins.print", "--encoding", "nope"],
            "unknown encoding",
        ),
    ],
)
def test_the_commands_refuse_bad_input_clearly(
    arguments: list[str], message: str, r: redis.Redis, tmp_path: Path
) -> None:
    big = one_file(tmp_path, 200)
    with pytest.raises(CommandError, match=message):
        call_command(*(str(big) if a == "{big}" else a for a in arguments))
    assert r.keys() == []


@pytest.mark.parametrize("name", ["rc_files_send", "rc_files_receive"])
def test_help_explains_the_command(name: str) -> None:
    command = load_command_class("redis_components", name)
    text = command.create_parser("manage.py", name).format_help()
    assert "Redis" in text
    assert "--channel" in text
    assert ("--limit" in text) == (name == "rc_files_send")
    assert ("--handler" in text) == (name == "rc_files_receive")


# The console helpers


@pytest.mark.parametrize(
    ("text", "expected"),
    [("131072", 131072), ("1GiB", 2**30), ("500MB", 500 * 10**6), ("1.5k", 1536), ("2 m", 2**21)],
)
def test_sizes_read_like_people_write_them(text: str, expected: int) -> None:
    assert size(text) == expected


@pytest.mark.parametrize("text", ["", "1 GiBs", "-1", "1e3", "MB"])
def test_a_bad_size_is_refused(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        size(text)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_progress_line_is_redrawn_in_place() -> None:
    stream = Terminal()
    line = ProgressLine(OutputWrapper(stream), redraw_every=0)
    line.show("a longer line")
    line.show("short")
    line.show("done", final=True)
    assert stream.getvalue() == "\ra longer line\rshort        \rdone \n"


def test_elsewhere_the_progress_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="redis_components.files")
    stream = io.StringIO()
    line = ProgressLine(OutputWrapper(stream), log_every=3600)
    line.show("too soon")
    line.show("the end", final=True)
    assert stream.getvalue() == ""
    assert [record.getMessage() for record in caplog.records] == ["the end"]


def test_the_progress_lines_say_files_bytes_and_rate() -> None:
    sending = SendProgress(
        "logs", 4, 200_000_000, files_sent=1, bytes_sent=50_000_000, bytes_in_redis=10**6,
        waiting=True, stalled=("2",), elapsed=2.0,
    )  # fmt: skip
    assert sender_line(sending) == (
        "[#####...............]  25%  1/4 files  50.0 MB of 200.0 MB  25.0 MB/s  "
        "in Redis 1.0 MB  waiting for readers  stalled: 2"
    )
    receiving = ReceiveProgress(
        "logs", "0", files_done=3, bytes_read=3_000_000, lines=40_000, file="a.log", elapsed=0.5
    )
    assert receiver_line(receiving) == (
        "reader 0: 3 files  3.0 MB  40,000 lines  6.0 MB/s  reading a.log"
    )


def test_logging_is_configured_only_if_nothing_else_did(monkeypatch: pytest.MonkeyPatch) -> None:
    package = logging.getLogger("redis_components")
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(package, "handlers", [])
    monkeypatch.setattr(package, "level", package.level)
    configure_logging(1)
    assert len(package.handlers) == 1
    assert package.level == logging.INFO
    configure_logging(2)  # configured now: left alone
    assert len(package.handlers) == 1
    assert package.level == logging.INFO


def test_signals_only_set_the_flag_and_the_handlers_come_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals() as stop:
        assert not stop()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop()
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_address_that_commands_name_hides_passwords() -> None:
    assert without_password("redis://:s3cret@10.0.0.1:6379/0") == "redis://:***@10.0.0.1:6379/0"
    assert (
        without_password("rediss://app:p@ss@h/1?password=p&ssl_cert_reqs=none")
        == "rediss://app:***@h/1?password=***&ssl_cert_reqs=none"
    )
    for untouched in ("redis://app@h:6380/0", "unix:///run/redis.sock?db=2"):
        assert without_password(untouched) == untouched
    with override_settings(CACHES=sentinel_caches("main", [("10.0.0.5", 26379)])):
        assert redis_address() == (
            "redis://main/0 through the sentinels 10.0.0.5:26379 (CACHES['default'])"
        )
