"""What benchmarks/tasks_backends.py runs: one Django project, four Tasks backends.

``settings.py`` configures the project for one contender at a time (``BENCH_BACKEND``:
``ours``, ``rq``, ``db`` or ``tasks-redis``), each with its documented ``TASKS`` entry
and apps;
``tasks.py`` declares the same tasks with Django's ``@task`` for all of them.
"""
