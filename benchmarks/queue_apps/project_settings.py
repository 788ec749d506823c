"""The benchmark's worker in a project as ``django-admin startproject`` makes it.

DEBUG on, the contrib apps, SQLite, and our Tasks backend: what a user trying the
library has, where ``settings.py`` beside it is the least a worker needs.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .settings import *  # noqa: F403 - CACHES, REDIS_COMPONENTS, SECRET_KEY

DEBUG = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "redis_components",
    "benchmarks.queue_apps",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
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
            ],
        },
    },
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(Path(tempfile.gettempdir()) / "rc-bench-project.sqlite3"),
    }
}
TASKS = {"default": {"BACKEND": "redis_components.tasks.backend.RedisTaskBackend"}}
STATIC_URL = "static/"
