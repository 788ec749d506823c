"""Sphinx configuration of the documentation site (``make docs`` builds it)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import django
from django.conf import settings
from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx

# The API reference imports the modules, and they need Django's settings: configure
# the least that lets them import. Nothing here connects to Redis.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# Django's Tasks framework: built into Django 6, the django-tasks backport (an app) on 5.2.
BACKPORT = django.VERSION < (6, 0) and importlib.util.find_spec("django_tasks") is not None
settings.configure(
    SECRET_KEY="docs-only",
    INSTALLED_APPS=[
        *(["django_tasks"] if BACKPORT else []),
        "django.contrib.admin",
        "django.contrib.auth",
        "django.contrib.contenttypes",
        "django.contrib.sessions",
        "django.contrib.messages",
        "django.contrib.staticfiles",
        "redis_components",
    ],
    CACHES={
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:6379/0",
        }
    },
    USE_TZ=True,
)
django.setup()
if django.VERSION < (6, 0) and not BACKPORT:
    # Django 5.2 without the backport: the Tasks backend cannot import, so stand it in.
    autodoc_mock_imports = ["django_tasks"]

project = "django-redis-components"
author = "redis_components developers"
copyright = "the redis_components developers"
release = importlib.metadata.version("django-redis-components")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
root_doc = "index"

myst_enable_extensions = ["colon_fence", "deflist"]
# Headings get anchors, so pages can link to a section: [text](locks.md#measured).
myst_heading_anchors = 3

html_theme = "furo"
html_title = f"redis_components {release}"

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}


# Nitpicky mode (-n) checks every reference the pages make. The docstrings also name
# private helpers, type variables and classes of the standard library, Django and
# redis-py, which this reference does not document (and the build needs no network
# for other projects' inventories): references made inside an API entry that lead
# nowhere stay plain text instead of failing the build.
def _inside_api_entry(app: object, domain: object, node: nodes.Element) -> bool | None:
    if "docstring of " in (node.source or ""):
        return True
    parent = node.parent
    while parent is not None:
        if isinstance(parent, addnodes.desc):
            return True
        parent = parent.parent
    return None


def setup(app: Sphinx) -> None:
    app.connect("warn-missing-reference", _inside_api_entry)
