"""`specfleet job list` / `job show`: a stored generation job read back, as its statuses read.

Before them a job's replies were printed once, at the end of `job generate`, and a job whose
driver died could only be found through its runs in `results`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store import open_store
from tests.store.factory import HOST_B, result, spec


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _store_jobs(url: str) -> tuple[str, str]:
    """A finished job (one reply done, one failed) and one whose driver died mid-run."""
    with open_store(url) as store:
        runs = [spec(f"d{i}", target=HOST_B, prompt=p) for i, p in enumerate(["edit_fn", "story"])]
        done = store.create_generation_job("batch", HOST_B, "m1", runs)
        store.record_result(result(runs[0], 42.0, text="def g(x):\n    return x"))
        store.record_result(result(runs[1], status="failed").model_copy(
            update={"error": "model ran out of memory"}))
        store.finish_generation_job(done, "failed")
        time.sleep(0.01)  # submitted later: listed first
        cut = [spec("c0", target=HOST_B)]
        dead = store.create_generation_job("night", HOST_B, "m1", cut, driver_id="gone",
                                           lease_s=0.2)
        store.mark_running("c0", "gone", 0.2)
    time.sleep(0.3)  # both leases run out
    return done, dead


def test_job_list_shows_each_job_newest_first_with_its_status_as_read(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    done, dead = _store_jobs(url)
    listed = _invoke("job", "list", "--db", url)
    assert listed.exit_code == 0, listed.output
    first, second = listed.stdout.splitlines()
    assert first.startswith(dead) and "night" in first and "spark1/torch/cuda  m1" in first
    assert " interrupted " in first and "0/1 done" in first  # its driver's lease ran out
    assert second.startswith(done) and " failed " in second and "1/2 done" in second
    only = _invoke("job", "list", "--db", url, "--limit", "1")
    assert only.stdout.splitlines() == [first]


def test_job_show_prints_the_replies_then_the_job(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    done, dead = _store_jobs(url)
    shown = _invoke("job", "show", done, "--db", url)
    assert shown.exit_code == 0, shown.output
    lines = shown.stdout.splitlines()
    assert lines[:4] == ["== edit_fn: 3 tokens, 42.0 tok/s (plain)", "def g(x):",
                         "    return x", "== story: failed: model ran out of memory"]
    assert lines[4].startswith(f"job {done} (batch): failed; 1 done, 1 failed; "
                               "spark1/torch/cuda m1; submitted ")
    assert ", finished " in lines[4]
    cut = _invoke("job", "show", dead, "--db", url).stdout.splitlines()
    assert cut[0] == "== edit_fn: interrupted"  # no ": " before an error it has not
    assert cut[1].startswith(f"job {dead} (night): interrupted; 1 interrupted; ")


def test_an_unknown_or_short_job_id_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    done, dead = _store_jobs(url)
    for given, said in [
        ("nosuch", "expected an id that `specfleet job list` shows"),
        (done[:10], f"expected a whole id (did you mean {done!r}?)"),
        ("gen-", f"expected a whole id ('gen-' begins {done!r}, {dead!r})"),  # ambiguous
    ]:
        shown = _invoke("job", "show", given, "--db", url)
        assert shown.exit_code == 2, shown.output
        assert shown.stderr == f"error: no generation job {given!r} in {url}; {said}\n"


def test_an_empty_store_has_no_jobs_and_a_read_makes_no_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/s.db"
    with open_store(url):
        pass
    empty = _invoke("job", "list", "--db", url)
    assert (empty.stdout, empty.stderr) == ("", "no generation jobs yet\n")  # no id to cut
    missing = _invoke("job", "list", "--db", f"sqlite:///{tmp_path}/none.db")
    assert missing.exit_code != 0 and not (tmp_path / "none.db").exists()


def test_results_filters_by_job(tmp_path: Path) -> None:
    # `results` could filter by matrix only: a job's runs were mixed with every other's.
    url = f"sqlite:///{tmp_path}/s.db"
    done, dead = _store_jobs(url)
    shown = _invoke("results", "--db", url, "--job", done, "-o", "json")
    assert shown.exit_code == 0, shown.output
    assert [(r["job_id"], r["run_key"]) for r in json.loads(shown.stdout)] == [
        (done, "d0"), (done, "d1")]
    both = _invoke("results", "--db", url, "--job", done, "--job", dead, "-o", "json")
    assert sorted(r["run_key"] for r in json.loads(both.stdout)) == ["c0", "d0", "d1"]
    typo = _invoke("results", "--db", url, "--job", "gen-nosuch")
    assert typo.exit_code == 2 and typo.stderr.startswith("error: no generation job 'gen-nosuch'")


def test_job_generate_blames_ngram_min_given_past_ngram_max_default(tmp_path: Path) -> None:
    # It named --prompt-lookup-ngram-max, a flag not given ("ngram-max (3) must be >= ...").
    batch = tmp_path / "b.jsonl"
    batch.write_text('{"prompt": "x"}\n')
    out = _invoke("job", "generate", "--prompts", str(batch), "--target", "a/torch",
                  "--prompt-lookup-ngram-min", "5", "--db", f"sqlite:///{tmp_path}/s.db")
    assert out.exit_code == 2 and out.stdout == "", out.output
    assert out.stderr == ("error: --prompt-lookup-ngram-min (5) must be <= ngram-max (3, its "
                          "default); expected --prompt-lookup-ngram-min 3 or less, or "
                          "--prompt-lookup-ngram-max beside it\n")
    given = _invoke("job", "generate", "--prompts", str(batch), "--target", "a/torch",
                    "--prompt-lookup-ngram-min", "5", "--prompt-lookup-ngram-max", "4")
    assert given.stderr.startswith("error: --prompt-lookup-ngram-max: ngram-max (4) must be"), \
        given.output
    assert not (tmp_path / "s.db").exists()


def test_a_batch_from_standard_input_is_a_job_named_stdin() -> None:
    from specfleet.cli.job import _job_name

    assert (_job_name("-"), _job_name("/x/batch.jsonl")) == ("stdin", "batch")


def test_results_of_a_job_head_its_id_as_a_job_s(tmp_path: Path) -> None:
    # The job id stood under a column headed `matrix`.
    url = f"sqlite:///{tmp_path}/s.db"
    done, _ = _store_jobs(url)
    shown = _invoke("results", "--job", done, "-o", "md", "--db", url)
    assert shown.exit_code == 0, shown.output
    assert "| matrix/job | target |" in shown.stdout and f"| {done} |" in shown.stdout


def test_a_job_named_after_a_file_name_that_does_not_print_stays_one_row() -> None:
    # `$'evil\x1b[31m\nname.jsonl'`: its escape sequence and line break reached `job list`.
    from specfleet.cli.job import _job_name

    assert _job_name("/x/evil\x1b[31m\nname.jsonl") == "evil_[31m_name"


def test_job_times_say_they_are_utc(tmp_path: Path) -> None:
    # `submitted 2026-12-07 09:57` read as local time, hours off east or west of UTC (the
    # web view heads the same times "(UTC)").
    url = f"sqlite:///{tmp_path}/s.db"
    done, _ = _store_jobs(url)
    with open_store(url, read_only=True) as store:
        job = store.get_generation_job(done)
    stamp = f"{job.submitted_at:%Y-%m-%d %H:%M} UTC"
    last = _invoke("job", "show", done, "--db", url).stdout.splitlines()[-1]
    assert f"; submitted {stamp}, finished " in last and last.endswith(" UTC"), last
    listed = _invoke("job", "list", "--db", url).stdout.splitlines()
    assert listed[1].endswith(f"  {stamp}"), listed
