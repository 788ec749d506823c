"""The project's Celery app, as Celery's Django guide makes it ("proj/celery.py").

    celery -A benchmarks.memory_apps.celery_app worker -P solo -c 1

Configured from Django's settings (the ``CELERY_`` ones); Celery's Django fix-up calls
``django.setup()`` when the worker starts. It discovers the ``celery_tasks`` module of
each installed app, not ``tasks`` (ours, which Celery's worker has no use for).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.memory_apps.settings")

app = Celery("memory_apps")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(related_name="celery_tasks")
