from __future__ import annotations

import os
import subprocess
import sys


def test_import_needs_no_django_settings() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    code = (
        "import redis_components as rc, sys\n"
        "assert rc.__version__\n"
        "assert rc.InvalidInput and rc.LockNotAcquired\n"
        "from django.conf import settings\n"
        "assert not settings.configured, 'importing configured Django'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_public_names_resolve() -> None:
    import redis_components

    for name in redis_components.__all__:
        assert getattr(redis_components, name) is not None
