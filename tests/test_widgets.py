from __future__ import annotations

from urllib.parse import unquote

import pytest
from django import forms
from django.test import override_settings
from django.urls import resolve

from redis_components import InvalidInput
from redis_components.exceptions import ConfigurationError
from redis_components.views import ContactsAutocompleteView, GuildAutocompleteView
from redis_components.widgets import ContactAutocompleteWidget, GuildAutocompleteWidget


class MessageForm(forms.Form):
    to = forms.CharField(widget=ContactAutocompleteWidget(attrs={"placeholder": "Name"}))
    member = forms.CharField(widget=GuildAutocompleteWidget("knights", debounce=300))


def test_a_form_renders_plain_text_inputs_that_name_their_endpoint() -> None:
    html = str(MessageForm(initial={"to": '"><script>alert(1)</script>'})["to"])
    assert html.startswith('<span class="rc-autocomplete"><input type="text" name="to"')
    assert 'data-rc-autocomplete="/rc/autocomplete/contacts/"' in html
    assert 'data-rc-debounce="200"' in html
    assert 'placeholder="Name"' in html
    assert 'id="id_to"' in html
    assert "<script>" not in html
    assert 'value="&quot;&gt;&lt;script&gt;' in html
    # Without its script the input is a plain text input: no combobox role yet.
    assert "role=" not in html
    member = str(MessageForm()["member"])
    assert 'data-rc-autocomplete="/rc/autocomplete/guilds/knights/"' in member
    assert 'data-rc-debounce="300"' in member


def test_media_is_a_module_script_and_a_stylesheet_once() -> None:
    media = str(MessageForm().media)
    assert media.count("autocomplete.js") == 1
    assert '<script src="/static/redis_components/autocomplete.js" type="module">' in media
    assert 'href="/static/redis_components/autocomplete.css"' in media


@pytest.mark.parametrize("guild", ["knights", "Table ronde / ÆØ {x}", "50% off?#"])
def test_guild_urls_resolve_back_to_the_guild(guild: str) -> None:
    url = GuildAutocompleteWidget(guild).source_url()
    match = resolve(unquote(url))  # as the server decodes the path it receives
    assert match.func.view_class is GuildAutocompleteView  # type: ignore[attr-defined]
    assert match.kwargs == {"guild": guild}
    contacts = resolve(ContactAutocompleteWidget().source_url())
    assert contacts.func.view_class is ContactsAutocompleteView  # type: ignore[attr-defined]


def test_a_bad_guild_name_is_refused_when_the_widget_is_made() -> None:
    with pytest.raises(InvalidInput, match="guild"):
        GuildAutocompleteWidget("")


urlpatterns: list[object] = []  # a project's URLconf that forgot the app's URLs (below)


@override_settings(ROOT_URLCONF=__name__)
@pytest.mark.parametrize("widget", [ContactAutocompleteWidget(), GuildAutocompleteWidget("a")])
def test_without_the_apps_urls_rendering_says_to_include_them(widget: forms.Widget) -> None:
    with pytest.raises(ConfigurationError, match=r'include\("redis_components.urls"\)'):
        widget.render("member", None)
