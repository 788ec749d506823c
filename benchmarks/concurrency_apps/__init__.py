"""What benchmarks/concurrency.py runs in worker processes: one module per task library.

Every library's tasks do the same work (``work.py``): sleep, then record when they
started and ended, so that only the worker differs. ``settings.py`` and ``tasks.py``
make this package the Django app whose tasks redis_components' worker runs.
"""
