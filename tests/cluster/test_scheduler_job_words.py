"""What the scheduler tells a user about a generation job's runs (no matrix): the command that
runs a lost run again, and the name another driver waiting for the machine is given."""

from __future__ import annotations

from collections import deque

from specfleet.cluster import scheduler
from specfleet.cluster.hoststate import HostState
from specfleet.cluster.progress import resumed_by
from specfleet.cluster.scheduler import SchedulerOptions, _leases
from specfleet.jobs.run import RunSpec, Target


def _spec(matrix_id: str | None) -> RunSpec:
    return RunSpec(run_key="k", matrix_id=matrix_id,
                   target=Target(host="h1", engine="toy", device="cpu"), model="script",
                   prompt_name="line-1", prompt_text="one two", arm="auto", max_tokens=4)


def test_a_lost_run_names_the_resume_of_what_it_belongs_to():
    assert resumed_by(_spec("nightly-1")) == "matrix resume"
    assert resumed_by(_spec(None)) == "job resume"


def test_the_machine_leases_are_named_for_a_matrix_or_a_job(monkeypatch):
    # The name (the leases' `holder`) is what another driver waiting for the machine is told.
    monkeypatch.setattr(scheduler.locks, "Leases", lambda *args: args)  # no Ray lock actor
    for matrix_id, said in (("nightly-1", "matrix nightly-1"), (None, "job nightly-1")):
        hosts = {"h1": HostState("h1", None, "h1", deque([_spec(matrix_id)]))}
        assert _leases("nightly-1", SchedulerOptions(), hosts)[3] == said
