"""Django's own tests of its Tasks framework, run against our backend.

``tests/test_django_tasks_suite.py`` downloads the published source distribution of the
installed Django, takes its ``tests/tasks/`` folder and runs it in a subprocess with
``plugin.py``: Django's test-only backends are replaced by ours (``adapter.py``),
every assertion stays as Django wrote it.
"""
