"""Form widgets: text inputs that suggest values from the autocomplete endpoints.

``forms.CharField(widget=ContactAutocompleteWidget())`` is all a form needs; render
``{{ form.media }}`` once on the page. Without JavaScript the widget is a plain text
input. The JS (``autocomplete.js``, a module, so it runs once however often it is
included) reads its configuration from ``data-rc-*`` attributes and turns the input
into a WAI-ARIA combobox.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.forms.widgets import Script
from django.urls import NoReverseMatch, reverse

from .exceptions import ConfigurationError
from .keys import validate_name


class AutocompleteWidget(forms.TextInput):
    """A text input that suggests values from a JSON endpoint answering ``{"results": [...]}``.

    ``debounce`` is the pause (ms) after the last keystroke before the request is sent.
    Subclasses say which endpoint in :meth:`source_url`.
    """

    template_name = "redis_components/widgets/autocomplete.html"

    class Media:
        css = {"all": ["redis_components/autocomplete.css"]}
        js = [Script("redis_components/autocomplete.js", type="module")]

    def __init__(self, attrs: dict[str, Any] | None = None, debounce: int = 200) -> None:
        super().__init__(attrs)
        self.debounce = debounce

    def source_url(self) -> str:
        raise NotImplementedError

    def get_context(self, name: str, value: Any, attrs: dict[str, Any] | None) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        try:
            source = self.source_url()
        except NoReverseMatch as error:
            raise ConfigurationError(
                f"{error}: the autocomplete widgets ask the app's endpoints; add "
                'path("rc/", include("redis_components.urls")) to your URLconf.'
            ) from None
        context["widget"]["attrs"].update(
            {"data-rc-autocomplete": source, "data-rc-debounce": self.debounce}
        )
        return context


class ContactAutocompleteWidget(AutocompleteWidget):
    """Suggests the signed-in user's recent contacts."""

    def source_url(self) -> str:
        return reverse("redis_components:autocomplete-contacts")


class GuildAutocompleteWidget(AutocompleteWidget):
    """Suggests members of the guild ``guild`` (to users allowed to search it)."""

    def __init__(
        self, guild: str, attrs: dict[str, Any] | None = None, debounce: int = 200
    ) -> None:
        super().__init__(attrs, debounce)
        self.guild = validate_name(guild, "guild")

    def source_url(self) -> str:
        return reverse("redis_components:autocomplete-guild", kwargs={"guild": self.guild})
