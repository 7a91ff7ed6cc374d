"""Celery app and thin tasks: load the job row, call core, write the results."""
