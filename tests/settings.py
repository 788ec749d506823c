"""Settings for the test suite.

CACHES points at the Redis that conftest.py starts for the session (a single server, or
a cluster when RC_TEST_CLUSTER is set): its URL arrives in RC_TEST_REDIS_URL, set before
subprocesses load these settings. Without it, the placeholder is a unix socket that
does not exist, so nothing can reach a Redis the suite did not start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import tempfile

import django

NOT_STARTED = "unix:///nonexistent/redis-components-test-server-not-started.sock"

# Django's Tasks framework: built into Django 6, the django-tasks backport (an app) on 5.2.
DJANGO_TASKS_APP = (
    ["django_tasks"] if django.VERSION < (6, 0) and importlib.util.find_spec("django_tasks") else []
)


CLUSTER = bool(os.environ.get("RC_TEST_CLUSTER"))


def caches(url: str, other_url: str | None = None) -> dict[str, dict[str, object]]:
    """A bytes client, and a decoding client beside it.

    The decoding client also speaks RESP2, while the other speaks redis-py's default
    (RESP3 since redis-py 8), so tests that run in both modes read replies both ways.
    django-redis keeps one connection pool per URL, so the decoding client needs a URL
    of its own: ``other_url`` (the server's unix socket, or another node of the
    cluster), else a client name.
    """
    decoded_url = other_url or f"{url}?client_name=rc-decoded"
    decoded_options: dict[str, object] = {"decode_responses": True, "protocol": 2}
    options: dict[str, object] = {}
    if CLUSTER:
        options["CLIENT_CLASS"] = "redis_components.connection.ClusterClient"
    return {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": url,
            "OPTIONS": options,
        },
        "decoded": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": decoded_url,
            "OPTIONS": {**options, "CONNECTION_POOL_KWARGS": decoded_options},
        },
    }


def sentinel_caches(master: str, sentinels: list[tuple[str, int]]) -> dict[str, dict[str, object]]:
    """The master named ``master``, found through ``sentinels`` (django-redis's way)."""
    options = {
        "CLIENT_CLASS": "django_redis.client.SentinelClient",
        "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
        "SENTINELS": sentinels,
    }
    location = f"redis://{master}/0"
    return {
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": location,
            "OPTIONS": options,
        }
    }


SECRET_KEY = "tests-only-not-secret"
DEBUG = bool(os.environ.get("RC_TEST_DEBUG"))  # on in a worker process a test starts
USE_TZ = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "tests.urls"
INSTALLED_APPS = [
    *DJANGO_TASKS_APP,
    "django.contrib.admin",  # the task queues' admin pages
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "redis_components",
    "tests.testapp",  # its tasks.py: the tasks that worker processes started by tests run
    "demo_project.marketplace",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # The demo's pages answer 503 while Redis cannot be reached.
    "demo_project.marketplace.middleware.RedisUnavailableMiddleware",
]
# The test database is a file, not memory: the browser tests' live server answers several
# requests at once (long polls), and an in-memory database would be one connection shared
# by all its threads, which SQLite refuses.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": ":memory:",
        "TEST": {"NAME": os.path.join(tempfile.gettempdir(), f"rc-tests-{os.getpid()}.sqlite3")},
    }
}
# A process a test starts against the suite's PostgreSQL (tests/postgres.py).
if os.environ.get("RC_TEST_DATABASE"):
    DATABASES["default"] = json.loads(os.environ["RC_TEST_DATABASE"])
CACHES = caches(
    os.environ.get("RC_TEST_REDIS_URL", NOT_STARTED), os.environ.get("RC_TEST_REDIS_OTHER_URL")
)
if os.environ.get("RC_TEST_SENTINELS"):  # a worker started by the failover tests
    CACHES = sentinel_caches(
        os.environ["RC_TEST_SENTINEL_MASTER"],
        [(host, int(port)) for host, port in json.loads(os.environ["RC_TEST_SENTINELS"])],
    )
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
STATIC_URL = "static/"
LOGIN_URL = "login"
# A failed CSRF check answers JSON to clients that sent or asked for JSON.
CSRF_FAILURE_VIEW = "redis_components.views.csrf_failure"
# Email stays in memory, also in worker processes (Django 6.1 replaced EMAIL_BACKEND by MAILERS).
if django.VERSION >= (6, 1):
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
else:
    EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# The demo's pages need these (the suite tests them too).
REDIS_URL = "(the test server)"
REDIS_EMBEDDED = True
TASKS = {
    "default": {
        "BACKEND": "redis_components.tasks.backend.RedisTaskBackend",
        "QUEUES": ["default", "test", "email", "market"],
    }
}
# Fast hashing: the suite logs demo users in many times.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Subprocesses started by tests (workers) get their REDIS_COMPONENTS through this.
REDIS_COMPONENTS = json.loads(os.environ.get("RC_TEST_REDIS_COMPONENTS", "{}"))
# A worker process of a tracing test writes its spans to this file (tests/spans.py).
if os.environ.get("RC_TEST_SPANS"):
    from tests.spans import export_to_file

    export_to_file(os.environ["RC_TEST_SPANS"])
