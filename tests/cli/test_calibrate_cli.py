"""`specfleet calibrate --store` through the real Typer app, with the model load and the
measuring stubbed: what is refused before minutes of measuring, and a table never lost."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from specfleet.cli import calibrate
from specfleet.cli.main import app
from specfleet.engine.widthcosts import WidthCosts
from specfleet.store.errors import StoreUnreachable

MODEL = "smollm2-135m"
TABLE = WidthCosts(engine="torch", device="cpu", prompt_len=8, pipelined_ms=2.0,
                   sync_ms=(2.0, 3.0), ratio=(1.0, 1.5), ratio_lo=(0.9, 1.4),
                   ratio_hi=(1.1, 1.6))


def invoke(*args: str):
    return CliRunner().invoke(app, ["calibrate", "-m", MODEL, "--engine", "torch", *args])


@pytest.fixture
def measured(monkeypatch) -> list:
    """No model loads; every measuring is recorded and gives `TABLE`."""
    calls: list = []
    loaded = SimpleNamespace(alias=MODEL, path="/models/smollm2", runner=None, weights_hash="h")
    monkeypatch.setattr(calibrate, "load_model", lambda *_: loaded)

    def measure(runner, settings, **_):
        calls.append(settings)
        return TABLE

    monkeypatch.setattr("specfleet.engine.widthcosts.measure_width_costs", measure)
    return calls


def test_store_refuses_a_table_too_narrow_for_the_calibrated_policy(measured, tmp_path):
    db = tmp_path / "c.db"
    result = invoke("--quick", "--max-width", "1", "--store", "--db", str(db))
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: --max-width 1: a stored table needs at least widths 1-2 (the calibrated policy "
        "refuses a narrower one); expected --max-width 2 or more with --store"]
    assert measured == [] and not db.exists()


def test_job_calibrate_refuses_a_table_too_narrow_before_any_fleet(tmp_path):
    # It stored every table it measured: one of width 1 failed each later calibrated run.
    db = tmp_path / "c.db"
    result = CliRunner().invoke(app, ["job", "calibrate", "--model", MODEL, "--max-width", "1",
                                      "--address", "127.0.0.1:1", "--db", str(db)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: --max-width 1: a stored table needs at least widths 1-2 (the calibrated policy "
        "refuses a narrower one); expected --max-width 2 or more (each table is stored)"]
    assert not db.exists()
    # Its help gave `1<=x<=65` alone, where 1 is refused every time (it stores each table).
    usage = CliRunner().invoke(app, ["job", "calibrate", "--help"], terminal_width=200).stdout
    assert "at least 2 for a table that is stored" in " ".join(usage.split())


def test_store_reaches_its_server_before_measuring(measured, monkeypatch):
    monkeypatch.setenv("SPECFLEET_STORE_RETRY_S", "2")
    result = invoke("--quick", "--max-width", "3", "--store", "--db",
                    "postgresql+psycopg://u:p@127.0.0.1:1/x")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --db: cannot reach PostgreSQL at "), line
    assert measured == []  # it measured for minutes, then lost the table


def test_the_table_is_printed_before_it_is_stored(measured, monkeypatch, tmp_path):
    def unreachable(*_):
        raise StoreUnreachable("--db: cannot reach the store")

    monkeypatch.setattr(calibrate, "store_table", unreachable)
    result = invoke("--quick", "--max-width", "2", "--store", "--db", str(tmp_path / "c.db"))
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines()[-1] == "error: --db: cannot reach the store"
    assert TABLE.format_table() in result.stdout  # a failed write does not lose the table


def test_verify_blocks_past_the_context_blame_max_width_at_one_rep(measured, tmp_path):
    """At --reps 1 (its least) the blocks only shrink with --max-width: it said 'expected a
    smaller --reps' of `--reps 1`."""
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 256}')
    result = CliRunner().invoke(app, ["calibrate", "-m", str(tmp_path), "--engine", "torch",
                                      "--quick", "--max-width", "65"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: --max-width 65: a round needs 270 positions"), line
    assert line.endswith("has a context of 256 tokens; expected a smaller --max-width"), line
    # At --reps 2 a round too long even at one rep blamed --reps, then --max-width at 1.
    again = CliRunner().invoke(app, ["calibrate", "-m", str(tmp_path), "--engine", "torch",
                                     "--reps", "2", "--max-width", "65", "--prompt-len", "100"])
    assert again.exit_code == 2 and "expected a smaller --max-width" in again.stderr, again.output
    fits = CliRunner().invoke(app, ["calibrate", "-m", str(tmp_path), "--engine", "torch",
                                    "--reps", "3", "--max-width", "60", "--prompt-len", "20"])
    assert "error: --reps 3: a round needs 292 positions" in fits.stderr, fits.output
    assert measured == []


def test_a_stdout_that_fails_loses_no_stored_table(measured, monkeypatch, tmp_path):
    """`calibrate --store | less`, quit before the end: minutes of measuring, then the write
    to stdout failed first and nothing was stored."""
    stored: list = []

    def closed(*_):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(calibrate, "print_table", closed)
    monkeypatch.setattr(calibrate, "store_table", lambda *args: stored.append(args) or "c.db")
    result = invoke("--quick", "--max-width", "2", "--store", "--db", str(tmp_path / "c.db"))
    assert result.exit_code == 1, result.output  # click ends a broken pipe so
    assert len(stored) == 1 and "calibrate: stored in c.db" in result.stderr


def test_a_table_measured_on_a_busy_host_is_flagged(measured, monkeypatch):
    # A busy box's table (a pipelined step of 154 ms against 60 ms decoding) was stored and
    # read by later runs without a word.
    from specfleet.workers.quiet import QuietCheck

    def busy(self, threshold_per_core=0.25, fresh=False):
        return QuietCheck(False, 1.4, 0.5, "other processes keep 1.40 cores busy (limit 0.50)")

    monkeypatch.setattr(calibrate.ForeignCpuMeter, "check", busy)
    result = invoke("--quick", "--max-width", "2")
    assert result.exit_code == 0, result.output
    assert ("calibrate: warning: measured on a busy host (other processes keep 1.40 cores busy "
            "(limit 0.50)); measure again when it is quiet") in result.stderr
    monkeypatch.setattr(calibrate.ForeignCpuMeter, "check",
                        lambda *_, **__: QuietCheck(True, 0.0, 0.5, ""))
    assert "busy host" not in invoke("--quick", "--max-width", "2").stderr


def test_a_store_outage_at_the_write_is_waited_out_and_the_table_stored(measured, monkeypatch,
                                                                         tmp_path):
    # The write was not retried: a store that blinked at that moment lost the table.
    from sqlalchemy.exc import OperationalError

    from specfleet.cluster import storewriter
    from specfleet.store import open_store
    from specfleet.store.series import StoreSeries

    monkeypatch.setattr(storewriter, "FIRST_BACKOFF_S", 0.01)
    record, refusals = StoreSeries.record_calibration, [2]

    def blinking(self, *args, **kwargs):
        if refusals[0]:
            refusals[0] -= 1
            raise OperationalError("INSERT", {}, Exception("connection refused"))
        return record(self, *args, **kwargs)

    monkeypatch.setattr(StoreSeries, "record_calibration", blinking)
    db = tmp_path / "c.db"
    result = invoke("--quick", "--max-width", "2", "--store", "--db", str(db))
    assert result.exit_code == 0, result.output
    waits = [line for line in result.stderr.splitlines() if line.startswith("store: ")]
    assert len(waits) == 2 and "store unreachable (" in waits[0], result.stderr
    assert "calibrate: stored in" in result.stderr
    with open_store(str(db)) as store:
        assert [r.ratio for r in store.latest_calibration("torch", "cpu", MODEL)] == [1.0, 1.5]


def test_a_malformed_store_retry_is_said_before_minutes_of_measuring(measured, monkeypatch,
                                                                     tmp_path):
    monkeypatch.setenv("SPECFLEET_STORE_RETRY_S", "soon")
    result = invoke("--quick", "--max-width", "2", "--store", "--db", str(tmp_path / "c.db"))
    assert result.exit_code == 2 and measured == [], result.output
    assert result.stderr.startswith("error: SPECFLEET_STORE_RETRY_S: expected seconds"), result.stderr


def test_a_flagged_width_is_said_as_judged_on_the_re_measure_alone(capsys):
    # It said "not monotone within its spread", beside min and max over all rounds that
    # overlap where the re-measure's own rounds fell.
    flagged = dataclasses.replace(TABLE, n=6, flagged=(2,))
    loaded = SimpleNamespace(alias=MODEL, path="/models/smollm2")
    calibrate.print_table(loaded, flagged, 1.0, as_json=False)
    out = capsys.readouterr().out.splitlines()
    assert out[-2] == ("ratio: median over the 6 rounds; min, max: its lowest and highest "
                       "round (a range, not an interval)")
    assert out[-1] == ("not monotone: widths 2 (in the re-measure's own rounds each one's "
                       "highest ratio lay below the previous measured width's lowest; min "
                       "and max above are over all 6 rounds)")
