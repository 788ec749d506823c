"""A seller's catalogue distributed as a file: ``send_files`` to a few readers, live.

The catalogue page publishes the logged-in seller's listed items as a generated file
(CSV or JSON, written to a temporary directory) on the channel ``catalogue:<seller>``.
Threads of the web process run it, as the checkouts page's load does: one sender
(``send_files``) and ``READERS`` readers (``receive_files``): the visitor's own copy,
and two simulated readers, one slower than the other. The page polls a JSON view of
everyone's progress (bytes and blocks, done) and, once the visitor's reader has the
whole file, offers it for download.

A run's progress is one hash per seller (``demo:catalogue:{<seller>}``), so the JSON
view reads it from any process of the site; the visitor's received file is a string
beside it (``demo:catalogue:{<seller>}:file``, same hash tag). Each progress report is
one HSET; starting a run and ending a thread are each one script (so two runs of one
seller cannot start together, and the last thread to end keeps the result for a while);
the received file and its reader's fields are written in one MULTI/EXEC.
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from redis_components import (
    ReceivedFile,
    ReceiveProgress,
    SendProgress,
    get_client,
    receive_files,
    send_files,
)

from .views import MARKET, me

VISITOR = "you"
READERS = (VISITOR, "reader-1", "reader-2")
# Seconds each one pauses after a step (the sender after each round trip of blocks, a
# reader after each block it reads), so a visitor can watch a small file travel.
PACE = {"sender": 0.2, VISITOR: 0.1, "reader-1": 0.15, "reader-2": 0.3}
BLOCKS = 24  # about how many blocks a catalogue is cut into, whatever its size
FORMATS = ("csv", "json")
RUN_SECONDS = 120.0  # a run not over by then is stopped (readers gone, Redis away)
KEEP_SECONDS = 3600  # how long a finished run's progress and file are kept


def progress_key(seller: int) -> str:
    return f"demo:catalogue:{{{seller}}}"


def file_key(seller: int) -> str:
    return f"demo:catalogue:{{{seller}}}:file"


def channel(seller: int) -> str:
    return f"catalogue:{seller}"


# Start a run unless one is going: 1, or 0 when one is. ARGV: the threads it runs, when
# its progress expires (after every thread is stopped, should the web process die
# mid-run), then field, value pairs to start with.
START = """
if (tonumber(redis.call('HGET', KEYS[1], 'running')) or 0) > 0 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
redis.call('HSET', KEYS[1], 'running', ARGV[1], unpack(ARGV, 3))
redis.call('EXPIRE', KEYS[1], ARGV[2])
return 1
"""
# A thread ends: its fields (ARGV[2], ...) set, one fewer running; the last one keeps the
# run's progress and file for ARGV[1] seconds.
END = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if #ARGV > 1 then redis.call('HSET', KEYS[1], unpack(ARGV, 2)) end
local running = redis.call('HINCRBY', KEYS[1], 'running', -1)
if running <= 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ARGV[1]) end
end
return running
"""


def listed(seller: int) -> list[tuple[str, int]]:
    """The seller's listed items and their prices, cheapest first."""
    return [(item, price) for item, who, price in MARKET.listings() if who == seller]


def catalogue(items: list[tuple[str, int]], name: str, form: str) -> bytes:
    """A catalogue file: CSV with a header, or a JSON array of one item a line."""
    if form == "json":
        rows = [json.dumps({"item": item, "price": price, "seller": name}) for item, price in items]
        return ("[\n" + ",\n".join(rows) + "\n]\n").encode()
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["item", "price", "seller"])
    writer.writerows((item, price, name) for item, price in items)
    return out.getvalue().encode()


def start_run(seller: int, name: str, form: str) -> dict[str, Any] | None:
    """Publish the seller's catalogue to ``READERS`` in threads: what was started, None
    if a run is going, or ``{"empty": True}`` when the seller lists nothing."""
    items = listed(seller)
    if not items:
        return {"empty": True}
    data = catalogue(items, name, form)
    block = max(1, math.ceil(len(data) / BLOCKS))
    filename = f"catalogue-{name}.{form}"
    fields: list[Any] = ["file", filename, "format", form, "bytes_total", len(data)]
    fields += ["block", block, "blocks_total", math.ceil(len(data) / block), "error", ""]
    for who in ("sender", *READERS):
        fields += [f"{who}.bytes", 0, f"{who}.done", 0, f"{who}.lines", 0]
    fields += ["sender.waiting", 0, "sender.stalled", ""]
    threads = 1 + len(READERS)
    expires = round(RUN_SECONDS + 60)
    keys = [progress_key(seller), file_key(seller)]
    if not get_client().register_script(START)(keys, [threads, expires, *fields]):
        return None
    folder = Path(tempfile.mkdtemp(prefix="demo-catalogue-"))
    path = folder / filename
    path.write_bytes(data)
    run = _Run(seller, block)
    threading.Thread(target=run.send, args=(folder, path), daemon=True, name="catalogue").start()
    for reader in READERS:
        threading.Thread(target=run.receive, args=(reader,), daemon=True, name=reader).start()
    return {"file": filename, "bytes": len(data), "readers": list(READERS)}


