"""Pages the browser tests open (the components' widgets as a project would use them), and
how the tests measure a page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.template import engines

from redis_components.widgets import ContactAutocompleteWidget, GuildAutocompleteWidget

PAGE = """{% load redis_components %}<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Autocomplete</title>{{ form.media }}</head>
<body>
<form method="get" action="">
  <label for="id_to">To</label> {% contact_autocomplete name="to" %}
  <label for="id_member">Member</label> {% guild_autocomplete "knights" name="member" %}
  {{ form.as_div }}
  <button type="submit">Send</button>
</form>
</body>
</html>
"""


class MessageForm(forms.Form):
    recipient = forms.CharField(widget=ContactAutocompleteWidget())
    knight = forms.CharField(widget=GuildAutocompleteWidget("knights"))


def autocomplete_page(request: HttpRequest) -> HttpResponse:
    template = engines["django"].from_string(PAGE)
    return HttpResponse(template.render({"form": MessageForm()}, request))


def resize(browser: Any, width: int) -> None:
    """Show pages in ``browser`` as in a window ``width`` CSS pixels wide (390: a phone's),
    until the test ends."""
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 800, "deviceScaleFactor": 1, "mobile": False},
    )


def page_width(browser: Any) -> int:
    """How wide the page in ``browser`` is: wider than its window when something sticks out."""
    return int(browser.execute_script("return document.documentElement.scrollWidth"))


# The words of the elements a selector finds that the page shows split over two lines.
_BROKEN_WORDS = """
const found = [];
for (const element of document.querySelectorAll(arguments[0])) {
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const word of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      const lines = new Set([...range.getClientRects()].map((box) => Math.round(box.top)));
      if (lines.size > 1) found.push(word[0]);
    }
  }
}
return found;
"""


def broken_words(browser: Any, selector: str) -> list[str]:
    """The words in the elements ``selector`` finds that the page breaks over lines."""
    return list(browser.execute_script(_BROKEN_WORDS, selector))
