"""Settings: one ``REDIS_COMPONENTS`` dict, read at access time.

Every default lives in :data:`DEFAULTS`. ``conf.<NAME>`` looks the value up in
``settings.REDIS_COMPONENTS`` each time it is read, so ``override_settings`` just
works and nothing is read at import time. The system checks in ``checks.py``
validate the values; the services validate their own arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from .exceptions import ConfigurationError

SETTING_NAME = "REDIS_COMPONENTS"

DEFAULTS: dict[str, Any] = {
    # The CACHES entry (a django-redis cache) whose raw Redis client is used.
    "CACHE_ALIAS": "default",
    # The first part of every key: "<KEY_PREFIX>:<component>:{<name>}[:<part>]".
    "KEY_PREFIX": "rc",
    # Autocomplete: how many recent contacts each user keeps.
    "CONTACTS_MAX": 100,
    # Autocomplete: the most suggestions one query returns (a larger `limit` is capped).
    "AUTOCOMPLETE_MAX_RESULTS": 10,
    # Autocomplete: who may search a guild, a callable `(request, guild) -> bool` or its
    # dotted path. The default lets signed-in users whose username is a member.
    "AUTOCOMPLETE_GUILD_ACCESS": "redis_components.autocomplete.members_only",
}


def user_settings() -> dict[str, Any]:
    """The project's ``REDIS_COMPONENTS`` dict (empty if unset or not a dict)."""
    value = getattr(settings, SETTING_NAME, {})
    return value if isinstance(value, dict) else {}


class Settings:
    """Typed, read-at-access-time view of ``REDIS_COMPONENTS`` over :data:`DEFAULTS`."""

    def get(self, name: str) -> Any:
        return user_settings().get(name, DEFAULTS[name])

    @property
    def CACHE_ALIAS(self) -> str:
        return str(self.get("CACHE_ALIAS"))

    @property
    def KEY_PREFIX(self) -> str:
        return str(self.get("KEY_PREFIX"))

    @property
    def CONTACTS_MAX(self) -> int:
        return int(self.get("CONTACTS_MAX"))

    @property
    def AUTOCOMPLETE_MAX_RESULTS(self) -> int:
        return int(self.get("AUTOCOMPLETE_MAX_RESULTS"))

    @property
    def AUTOCOMPLETE_GUILD_ACCESS(self) -> Callable[..., bool]:
        value = self.get("AUTOCOMPLETE_GUILD_ACCESS")
        try:
            found = import_string(value) if isinstance(value, str) else value
        except ImportError:
            found = None
        if not callable(found):
            raise ConfigurationError(
                f"{SETTING_NAME}['AUTOCOMPLETE_GUILD_ACCESS'] must be a callable "
                f"(request, guild) -> bool or its dotted path, not {value!r}."
            )
        return found  # type: ignore[no-any-return]


conf = Settings()
