"""Export stored runs as JSON or CSV (to a path or an open text file)."""

from __future__ import annotations

import csv
import dataclasses
import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from specfleet import jsontext
from specfleet.errors import UserError
from specfleet.store.rows import RunRow

FORMATS = ("json", "csv")


def export_runs(rows: Iterable[RunRow], fmt: str, out: str | Path | TextIO) -> int:
    """Write runs (from `Store.runs`) as JSON (a list of objects) or CSV (one row each).

    Args:
        rows: the runs.
        fmt: "json" or "csv".
        out: a file path or an open text file.

    In CSV, list and dict values are JSON text and datetimes ISO 8601 (UTC).

    Returns:
        How many rows were written.
    """
    if fmt not in FORMATS:
        raise UserError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    records = [_record(row) for row in rows]
    if isinstance(out, str | Path):
        with open(out, "w", encoding="utf-8", newline="") as handle:
            _write(records, fmt, handle)
    else:
        _write(records, fmt, out)
    return len(records)


def with_job_prompts(store, runs: list) -> list:
    """The runs as records, each with `prompt_text` after its `prompt_name` when some are a
    generation job's: a job's prompt lives in the user's batch (or standard input) alone,
    and a reply named `line-2` did not say what it answered. A matrix's run gets null there
    (its prompt is its matrix's, by name); runs of no job are left as they are."""
    wanted = sorted({run.prompt_hash for run in runs if run.job_id is not None})
    if not wanted:
        return runs
    texts = store.prompt_texts(wanted)
    records = []
    for run in runs:
        record: dict = {}
        for field in dataclasses.fields(run):
            record[field.name] = getattr(run, field.name)
            if field.name == "prompt_name":
                record["prompt_text"] = texts.get(run.prompt_hash) if run.job_id else None
        records.append(record)
    return records


def _record(row: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        # Not `dataclasses.asdict`: its deep copy of every JSON value was most of an export.
        return {name: getattr(row, name) for name in _field_names(type(row))}
    return dict(row)


@functools.cache
def _field_names(row_type: type) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(row_type))


def _write(records: Sequence[dict[str, Any]], fmt: str, handle: TextIO) -> None:
    if fmt == "json":
        handle.write(jsontext.dumps(records, indent=1, default=_json_default))
        handle.write("\n")
        return
    # No runs still gets the header, so a script reading the columns finds them.
    columns = list(records[0]) if records else [field.name for field in dataclasses.fields(RunRow)]
    writer = csv.DictWriter(handle, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({key: _csv_value(value) for key, value in record.items()})


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot export {type(value).__name__}")


def _csv_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | dict | tuple):
        return jsontext.dumps(value, separators=(",", ":"))
    return value
