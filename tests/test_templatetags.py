from __future__ import annotations

import pytest
from django.template import Context, Template

from redis_components import InvalidInput


def render(source: str, **context: object) -> str:
    return Template("{% load redis_components %}" + source).render(Context(context))


def test_contact_autocomplete_renders_the_input_and_its_assets() -> None:
    html = render('{% contact_autocomplete name="to" placeholder="Who?" value="Zoë" %}')
    assert '<input type="text" name="to" value="Zoë"' in html
    assert 'id="id_to"' in html
    assert 'placeholder="Who?"' in html
    assert 'data-rc-autocomplete="/rc/autocomplete/contacts/"' in html
    assert 'type="module"' in html
    assert "autocomplete.css" in html


def test_guild_autocomplete_points_at_the_guild() -> None:
    html = render('{% guild_autocomplete "knights" name="member" id="pick" %}')
    assert 'data-rc-autocomplete="/rc/autocomplete/guilds/knights/"' in html
    assert 'name="member"' in html
    assert 'id="pick"' in html


def test_values_are_escaped() -> None:
    html = render("{% contact_autocomplete name='to' value=evil %}", evil='"><b>')
    assert "<b>" not in html
    assert 'value="&quot;&gt;&lt;b&gt;"' in html


def test_a_bad_guild_name_is_refused() -> None:
    with pytest.raises(InvalidInput, match="guild"):
        render('{% guild_autocomplete "" name="member" %}')
