"""`specfleet job resume` where no fleet is needed, a job's progress lines and its replies in
`results -o json`: a job cut short stayed `interrupted` for good (no resume), its progress
lines said `rep 0` of a batch that has no repeats, and its JSON did not say what each reply
answered. Real SQLite files; the resume on a fleet is `test_job_resume_fleet.py`."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.cluster.progress import run_words
from specfleet.jobs.run import Target
from specfleet.store import open_store
from tests.store.factory import HOST_B, PROMPTS, result, spec


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _job(url: str, *, lease_s: float = 30.0, done: int = 2) -> tuple[str, list]:
    """A job of two prompts, `done` of them done, its driver alive for `lease_s`."""
    runs = [spec(f"r{i}", target=HOST_B, prompt=p) for i, p in enumerate(PROMPTS)]
    with open_store(url) as store:
        job_id = store.create_generation_job("batch", HOST_B, "m1", runs, driver_id="box:1:aa",
                                             lease_s=lease_s)
        for run in runs[:done]:
            store.record_result(result(run, text=f"reply to {run.prompt_name}"))
    return job_id, runs


def test_an_unknown_job_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    _job(url)
    out = _invoke("job", "resume", "gen-nope-000000", "--db", url)
    assert (out.exit_code, out.stdout) == (2, ""), out.output
    assert out.stderr.startswith("error: no generation job 'gen-nope-000000' in "), out.stderr
    assert len(out.stderr.splitlines()) == 1 and "Traceback" not in out.output


def test_a_job_whose_replies_are_all_done_is_finished_and_said_so(tmp_path: Path) -> None:
    # Killed after its last reply was stored but before the job was finished: it read
    # `interrupted` with every prompt done.
    url = f"sqlite:///{tmp_path / 's.db'}"
    job_id, _ = _job(url, lease_s=0.2)
    time.sleep(0.3)
    out = _invoke("job", "resume", job_id, "--db", url)
    assert (out.exit_code, out.stdout) == (0, ""), out.output
    assert out.stderr == (f"job {job_id}: all 2 prompts are done; it read interrupted (its "
                          "driver stopped before finishing it), now done\n")
    again = _invoke("job", "resume", job_id, "--db", url)
    assert (again.exit_code, again.stderr) == (
        0, f"job {job_id}: all 2 prompts are done; nothing to resume\n")
    with open_store(url, read_only=True) as store:
        assert store.get_generation_job(job_id).status == "done"


def test_a_resume_beside_a_live_driver_takes_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    job_id, runs = _job(url, done=1)
    with open_store(url) as store:
        store.mark_running(runs[1].run_key, "box:1:aa", 30.0)
    out = _invoke("job", "resume", job_id, "--db", url)
    assert (out.exit_code, out.stdout) == (1, ""), out.output
    assert out.stderr.startswith(f"job {job_id}: driver box:1:aa still runs it (heartbeat "
                                 "lease until "), out.stderr
    assert out.stderr.endswith(" UTC); took 0 prompts, skipped 1\n"), out.stderr
    with open_store(url, read_only=True) as store:
        job = store.get_generation_job(job_id)
    assert (job.status, job.driver_id, job.counts) == ("running", "box:1:aa",
                                                      {"done": 1, "running": 1})


def test_a_job_run_is_said_without_a_repeat_and_a_matrix_run_with_it() -> None:
    toy = Target(host="h1", engine="toy", device="cpu")
    job_run = spec("k1", "auto", target=toy, prompt="story")
    assert run_words(job_run, name_hosts=False, name_models=False) == "toy story auto"
    matrix_run = job_run.model_copy(update={"matrix_id": "m-1", "repeat": 2})
    assert run_words(matrix_run, name_hosts=False, name_models=False) == "toy story auto rep 2"


def test_results_json_gives_each_reply_of_a_job_its_prompt_text(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    job_id, _ = _job(url)
    matrix_run = spec("m0", matrix_id="m-1")
    with open_store(url) as store:
        store.create_matrix("m", {"name": "m"}, [matrix_run], matrix_id="m-1")
        store.record_result(result(matrix_run))
    out = _invoke("results", "--job", job_id, "-o", "json", "--db", url)
    assert out.exit_code == 0, out.output
    records = json.loads(out.stdout)
    assert [(r["prompt_name"], r["prompt_text"], r["output_text"]) for r in records] == [
        (name, text, f"reply to {name}") for name, text in PROMPTS.items()]
    assert list(records[0])[list(records[0]).index("prompt_name") + 1] == "prompt_text"
    both = json.loads(_invoke("results", "-o", "json", "--db", url).stdout)
    assert [r["prompt_text"] for r in both] == [*PROMPTS.values(), None]  # one set of fields
    alone = json.loads(_invoke("results", "--matrix", "m-1", "-o", "json", "--db", url).stdout)
    assert "prompt_text" not in alone[0]  # a matrix's records as they were
    csv_out = _invoke("results", "--job", job_id, "-o", "csv", "--db", url).stdout
    assert "prompt_name,prompt_text," in csv_out.splitlines()[0]


def test_a_job_of_another_host_is_refused_before_the_embedded_fleet(tmp_path: Path,
                                                                     monkeypatch) -> None:
    monkeypatch.setenv("SPECFLEET_HOST", "h1")
    url = f"sqlite:///{tmp_path / 's.db'}"
    job_id, _ = _job(url, lease_s=0.2, done=1)
    time.sleep(0.3)
    out = _invoke("job", "resume", job_id, "--embedded", "--db", url)
    assert (out.exit_code, out.stderr) == (2, (
        f"error: job {job_id}: spark1 is not in the embedded fleet, which is this machine "
        "alone (h1); expected h1 or a fleet's --address\n")), out.output
    with open_store(url, read_only=True) as store:  # left as it was: not claimed
        job = store.get_generation_job(job_id)
    assert (job.status, job.driver_id, job.counts) == ("interrupted", "box:1:aa",
                                                      {"done": 1, "pending": 1})
