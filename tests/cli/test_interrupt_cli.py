"""Commands cut short, as users meet them: a `job generate` stopped by Ctrl-C names its job,
and `matrix resume` finishes a matrix whose driver stopped after its last result.

Real SQLite files and the real `specfleet` command in a subprocess; the Ctrl-C test runs the
embedded fleet (toy engine) and is slow.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from specfleet.cli import job as job_cli
from specfleet.jobs.run import Target
from specfleet.store import open_store
from tests.store.factory import grid, result

SPECFLEET = os.path.join(os.path.dirname(sys.executable), "specfleet")


def specfleet(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SPECFLEET, *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_resume_finishes_a_matrix_whose_driver_stopped_after_its_last_result(tmp_path) -> None:
    # Killed (or a Ctrl-C) after storing its last result but before finishing the matrix, a
    # driver left it `interrupted` with every run done: `status` said "resume with", and
    # `resume` said "nothing to resume" and left it interrupted for good.
    url = f"sqlite:///{tmp_path / 's.db'}"
    runs = [run.model_copy(update={"matrix_id": "m-1"}) for run in grid(repeats=1)]
    with open_store(url) as store:
        store.create_matrix("m", {"name": "m"}, runs, matrix_id="m-1")
        store.claim_matrix("m-1", "box:4242:dead", lease_s=0.001)  # a lease nobody renews
        for run in runs:
            store.record_result(result(run))
        assert store.get_matrix("m-1").status == "interrupted"
    resumed = specfleet("matrix", "resume", "m-1", "--db", url)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr == ("matrix m-1: all 2 runs are done; it read interrupted (its "
                              "driver stopped before finishing it), now done\n")
    with open_store(url, read_only=True) as store:
        assert store.get_matrix("m-1").status == "done"
    status = specfleet("matrix", "status", "m-1", "--db", url)
    assert status.returncode == 0 and "resume with" not in status.stdout, status.stdout
    again = specfleet("matrix", "resume", "m-1", "--db", url)
    assert (again.returncode, again.stderr) == (
        0, "matrix m-1: all 2 runs are done; nothing to resume\n")


class View:
    """What `_run_job` reads of the fleet here: no host to record, no worker called."""

    workers: dict = {}
    machines: dict = {}

    def record_hosts(self, store) -> None:
        pass


def stopped(*args, **kwargs):
    raise KeyboardInterrupt


def run_job_stopped(store, monkeypatch) -> BaseException:
    """`_run_job` on a real store, Ctrl-C landing in its dispatch."""
    runs = grid(repeats=1, targets=(TOY,))
    monkeypatch.setattr("specfleet.jobs.plan.plan_generate_runs", lambda *args: runs)
    monkeypatch.setattr(job_cli, "_dispatch", stopped)
    job = SimpleNamespace(model="script", model_dump=lambda **kwargs: {})
    try:
        job_cli._run_job(store, View(), job, TOY, "batch", no_progress=True)
    except KeyboardInterrupt as err:  # a bare one would end pytest's session
        return err
    raise AssertionError("not interrupted")


TOY = Target(host="h1", engine="toy", device="cpu")


def test_a_second_ctrl_c_while_the_job_is_marked_still_names_it(tmp_path, monkeypatch) -> None:
    with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        monkeypatch.setattr(store, "finish_generation_job", stopped)
        caught = run_job_stopped(store, monkeypatch)
        assert isinstance(caught, job_cli.JobInterrupted), repr(caught)
        job_id = caught.job_id
        assert str(caught) == (
            f"job {job_id} interrupted before it could be marked so (it reads interrupted once "
            f"its lease runs out); `specfleet job resume {job_id}` runs the prompts not done, "
            f"`specfleet job show {job_id}` prints the replies it finished")
        assert store.get_generation_job(job_id).status == "running"  # until the lease ends


def lines_until(process: subprocess.Popen, wanted: str, timeout_s: float) -> list[str]:
    """Stderr lines of `process` until one starts with `wanted` (bounded)."""
    assert process.stderr is not None
    said: list[str] = []
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not any(s.startswith(wanted) for s in said):
        if selector.select(timeout=1.0):
            line = process.stderr.readline()
            if not line:
                break
            said.append(line)
    return said


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_ctrl_c_during_a_job_names_it_and_leaves_it_interrupted(tmp_path: Path) -> None:
    # It ended in a bare "interrupted": the job's id, where its finished replies are, was
    # left to `job list`.
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(f'{{"name": "p{i}", "prompt": "abcdefgh"}}\n' for i in range(3)))
    url = f"sqlite:///{tmp_path / 's.db'}"
    env = {**os.environ, "SPECFLEET_HOST": "h1", "SPECFLEET_HOME": str(tmp_path / "home")}
    process = subprocess.Popen(
        [SPECFLEET, "job", "generate", "--prompts", str(batch), "--target", "h1/toy",
         "--model", "script:300ms", "--policy", "plain", "--max-tokens", "6", "--embedded",
         "--db", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        said = lines_until(process, "[1/3]", timeout_s=150)
        assert said and said[-1].startswith("[1/3]"), said
        time.sleep(0.5)  # the second prompt is sent (its run takes about 2 s)
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    job_id = re.search(r"gen-batch-[0-9a-f]+", rest)
    assert process.returncode == 130 and job_id is not None, rest
    assert rest.splitlines()[-1] == (
        f"interrupted: job {job_id[0]} interrupted; `specfleet job resume {job_id[0]}` runs the "
        f"prompts not done, `specfleet job show {job_id[0]}` prints the replies it finished"), rest
    assert "Traceback" not in rest
    with open_store(url, read_only=True) as store:
        assert store.get_generation_job(job_id[0]).status == "interrupted"
        first, second, third = (r.status for r in store.runs(job=job_id[0]))
    # The second is in flight, or not yet sent on a busy box; never left `running`.
    assert (first, third) == ("done", "pending") and second in ("interrupted", "pending")
    shown = specfleet("job", "show", job_id[0], "--db", url, env=env)
    assert shown.returncode == 0 and shown.stdout.startswith("== p0: 6 tokens"), shown.stdout
    session = f"_{process.pid}"  # Ray's session folder ends in the driver's pid
    left = [p.pid for p in psutil.process_iter(["cmdline"])
            if any(session + "/" in arg or arg.endswith(session)
                   for arg in p.info["cmdline"] or [])]
    assert left == [], left
