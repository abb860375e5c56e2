"""specfleet's result store: SQLite by default, PostgreSQL for a shared fleet.

`open_store()` resolves the URL (`--db`, `SPECFLEET_DB`, or the default SQLite file in the
user data dir), creates or upgrades the schema, and returns a `Store`: the repository the
scheduler writes through and the CLI reads from.
"""

from specfleet.store.engine import default_db_path, display_url, resolve_url
from specfleet.store.errors import StoreConflict, StoreError, UnknownMatrix, UnknownRun
from specfleet.store.export import export_runs
from specfleet.store.migrate import FutureSchemaError, head_revision
from specfleet.store.rows import JobRow, LoadSampleRow, MatrixRow, RunRow, WidthCostRow
from specfleet.store.store import Store, new_matrix_id, open_store

__all__ = [
    "FutureSchemaError",
    "JobRow",
    "LoadSampleRow",
    "MatrixRow",
    "RunRow",
    "Store",
    "StoreConflict",
    "StoreError",
    "UnknownMatrix",
    "UnknownRun",
    "WidthCostRow",
    "default_db_path",
    "display_url",
    "export_runs",
    "head_revision",
    "new_matrix_id",
    "open_store",
    "resolve_url",
]
