"""`manage.py rc_files_send`: copy files into Redis for the readers of a channel."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from redis_components.exceptions import FilesError, InvalidInput
from redis_components.files import send_files

from ..base import RedisCommand
from ._console import (
    ProgressLine,
    configure_logging,
    megabytes,
    sender_line,
    size,
    stop_on_signals,
)


def readers(value: str) -> int | list[str]:
    """``3`` means readers 0, 1 and 2; ``a,b`` names them."""
    return int(value) if value.isdigit() else [name.strip() for name in value.split(",")]


class Command(RedisCommand):
    help = (
        "Copy files into Redis for the readers of a channel (Redis in Action 6.6). Each "
        "file is announced in the channel's chat; every reader (manage.py "
        "rc_files_receive) reads every file, and a file is deleted once all of them have "
        "finished it. At most --limit bytes are held in Redis at once: the sender waits "
        "for readers to free room, and refuses a larger file before sending anything. "
        "It returns when every reader has finished, and reports a reader silent for "
        "--stalled-after seconds (--drop-stalled goes on without it). Ctrl-C stops it "
        "early; running it again on the channel continues there."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "paths",
            nargs="+",
            metavar="PATH",
            help="files to send, in this order; a directory stands for its files, by name",
        )
        parser.add_argument("--channel", default="logs", help="the channel (default: logs)")
        parser.add_argument(
            "--readers",
            type=readers,
            default=3,
            help="how many readers (ids 0, 1, ...) or their ids, comma-separated (default: 3)",
        )
        parser.add_argument(
            "--limit",
            type=size,
            metavar="SIZE",
            help="the most bytes held in Redis at once, e.g. 1GiB or 200MB "
            "(default: the FILES_LIMIT_BYTES setting, 1 GiB)",
        )
        parser.add_argument(
            "--block-size",
            type=size,
            metavar="SIZE",
            help="bytes per APPEND (default: the FILES_BLOCK_SIZE setting, 128KiB)",
        )
        parser.add_argument(
            "--stalled-after",
            type=float,
            metavar="SECONDS",
            help="report a reader silent this long (default: FILES_STALLED_AFTER, 60)",
        )
        parser.add_argument(
            "--drop-stalled",
            action="store_true",
            help="go on without a stalled reader instead of waiting for it",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        line = ProgressLine(self.stdout)
        with stop_on_signals() as stop:
            try:
                report = send_files(
                    options["paths"],
                    channel=options["channel"],
                    readers=options["readers"],
                    limit_bytes=options["limit"],
                    block_size=options["block_size"],
                    stalled_after=options["stalled_after"],
                    drop_stalled=options["drop_stalled"],
                    progress=lambda progress: line.show(sender_line(progress)),
                    stop=stop,
                )
            except (InvalidInput, FilesError) as exc:
                raise CommandError(str(exc)) from None
        line.show(sender_line(report), final=True)
        if report.stopped:
            raise CommandError(
                f"Stopped after {report.files_sent} of {report.files_total} files; the channel "
                "waits for a sender to continue it.",
                returncode=130,
            )
        dropped = f"; dropped readers: {', '.join(report.dropped)}" if report.dropped else ""
        self.stdout.write(
            f"Sent {report.files_sent} files ({megabytes(report.bytes_sent)}) on channel "
            f"{report.channel!r}; every reader has finished{dropped}."
        )
