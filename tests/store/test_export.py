"""Export of runs as JSON and CSV."""

from __future__ import annotations

import csv
import io
import json

import pytest

from specfleet.errors import UserError
from specfleet.store import export_runs
from tests.store.factory import grid, result


def seeded(store):
    runs = grid(repeats=1)
    matrix_id = store.create_matrix("demo", {}, runs)
    store.record_result(result(runs[0], 10.0))
    store.record_result(result(runs[1], 20.0))
    return matrix_id


def test_runs_as_json(store, tmp_path):
    seeded(store)
    path = tmp_path / "runs.json"
    assert export_runs(store.runs(), "json", path) == 2
    data = json.loads(path.read_text())
    assert [d["tok_per_s"] for d in data] == [10.0, 20.0]
    assert data[0]["token_ids"] == [5, 6, 7] and data[0]["finished_at"] == "2026-11-01T12:00:01"


def test_runs_as_csv(store):
    seeded(store)
    out = io.StringIO()
    export_runs(store.runs(), "csv", out)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    assert [r["arm"] for r in rows] == ["plain", "graded"]
    assert json.loads(rows[0]["token_ids"]) == [5, 6, 7] and rows[1]["tok_per_s"] == "20.0"


def test_unknown_format_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="--format"):
        export_runs([], "xml", tmp_path / "x")
    assert not (tmp_path / "x").exists()
