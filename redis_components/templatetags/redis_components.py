"""Template tags: ``{% load redis_components %}``.

Autocomplete inputs, each rendered with the script and stylesheet it needs (the
script is a module, so the browser runs it once however many inputs a page has)::

    {% contact_autocomplete name="to" %}
    {% guild_autocomplete "knights" name="member" placeholder="Member name" %}

Extra keyword arguments become attributes of the ``<input>``.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..widgets import AutocompleteWidget, ContactAutocompleteWidget, GuildAutocompleteWidget

register = template.Library()


# --- autocomplete -----------------------------------------------------------------


@register.simple_tag
def contact_autocomplete(name: str, value: str = "", **attrs: Any) -> SafeString:
    """A text input named ``name`` that suggests the signed-in user's recent contacts."""
    return _render(ContactAutocompleteWidget(), name, value, attrs)


@register.simple_tag
def guild_autocomplete(guild: str, name: str, value: str = "", **attrs: Any) -> SafeString:
    """A text input named ``name`` that suggests members of ``guild``."""
    return _render(GuildAutocompleteWidget(guild), name, value, attrs)


def _render(widget: AutocompleteWidget, name: str, value: str, attrs: dict[str, Any]) -> SafeString:
    attrs = {"id": f"id_{name}", **attrs}
    return format_html("{}{}", widget.render(name, value or None, attrs), widget.media)
