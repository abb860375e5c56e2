"""Alembic environment: always run on the connection `specfleet.store.migrate` hands in.

The caller has already opened the transaction and taken the upgrade lock, so this file only
configures the context; `begin_transaction()` joins the caller's transaction.
"""

from alembic import context

from specfleet.store.tables import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,  # SQLite can only ALTER through table copies
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
