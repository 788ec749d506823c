"""`manage.py rc_files_receive`: read every file sent on a channel, line by line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.module_loading import import_string

from redis_components.exceptions import FilesError, InvalidInput
from redis_components.files import receive_files

from ..base import RedisCommand
from ._console import (
    ProgressLine,
    configure_logging,
    megabytes,
    receiver_line,
    size,
    stop_on_signals,
)


class Command(RedisCommand):
    help = (
        "Read, as one reader, every file sent through Redis on a channel (manage.py "
        "rc_files_send), and call a handler for each line; .gz files are decompressed. "
        "Waits for the channel "
        "if it does not exist yet, and returns when its sender is done and every file is "
        "read. A reader restarted with the same --reader continues with the first file "
        "it had not finished (that file is read again from its start). Ctrl-C stops it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--channel", default="logs", help="the channel (default: logs)")
        parser.add_argument("--reader", default="0", help="this reader's id (default: 0)")
        parser.add_argument(
            "--handler",
            required=True,
            metavar="DOTTED.PATH",
            help="a callable called with each line; or a class, of which one instance is "
            "made, whose on_line(line) is called with each line and on_file_done(file), "
            "if it has one, after each file",
        )
        parser.add_argument(
            "--bytes", action="store_true", help="pass lines as bytes instead of text"
        )
        parser.add_argument(
            "--encoding", default="utf-8", help="how files are decoded (default: utf-8)"
        )
        parser.add_argument(
            "--block-size",
            type=size,
            metavar="SIZE",
            help="most bytes per GETRANGE (default: 1 MiB, or FILES_BLOCK_SIZE if larger)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        configure_logging(options["verbosity"])
        on_line, on_file_done = self.handler(options["handler"])
        line = ProgressLine(self.stdout)
        with stop_on_signals() as stop:
            try:
                report = receive_files(
                    channel=options["channel"],
                    reader=options["reader"],
                    on_line=on_line,
                    on_file_done=on_file_done,
                    encoding=None if options["bytes"] else options["encoding"],
                    block_size=options["block_size"],
                    progress=lambda progress: line.show(receiver_line(progress)),
                    stop=stop,
                )
            except (InvalidInput, FilesError) as exc:
                raise CommandError(str(exc)) from None
        line.show(receiver_line(report), final=True)
        if report.stopped:
            raise CommandError(
                f"Stopped after {report.files_done} files; run again with --reader "
                f"{report.reader} to continue.",
                returncode=130,
            )
        self.stdout.write(
            f"Reader {report.reader} read {report.files_done} files "
            f"({megabytes(report.bytes_read)}, {report.lines:,} lines) on channel "
            f"{report.channel!r}."
        )

    def handler(self, path: str) -> tuple[Any, Any]:
        """``on_line`` and ``on_file_done`` (or None) from the --handler path."""
        try:
            target = import_string(path)
        except ImportError as exc:
            raise CommandError(f"--handler: cannot import {path!r}: {exc}") from None
        if isinstance(target, type):
            target = target()
        on_line = getattr(target, "on_line", target)
        if not callable(on_line):
            raise CommandError(f"--handler: {path!r} is not callable and has no on_line")
        return on_line, getattr(target, "on_file_done", None)
