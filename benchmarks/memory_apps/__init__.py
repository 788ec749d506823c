"""One Django project for benchmarks/memory.py: our worker, Celery's and django-rq's."""
