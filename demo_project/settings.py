"""Settings of the demo marketplace.

Redis: when REDIS_URL is set, the demo uses that server (``redis://host:port/0``), or a
Redis Cluster (``redis+cluster://host:port/0``, any of its nodes). Otherwise it uses an
embedded redis-server that keeps its data in .demo-data/ between runs; the first
process that needs it starts it, and the others (the web server, workers, a
`manage.py` command in another terminal) share it while that process runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import django

from redis_components.embedded import shared_server

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("DEMO_DATA_DIR", BASE_DIR / ".demo-data"))
DATA_DIR.mkdir(parents=True, exist_ok=True)

REDIS_URL = os.environ.get("REDIS_URL", "")
REDIS_EMBEDDED = not REDIS_URL
if REDIS_EMBEDDED:
    REDIS_URL, _ = shared_server(DATA_DIR)
# redis+cluster://host:port/0 names any node of a Redis Cluster.
REDIS_CLUSTER = REDIS_URL.startswith(("redis+cluster://", "rediss+cluster://"))

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "demo-only-not-secret-change-me")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "redis_components",
    "demo_project.marketplace",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # The demo's pages answer 503 while Redis cannot be reached.
    "demo_project.marketplace.middleware.RedisUnavailableMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "demo_project.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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
WSGI_APPLICATION = "demo_project.wsgi.application"
ASGI_APPLICATION = "demo_project.asgi.application"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DATA_DIR / "db.sqlite3",
    }
}
CACHES = {
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL.replace("+cluster", "", 1),
        "OPTIONS": {"CLIENT_CLASS": "redis_components.connection.ClusterClient"}
        if REDIS_CLUSTER
        else {},
    }
}
# Chats keep their last messages, read or not: a reload shows the conversation.
REDIS_COMPONENTS = {"CACHE_ALIAS": "default", "KEY_PREFIX": "rc", "CHAT_KEEP_READ": True}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "login"
# A failed CSRF check answers JSON to clients that sent or asked for JSON.
CSRF_FAILURE_VIEW = "redis_components.views.csrf_failure"
# "Item sold" emails are written to files, one per message, instead of being sent
# (Django 6.1 configures mail with MAILERS; EMAIL_BACKEND is deprecated there).
if django.VERSION >= (6, 1):
    MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.filebased.EmailBackend",
            "OPTIONS": {"file_path": DATA_DIR / "emails"},
        }
    }
else:
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = DATA_DIR / "emails"
DEFAULT_FROM_EMAIL = "market@example.com"
# On Django 6.1 a sale's tasks (recording it, the sold notice) are Django @tasks, run on our
# queues through its Tasks backend (demo_project/marketplace/tasks.py); before, they
# are our own @redis_task (Django 6.0 cannot pass their limits on to the backend).
if django.VERSION >= (6, 0):
    TASKS = {
        "default": {
            "BACKEND": "redis_components.tasks.backend.RedisTaskBackend",
            "QUEUES": ["email", "market"],
            "OPTIONS": {"MAX_RETRIES": 3},
        }
    }
LOGOUT_REDIRECT_URL = "home"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "redis_components": {"handlers": ["console"], "level": "INFO"},
        "demo_project": {"handlers": ["console"], "level": "INFO"},
    },
}
