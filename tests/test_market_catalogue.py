"""The demo's file distribution seen in a browser's terms: a seller's catalogue published
as a file with send_files to three readers, its progress polled as JSON, and the
visitor's received copy downloaded, byte for byte."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis
from django.contrib.auth import get_user_model
from django.test import Client

from demo_project.marketplace import catalogues
from demo_project.marketplace.seed import DEMO_PASSWORD, seed
from demo_project.marketplace.views import MARKET
from tests.test_market_views import flash, login

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("worker_may_check_db_connections")]


@pytest.fixture
def users(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    # Quicker than a visitor's run; the slow reader still reads for about a second.
    pace = dict.fromkeys(catalogues.PACE, 0.01) | {"reader-2": 0.05}
    monkeypatch.setattr(catalogues, "PACE", pace)
    seed(MARKET, guild_size=300)
    return dict(get_user_model()._default_manager.values_list("username", "pk"))


def _wait_for_the_end(client: Client, seconds: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now: dict[str, Any] = client.get("/catalogue/progress/").json()
        if now["started"] and not now["running"]:
            return now
        time.sleep(0.05)
    raise AssertionError(f"the run did not end: {now}")


@pytest.mark.parametrize("form", ["csv", "json"])
def test_a_published_catalogue_reaches_every_reader_and_downloads_the_same_bytes(
    users: dict[str, int], r: redis.Redis, form: str
) -> None:
    bob = users["bob"]
    items = catalogues.listed(bob)
    assert len(items) == 3  # seeded: three listed
    expected = catalogues.catalogue(items, "bob", form)
    client = login("bob")
    page = client.get("/catalogue/").content.decode()
    assert "Publish my catalogue" in page
    idle = client.get("/catalogue/progress/").json()
    assert (idle["started"], idle["running"], idle["download"]) == (False, False, None)
    assert client.get("/catalogue/download/").status_code == 404
    started = client.post("/catalogue/publish/", {"format": form}, HTTP_ACCEPT="application/json")
    assert started.status_code == 202
    assert started.json() == {
        "file": f"catalogue-bob.{form}",
        "bytes": len(expected),
        "readers": ["you", "reader-1", "reader-2"],
    }
    # One run per seller at a time: a second is refused while the first runs.
    again = client.post("/catalogue/publish/", {"format": form}, HTTP_ACCEPT="application/json")
    assert again.status_code == 409
    assert "being published" in again.json()["error"]
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        now = client.get("/catalogue/progress/").json()
        seen.append(now)
        for who in (now["sender"], *now["readers"]):
            assert 0 <= who["bytes"] <= now["bytes_total"] == len(expected)
            assert who["blocks"] <= now["blocks_total"]
        if not now["running"]:
            break
        time.sleep(0.02)
    assert now["error"] is None
    assert now["sender"] | {"stalled": []} == {
        "bytes": len(expected),
        "blocks": now["blocks_total"],
        "lines": 0,
        "done": True,
        "waiting": False,
        "stalled": [],
    }
    lines = len(items) + (1 if form == "csv" else 2)  # the header, or the brackets
    for reader in now["readers"]:
        assert reader["bytes"] == len(expected)
        assert (reader["done"], reader["lines"]) == (True, lines)
    assert now["blocks_total"] > 10  # small blocks: progress a visitor can watch
    # Seen on the way: the sender waiting for readers, the slow reader part-way through.
    assert any(row["sender"]["waiting"] for row in seen)
    assert any(0 < row["readers"][2]["bytes"] < len(expected) for row in seen)
    assert now["download"] == "/catalogue/download/"
    copy = client.get("/catalogue/download/")
    assert copy.status_code == 200
    assert copy.content == expected
    assert copy["Content-Disposition"] == f'attachment; filename="catalogue-bob.{form}"'
    if form == "json":
        assert [row["item"] for row in json.loads(copy.content)] == [i for i, _ in items]
    # The channel is gone from Redis; the progress and the copy are kept, for a while.
    assert r.keys("rc:files:{catalogue:*") == []
    assert 0 < r.ttl(catalogues.progress_key(bob)) <= catalogues.KEEP_SECONDS
    assert 0 < r.ttl(catalogues.file_key(bob)) <= catalogues.KEEP_SECONDS
    # Over: another run may start, from a form too, which comes back to the page.
    response = client.post("/catalogue/publish/", {"format": form}, follow=True)
    assert response.redirect_chain[-1][0] == "/catalogue/"
    assert flash(response) == [f"catalogue-bob.{form} is being published: watch its readers."]
    assert _wait_for_the_end(client)["error"] is None
    assert client.get("/catalogue/download/").content == expected


def test_each_seller_runs_their_own(users: dict[str, int]) -> None:
    bob, carol = login("bob"), login("carol")
    for client in (bob, carol):
        response = client.post("/catalogue/publish/", HTTP_ACCEPT="application/json")
        assert response.status_code == 202
    for client, name in ((bob, "bob"), (carol, "carol")):
        assert _wait_for_the_end(client)["error"] is None
        copy = client.get("/catalogue/download/").content.decode()
        assert copy.startswith("item,price,seller\n")
        assert copy.count(f",{name}\n") == 3


@pytest.mark.parametrize("form", ["", "xml", "CSV", "csv ", "\x00", "j" * 5000])
def test_a_bad_format_is_refused_with_json(users: dict[str, int], form: str) -> None:
    client = login("bob")
    response = client.post("/catalogue/publish/", {"format": form})
    assert response.status_code == 400
    assert response.json() == {"error": "format must be one of csv, json"}
    assert client.get("/catalogue/progress/").json()["started"] is False


def test_a_seller_with_nothing_listed_is_told_so(users: dict[str, int]) -> None:
    get_user_model()._default_manager.create_user("frank", password=DEMO_PASSWORD)
    client = login("frank")
    response = client.post("/catalogue/publish/", HTTP_ACCEPT="application/json")
    assert response.status_code == 409
    assert "list nothing for sale" in response.json()["error"]
    assert client.get("/catalogue/progress/").json()["started"] is False
    download = client.get("/catalogue/download/")
    assert download.status_code == 404
    assert "error" in download.json()


def test_catalogue_pages_need_a_login_and_publishing_a_post(users: dict[str, int]) -> None:
    for page in ("/catalogue/", "/catalogue/progress/", "/catalogue/download/"):
        assert Client().get(page).status_code == 302
    assert Client().post("/catalogue/publish/").status_code == 302
    assert login("bob").get("/catalogue/publish/").status_code == 405
