"""Log processing for the demo: a line handler for ``manage.py rc_files_receive``.

::

    manage.py rc_files_send access.log.1 access.log.2.gz --channel logs --readers 3
    manage.py rc_files_receive --channel logs --reader 0 \\
        --handler demo_project.marketplace.logs.RequestsPerDay

It counts the lines of access logs per day (a line starts with its ISO date). The
book's aggregation example stored each file's counts with ZADD, which overwrites: a day
whose lines span two files kept the second file's count only. Here each file's counts
are added (HINCRBY), in one transaction when the file is done, so a reader that dies
mid-file and reads the file again from its start counts nothing twice. Delivery is at
least once, as with the task queues: a reader that dies in the instant between that
transaction and its acknowledgement of the file counts the file again when restarted.
"""

from __future__ import annotations

from collections import Counter

from redis_components import ReceivedFile, get_client


def requests_key(reader: str) -> str:
    """The hash of one reader's counts: day -> lines."""
    return f"demo:requests-per-day:{{{reader}}}"


class RequestsPerDay:
    """Counts lines per day ("2024-05-01", a line's first 10 characters) for one reader."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def on_line(self, line: str) -> None:
        if line.strip():
            self.counts[line[:10]] += 1

    def on_file_done(self, file: ReceivedFile) -> None:
        pipe = get_client().pipeline(transaction=True)
        for day, count in self.counts.items():
            pipe.hincrby(requests_key(file.reader), day, count)
        pipe.execute()
        self.counts.clear()


def requests_per_day(reader: str) -> dict[str, int]:
    """What ``reader`` has counted so far."""
    counts = get_client().hgetall(requests_key(reader))
    return {_text(day): int(count) for day, count in counts.items()}


def _text(value: bytes | str) -> str:
    """A reply as ``str``, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else value
