"""The markdown record, its PNG plots and raw CSV, directly and through `specfleet report`."""

from __future__ import annotations

import csv
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.errors import UserError
from specfleet.report.record import write_record
from tests.report.conftest import AFTER_ID, DEMO_ID

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_record_sections_plots_and_csv(store, tmp_path) -> None:
    now = datetime.now(UTC)
    store.record_load_samples("h1", [{"t": now, "load1": x} for x in (1.0, 3.0, 2.0)], DEMO_ID)
    store.upsert_host({"name": "h1", "kind": "linux-cpu", "os": "Linux", "arch": "x86_64",
                       "chip": "Xeon", "memory_gb": 24.0, "versions": {"python": "3.11.7"}})
    files = write_record(store, DEMO_ID, tmp_path / "rec")
    text = files.markdown.read_text()
    for heading in ("# Benchmark record: demo (`demo-000001`)", "## Method", "## Environment",
                    "## Prompts", "### Plain decoding, tok/s (median) — h1/toy/cpu",
                    "### Prompt lookup over plain — h2/toy/cpu", "### Across targets",
                    "## Parity against plain (every repetition against plain's first)",
                    "## Plain replies across targets", "## Load average over the run",
                    "## Plots", "## Raw per-run data (plan order)"):
        assert heading in text, heading
    assert "| script | graded | 1.50x ±2.7% gain = | 1.50x ±2.7% gain = |" in text
    assert ("| h2/toy/cpu | script | copy | graded | diverges at token 5 (char 5) in repeat 0 |"
            in text)
    assert "| copy | 79cc5fcbf139 |" in text
    assert "| h1 | linux-cpu | Linux x86_64 | Xeon | 24 GB |" in text
    assert "| h1 | 3 | 2.00 | 1.00–3.00 |" in text  # the worker's load series  # sha256 of the prompt text, shortened
    assert "![speedup-h1-toy-cpu.png](speedup-h1-toy-cpu.png)" in text
    names = sorted(p.name for p in files.plots)
    assert names == ["runs-h1-toy-cpu.png", "runs-h2-toy-cpu.png", "speedup-h1-toy-cpu.png",
                     "speedup-h2-toy-cpu.png"]
    for path in files.plots:
        assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 5000
    raw = list(csv.DictReader(files.csv.open()))
    assert len(raw) == 42 and {r["status"] for r in raw} == {"done"}
    # raw rows, parity, speed-up interval
    assert text.count("| h1/toy/cpu | script | copy | graded |") == 3 + 1 + 1


def test_unknown_matrix(store, tmp_path) -> None:
    with pytest.raises(UserError, match="nope-1"):
        write_record(store, "nope-1", tmp_path)
    assert not any(tmp_path.iterdir())


def test_report_cli_writes_and_prints_paths(db_path, tmp_path) -> None:
    out = tmp_path / "r"
    result = CliRunner().invoke(app, ["report", DEMO_ID, "--out", str(out), "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    assert f"record: {out / (DEMO_ID + '.md')}" in result.output
    assert (out / "runs.csv").exists()
    bad = CliRunner().invoke(app, ["report", "nope-1", "--out", str(out), "--db", str(db_path)])
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1
    afile = tmp_path / "file"
    afile.write_text("x")
    clash = CliRunner().invoke(app, ["report", DEMO_ID, "--out", str(afile), "--db",
                                     str(db_path)])
    assert clash.exit_code == 2 and "--out" in clash.stderr


@pytest.mark.parametrize("fails_at", ["the CSV", "a plot"])
def test_a_write_that_fails_leaves_no_half_record(store, tmp_path, monkeypatch, fails_at) -> None:
    import errno

    import specfleet.report.record as record

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    kept = tmp_path / "kept"
    write_record(store, DEMO_ID, kept)  # this matrix's earlier record, rewritten below
    before = {p.name: p.read_bytes() for p in kept.iterdir()}
    monkeypatch.setattr(record, "export_runs" if fails_at == "the CSV" else "write_plots", full)
    with pytest.raises(UserError, match="rec: cannot write the record .No space left on device.; "
                                        "expected a folder you can write with room for it"):
        write_record(store, DEMO_ID, tmp_path / "rec")
    assert not (tmp_path / "rec").exists()  # the folder it made is gone again
    with pytest.raises(UserError):
        write_record(store, DEMO_ID, kept)
    assert {p.name: p.read_bytes() for p in kept.iterdir()} == before  # no staging left



def test_a_folder_holding_another_matrixs_record_is_refused(db_path, tmp_path) -> None:
    # Its markdown would have shown this matrix's plots: runs.csv and the PNGs share names.
    out = tmp_path / "r"
    first = CliRunner().invoke(app, ["report", DEMO_ID, "--out", str(out), "--db", str(db_path)])
    assert first.exit_code == 0, first.output
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = CliRunner().invoke(app, ["report", DEMO_ID, "--out", str(out), "--db", str(db_path)])
    assert again.exit_code == 0, again.output  # its own record: replaced
    other = CliRunner().invoke(app, ["report", AFTER_ID, "--out", str(out), "--db", str(db_path)])
    assert other.exit_code == 2 and other.stderr == (
        f"error: {out}: holds the record of matrix {DEMO_ID!r} (runs.csv, plots of the same "
        f"names); expected an empty folder or this matrix's own, e.g. {out.parent / AFTER_ID}\n")
    assert {p.name: p.read_bytes() for p in out.iterdir()}.keys() == before.keys()


def test_record_shows_each_verdicts_interval_and_reads_load_per_run(store, tmp_path) -> None:
    # The record said "gain" without the interval behind it (the web view shows it on hover),
    # and its load table's "per-run n" read 48 beside 24 runs: two readings a run.
    text = write_record(store, DEMO_ID, tmp_path / "rec").markdown.read_text()
    assert ("| h1/toy/cpu | script | copy | graded | 1.50x | 90% interval 1.47-1.54x | gain "
            "| 3/3 |") in text
    assert ("| h1/toy/cpu | constant | copy | graded | 4.00x | 90% interval 4.00-4.00x | "
            "gain LOOP | 3/3 |") in text
    assert text.index("### Speed-up intervals") < text.index("## Plots")
    assert "| host | sampled n | sampled median | sampled range | per-run readings |" in text
    assert "reading just before and just after it (two a run)" in text
    load = text[text.index("## Load average"):text.index("## Host conditions")]
    (h1,) = [line for line in load.splitlines() if line.startswith("| h1 | ")]
    assert h1.split(" | ")[4] == "48" and h1.endswith(" | 0 of 24 |")  # 24 runs, 2 readings each
