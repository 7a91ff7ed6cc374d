"""Persistence: SQLAlchemy models, engine/session set-up and keyword-only query functions.

Imports nothing else of Optistudio's, so workers, the studio and the CLI can all share it.
"""
