"""`specfleet job resume` on the embedded fleet (real Ray, toy engine, a real SQLite file): a
job cut short runs its prompts not done (pending, interrupted and failed, as `matrix resume`
re-queues them) and keeps its done reply as stored. One fleet start; slow."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specfleet.jobs.run import RunSpec, Target
from specfleet.store import open_store
from tests.store.factory import result

SPECFLEET = str(Path(sys.executable).with_name("specfleet"))
TOY = Target(host="h1", engine="toy", device="cpu")


def _cut_job(url: str) -> str:
    """As a killed `job generate` leaves it: line-1 done, line-2 cut mid-run, line-3 failed,
    line-4 never sent."""
    runs = [RunSpec(run_key=f"k{i}", target=TOY, model="script", prompt_name=f"line-{i}",
                    prompt_text=f"abcdefgh {i}", arm="plain", max_tokens=4)
            for i in range(1, 5)]
    with open_store(url) as store:
        job_id = store.create_generation_job("batch", TOY, "script", runs, driver_id="gone",
                                             lease_s=0.3)
        store.record_result(result(runs[0], 42.0, text="kept reply"))
        store.mark_running("k2", "gone", 0.3)
        store.mark_running("k3", "gone", 0.3)
        store.mark_failed("k3", "worker ran out of memory")
    time.sleep(0.4)  # the killed driver's lease runs out: the job reads interrupted
    return job_id


@pytest.mark.timeout(240)
def test_resume_runs_the_prompts_not_done_and_keeps_the_done_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    job_id = _cut_job(url)
    env = {**os.environ, "SPECFLEET_HOST": "h1", "SPECFLEET_HOME": str(tmp_path / "home")}
    ran = subprocess.run([SPECFLEET, "job", "resume", job_id, "--embedded", "--db", url],
                         capture_output=True, text=True, env=env, timeout=200)
    assert ran.returncode == 0, ran.stderr
    said = ran.stderr.splitlines()
    assert f"job {job_id}: resuming 3 of 4 prompts (1 pending, 1 failed, 1 interrupted); " \
           "1 done kept" in said, said
    progress = [line for line in said if line.startswith("[")]
    assert [re.sub(r":.*", "", line) for line in progress] == [
        "[1/3] toy line-2 plain", "[2/3] toy line-3 plain", "[3/3] toy line-4 plain"], said
    assert said[-1] == f"job id: {job_id} (done)"
    assert ran.stdout.startswith("== line-1: 3 tokens, 42.0 tok/s (plain)\nkept reply\n"
                                 "== line-2: 4 tokens,"), ran.stdout
    with open_store(url, read_only=True) as store:
        job = store.get_generation_job(job_id)
        kept = store.runs(job=job_id, run_key="k1")[0]
    assert (job.status, job.counts) == ("done", {"done": 4})
    assert (kept.output_text, kept.tok_per_s) == ("kept reply", 42.0)
    again = subprocess.run([SPECFLEET, "job", "resume", job_id, "--embedded", "--db", url],
                           capture_output=True, text=True, env=env, timeout=60)
    assert (again.returncode, again.stderr) == (
        0, f"job {job_id}: all 4 prompts are done; nothing to resume\n")