class _Run:
    """One run's threads: the sender and the readers, which stop together."""

    def __init__(self, seller: int, block: int) -> None:
        self.seller, self.block = seller, block
        self.deadline = time.monotonic() + RUN_SECONDS
        self.failed = threading.Event()  # the sender failed: readers wait for nothing

    def stop(self) -> bool:
        return self.failed.is_set() or time.monotonic() > self.deadline

    def _set(self, **fields: Any) -> None:
        get_client().hset(progress_key(self.seller), mapping=fields)

    def _end(self, **fields: Any) -> None:
        pairs = [value for pair in fields.items() for value in pair]
        keys = [progress_key(self.seller), file_key(self.seller)]
        get_client().register_script(END)(keys, [KEEP_SECONDS, *pairs])

    def send(self, folder: Path, path: Path) -> None:
        def progress(report: SendProgress) -> None:
            sent = {"sender.bytes": report.bytes_sent, "sender.waiting": int(report.waiting)}
            self._set(**sent, **{"sender.stalled": " ".join(report.stalled)})
            if not report.complete and not report.waiting:
                time.sleep(PACE["sender"])

        try:
            report = send_files(
                [path],
                channel=channel(self.seller),
                readers=list(READERS),
                block_size=self.block,
                stalled_after=10.0,
                drop_stalled=True,
                progress=progress,
                stop=self.stop,
            )
        except Exception as error:
            self.failed.set()
            self._end(error=f"the sender failed: {error}")
        else:
            done: dict[str, Any] = {"sender.done": int(report.complete), "sender.waiting": 0}
            if report.stopped:
                self.failed.set()
                done["error"] = "the run was stopped: it took too long"
            self._end(**done)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def receive(self, reader: str) -> None:
        received: list[bytes] = []
        read = [0]

        def progress(report: ReceiveProgress) -> None:
            self._set(**{f"{reader}.bytes": report.bytes_read})
            if report.bytes_read > read[0]:
                read[0] = report.bytes_read
                time.sleep(PACE[reader])

        def done(file: ReceivedFile) -> None:
            lines = {f"{reader}.lines": file.lines}
            if reader != VISITOR:
                self._set(**lines)
                return
            with get_client().pipeline(transaction=True) as pipe:  # the file and its count
                pipe.set(file_key(self.seller), b"".join(received), ex=round(RUN_SECONDS + 60))
                pipe.hset(progress_key(self.seller), mapping=lines)
                pipe.execute()

        try:
            report = receive_files(
                channel=channel(self.seller),
                reader=reader,
                on_line=received.append if reader == VISITOR else _ignore,
                on_file_done=done,
                encoding=None,
                block_size=self.block,
                progress=progress,
                stop=self.stop,
            )
        except Exception as error:
            self._end(error=f"reader {reader} failed: {error}")
        else:
            self._end(**{f"{reader}.done": int(report.finished)})


def _ignore(line: bytes) -> None:
    """A simulated reader reads every line, and keeps none."""


def snapshot(seller: int) -> dict[str, Any]:
    """The seller's run as the page shows it: the sender's and each reader's progress."""
    found = {_text(k): _text(v) for k, v in get_client().hgetall(progress_key(seller)).items()}
    total, block = int(found.get("bytes_total", 0)), int(found.get("block", 1))

    def who(name: str) -> dict[str, Any]:
        done = int(found.get(f"{name}.bytes", 0))
        return {
            "bytes": done,
            "blocks": math.ceil(done / block),
            "lines": int(found.get(f"{name}.lines", 0)),
            "done": found.get(f"{name}.done") == "1",
        }

    running = int(found.get("running", 0)) > 0
    sender = who("sender") | {
        "waiting": found.get("sender.waiting") == "1",
        "stalled": found.get("sender.stalled", "").split(),
    }
    finished = bool(found) and not running and found.get(f"{VISITOR}.done") == "1"
    return {
        "started": bool(found),
        "running": running,
        "file": found.get("file"),
        "bytes_total": total,
        "blocks_total": int(found.get("blocks_total", 0)),
        "block": block if found else 0,
        "sender": sender,
        "readers": [{"reader": name} | who(name) for name in READERS],
        "error": found.get("error") or None,
        "download": reverse("catalogue_download") if finished else None,
    }


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


# -- views ------------------------------------------------------------------------------


@login_required
def catalogue_page(request: HttpRequest) -> HttpResponse:
    context = {"now": snapshot(me(request)), "readers": READERS, "formats": FORMATS}
    return render(request, "marketplace/catalogue.html", context)


@login_required
def catalogue_progress(request: HttpRequest) -> JsonResponse:
    """The seller's run, as JSON: what the catalogue page polls."""
    return JsonResponse(snapshot(me(request)))


@require_POST
@login_required
def catalogue_publish(request: HttpRequest) -> HttpResponse:
    """Publish the seller's catalogue as ``format`` (csv or json): 202 JSON, or back to
    the page for a form; 400 JSON for another format, 409 JSON while a run is going or
    when nothing is listed."""
    form = request.POST.get("format", "csv")
    if form not in FORMATS:
        return JsonResponse({"error": f"format must be one of {', '.join(FORMATS)}"}, status=400)
    started = start_run(me(request), request.user.get_username(), form)
    if started is None:
        busy = "your catalogue is being published; wait for it to end"
        return JsonResponse({"error": busy}, status=409)
    if started.get("empty"):
        empty = "you list nothing for sale: list an item from My items first"
        return JsonResponse({"error": empty}, status=409)
    if request.get_preferred_type(["text/html", "application/json"]) == "application/json":
        return JsonResponse(started, status=202)
    messages.success(request, f"{started['file']} is being published: watch its readers.")
    return redirect("catalogue")


@login_required
def catalogue_download(request: HttpRequest) -> HttpResponse:
    """The catalogue as the visitor's reader received it; 404 JSON before it has."""
    seller = me(request)
    with get_client().pipeline(transaction=True) as pipe:  # the file and its name together
        pipe.hget(progress_key(seller), "file")
        pipe.get(file_key(seller))
        name, data = pipe.execute()
    if name is None or data is None:
        return JsonResponse({"error": "no catalogue received yet: publish it first"}, status=404)
    filename = _text(name)
    kind = "application/json" if filename.endswith(".json") else "text/csv"
    response = HttpResponse(data, content_type=f"{kind}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
