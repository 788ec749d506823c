"""Pages the browser tests open: the components' widgets as a project would use them."""

from __future__ import annotations

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
