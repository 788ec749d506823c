"""Every user-visible text of the app is marked for translation.

Django's ``makemessages`` runs on a copy of the package, for a made-up locale, and the
catalogs it writes must hold the texts users see; then a catalog translating some of them
is compiled and the views answer in that language. Both need GNU gettext.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.test import RequestFactory, override_settings
from django.utils import translation

import redis_components
from conftest import missing as environment_missing
from redis_components import views
from redis_components.locks import RedisLock, redis_lock

# makemessages runs xgettext, msguniq, msgmerge and msgattrib; msgfmt compiles.
GETTEXT_TOOLS = ("xgettext", "msguniq", "msgmerge", "msgattrib", "msgfmt")


def need_gettext() -> None:
    """Skip, saying what to install, when GNU gettext is missing."""
    missing = [tool for tool in GETTEXT_TOOLS if shutil.which(tool) is None]
    if missing:
        environment_missing(
            f"GNU gettext is not installed (no {', '.join(missing)}): install it "
            "(apt-get install gettext, brew install gettext) to check the translatable texts"
        )


PACKAGE = Path(redis_components.__file__).parent
TEMPLATES = PACKAGE / "templates"
LOCALE = "xx"  # no such language: the catalogs hold the marked texts and nothing else

BUSY_409 = "This is being changed by another request right now; try again shortly."
BUSY_429 = "Too many of these are running right now; try again shortly."


def marked(po: str) -> set[str]:
    """The msgid and msgid_plural texts of a .po file written with ``--no-wrap``."""
    found = re.findall(r'^msgid(?:_plural)? "(.*)"$', po, re.M)
    return {text.replace('\\"', '"').replace("\\\\", "\\") for text in found}


@pytest.fixture(scope="module")
def catalogs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """What makemessages finds in a copy of the package, per domain (the repository
    stays as it is: the copy gets the locale directory)."""
    need_gettext()
    copy = tmp_path_factory.mktemp("messages") / "redis_components"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "locale").mkdir()
    here = os.getcwd()
    os.chdir(copy)
    try:
        for domain in ("django", "djangojs"):
            call_command("makemessages", locale=[LOCALE], domain=domain, no_wrap=True, verbosity=0)
    finally:
        os.chdir(here)
    found = {}
    for domain in ("django", "djangojs"):
        po = copy / "locale" / LOCALE / "LC_MESSAGES" / f"{domain}.po"
        found[domain] = marked(po.read_text("utf-8")) if po.exists() else set()  # none: no file
    return found


@pytest.mark.parametrize(
    "text",
    [
        # views.py: the JSON errors a browser user can see
        "Sign in first.",
        "Redis is unavailable; try again shortly.",
        "Method %(method)s is not allowed here.",
        "You may not search this guild.",
        "You started too many chats in the last minute; try again shortly.",
        # metrics.py: what a scraper's operator reads
        "Metrics are off (REDIS_COMPONENTS['METRICS']).",
        "A valid Bearer token is required.",
        "Redis cannot be reached: %(error)s",
        # the admin pages: titles, actions, messages (admin/queues.py)
        "Task queues",
        "Queue %(name)s",
        "Requeue a dead letter",
        "Yes, requeue a dead letter",
        "It goes back to its queue with fresh retries.",
        "Requeued the dead letter on {queue}.",
        "Purged {count} task from {queue}.",
        "Purged {count} tasks from {queue}.",
        "that dead letter is no longer there (the list changed)",
        # ... and their templates
        "No worker is running. Start one with <code>manage.py rc_worker</code>.",
        "%(total)s ready task",
        "%(total)s ready tasks",
        "Page %(page)s of %(pages)s.",
        "(unreadable)",
        "No, go back",
    ],
)
def test_the_texts_users_see_are_marked(catalogs: dict[str, set[str]], text: str) -> None:
    assert text in catalogs["django"]


@pytest.mark.parametrize("text", [BUSY_409, BUSY_429])
def test_the_busy_answers_are_marked(catalogs: dict[str, set[str]], text: str) -> None:
    assert text in catalogs["django"]


def test_the_widgets_screen_reader_texts_are_marked(catalogs: dict[str, set[str]]) -> None:
    assert {"Suggestions", "%s suggestion", "%s suggestions"} <= catalogs["djangojs"]


# Text outside tags, in a template with its {% ... %}, {{ ... }} and translated blocks
# taken out: what is left besides markup, entities and punctuation is unmarked text.
UNMARKED_CUTS = [
    re.compile(r"{% blocktranslate.*?{% endblocktranslate %}", re.S),
    re.compile(r"<(style|script)\b.*?</\1>", re.S),
    re.compile(r"{%.*?%}|{{.*?}}|{#.*?#}", re.S),
    re.compile(r"<[^>]*>"),
    re.compile(r"&#?\w+;"),
]


@pytest.mark.parametrize("template", sorted(TEMPLATES.rglob("*.html")), ids=lambda path: path.name)
def test_templates_have_no_unmarked_text(template: Path) -> None:
    text = template.read_text("utf-8")
    # A filter's words, such as default:"never", need _("never").
    assert not re.findall(r'\|\w+:"[^"]*[^\W\d_]{2,}[^"]*"', text), template
    for cut in UNMARKED_CUTS:
        text = cut.sub(" ", text)
    assert not re.findall(r"[^\W\d_]{2,}", text), template


# -- a translated catalog --------------------------------------------------------------------

TRANSLATED = {
    "No such endpoint.": "xx: no such endpoint",
    BUSY_409: "xx: busy",
}


@pytest.fixture(scope="module")
def locale_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A compiled catalog of :data:`TRANSLATED` for the made-up locale."""
    need_gettext()
    root = tmp_path_factory.mktemp("locale")
    messages = root / LOCALE / "LC_MESSAGES"
    messages.mkdir(parents=True)
    entries = "".join(
        f"msgid {json.dumps(msgid)}\nmsgstr {json.dumps(msgstr)}\n\n"
        for msgid, msgstr in TRANSLATED.items()
    )
    header = 'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\n'
    (messages / "django.po").write_text(header + entries, "utf-8")
    subprocess.run(
        ["msgfmt", "--check", "-o", messages / "django.mo", messages / "django.po"], check=True
    )
    return root


@pytest.fixture
def in_made_up_language(locale_path: Path) -> Iterator[None]:
    # Changing LOCALE_PATHS makes Django forget the catalogs it has loaded.
    with override_settings(LOCALE_PATHS=[str(locale_path)]), translation.override(LOCALE):
        yield


def json_request(path: str = "/") -> HttpRequest:
    request = RequestFactory().get(path, HTTP_ACCEPT="application/json")
    request.user = AnonymousUser()
    return request


@pytest.mark.usefixtures("in_made_up_language")
def test_a_json_error_answers_in_the_users_language() -> None:
    response = views.not_found(json_request(), "nowhere")
    assert json.loads(response.content) == {"error": "xx: no such endpoint"}


@redis_lock("translated:{item}", blocking=False)
def locked_view(request: HttpRequest, item: int) -> HttpResponse:
    return JsonResponse({"done": item})


@pytest.mark.usefixtures("in_made_up_language")
def test_the_409_answers_in_the_users_language() -> None:
    held = RedisLock("translated:1").acquire(blocking=False)
    assert held is not None
    try:
        response = locked_view(json_request(), item=1)
    finally:
        held.release()
    assert response.status_code == 409
    # Only the text is translated: the keys stay what clients read.
    assert json.loads(response.content) == {"error": "xx: busy", "lock": "translated:1"}
