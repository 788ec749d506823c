"""What benchmarks/queues.py runs in worker processes: one module per queue library.

Every library's tasks do the same work (``work.py``), so only the queue differs.
``settings.py`` and ``tasks.py`` make this package the Django app whose tasks
redis_components' worker runs.
"""
