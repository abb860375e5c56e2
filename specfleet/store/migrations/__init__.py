"""Alembic migrations of the result store, shipped inside the package (no alembic.ini)."""
