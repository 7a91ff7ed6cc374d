"""Optistudio's engine: a plain library usable from a notebook.

It never imports streamlit, celery, sqlalchemy or the app packages (db, workers, studio).
"""
