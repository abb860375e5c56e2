"""Reads list runs and stored values in one order on SQLite and PostgreSQL: NULLs (a
generation job's runs have no matrix) and a database collation that is not bytewise."""

from __future__ import annotations

import uuid

import pytest

from specfleet.store import open_store
from tests.store.factory import HOST_A, grid, spec


def test_a_job_s_runs_come_before_the_matrices_runs_on_both_backends(store):
    store.create_matrix("m", {}, grid(repeats=1, prefix="m"), matrix_id="m-1")
    store.create_generation_job("j", HOST_A, "m1", grid(repeats=1, prefix="j"), job_id="gen-j-1")
    assert [(r.matrix_id, r.job_id) for r in store.runs()] == [
        (None, "gen-j-1"), (None, "gen-j-1"), ("m-1", None), ("m-1", None)]


@pytest.mark.postgres
def test_stored_values_are_in_code_point_order_under_any_collation(pg_server):
    name = f"t_icu_{uuid.uuid4().hex[:12]}"
    with pg_server.admin() as conn:  # en-US puts 'alpha' before 'Zeta'; SQLite the other way
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
                     "ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
    try:
        with open_store(pg_server.url(name)) as store:
            models = ["alpha", "Zeta", "beta"]
            store.create_matrix("m", {}, [spec(f"k{i}", model=m) for i, m in enumerate(models)])
            assert store.stored_values("model") == ["Zeta", "alpha", "beta"]
    finally:
        pg_server.drop_database(name)
