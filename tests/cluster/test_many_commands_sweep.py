"""Several specfleet commands started at once on one machine (two terminals, a script with
`&`): each starts its own embedded fleet in the shared Ray dir, and what goes wrong there is
one line that names this command's own logs, never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ray.exceptions import ActorDiedError, GetTimeoutError

from specfleet.cluster import fleet, startfailures
from specfleet.errors import UserError


def _sessions(ray_dir: Path) -> Path:
    """Two embedded fleets' sessions in one Ray dir: ours, and another command's started
    after it, which `session_latest` names."""
    ours = ray_dir / f"session_2026-12-06_16-45-01_100000_{os.getpid()}"
    theirs = ray_dir / "session_2026-12-06_16-45-02_200000_999999"
    for session in (ours, theirs):
        (session / "logs").mkdir(parents=True)
    (ray_dir / "session_latest").symlink_to(theirs)
    return ours


def test_a_start_that_timed_out_names_its_own_session_not_the_latest(tmp_path: Path) -> None:
    # Four benches at once: `session_latest` named whichever fleet started last, another
    # command's logs.
    ours = _sessions(tmp_path)
    err = startfailures.embedded_start_failed(
        Exception("The current node timed out during startup. This could happen ..."),
        str(tmp_path))
    assert f"its logs: {ours}/logs)" in str(err) and "session_latest" not in str(err)


def test_no_session_yet_names_the_ray_dir(tmp_path: Path) -> None:
    assert startfailures.session_logs(str(tmp_path)) == str(tmp_path)


@pytest.fixture
def started_ray(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """`_start_embedded` up to its worker's first answer, with Ray's own start stubbed."""
    monkeypatch.setenv("SPECFLEET_RUNTIME_DIR", str(tmp_path / "rt"))
    ours = _sessions(tmp_path / "ray")
    monkeypatch.setattr(fleet, "ensure_token", lambda create: None)
    monkeypatch.setattr(fleet, "bind_loopback", lambda: None)
    monkeypatch.setattr(fleet, "_private_ray_dir", lambda preferred: str(tmp_path / "ray"))
    monkeypatch.setattr(fleet, "_init_embedded", lambda info, num_cpus, temp_dir: None)
    monkeypatch.setattr(fleet, "start_worker", lambda host, kwargs: object())
    return ours


@pytest.mark.parametrize("raised, said", [
    # Eight benches at once took ~70 s to the first answer on 2 cores; past the bound this
    # was GetTimeoutError's traceback.
    (GetTimeoutError("Get timed out: some object(s) not ready."), "did not answer within 120 s"),
    (ActorDiedError(), "died while starting (The actor died unexpectedly before finishing"),
])
def test_a_worker_that_does_not_answer_is_one_line(
    started_ray: Path, monkeypatch: pytest.MonkeyPatch, raised: Exception, said: str
) -> None:
    def silent(handle, timeout_s: float) -> dict:
        raise raised

    monkeypatch.setattr(fleet, "wait_ready", silent)
    with pytest.raises(UserError) as caught:
        fleet._start_embedded(None, "h1", None)
    line = str(caught.value)
    assert said in line and f"{started_ray}/logs" in line and "\n" not in line, line


def test_ctrl_c_while_the_claim_waits_for_the_store_ends_the_matrix_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another command holding SQLite's write lock keeps the claim waiting, where a Ctrl-C
    # left the matrix `running` under a lease nobody renews, with no resume line.
    from specfleet.cluster.outcome import RunInterrupted
    from specfleet.cluster.scheduler import run_matrix
    from specfleet.jobs.run import RunSpec, Target
    from specfleet.store import open_store

    spec = RunSpec(run_key="m-1/h1/p/plain/0", matrix_id="m-1",
                   target=Target(host="h1", engine="toy", device="cpu"), model="script",
                   prompt_name="p", prompt_text="a b c", arm="plain", max_tokens=4)

    def waiting_for_the_lock(*args, **kwargs):
        raise KeyboardInterrupt

    with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        store.create_matrix("m", {"name": "m"}, [spec], matrix_id="m-1")
        monkeypatch.setattr(store, "claim_matrix", waiting_for_the_lock)
        try:
            run_matrix(store, "m-1", {})
        except KeyboardInterrupt as err:  # a bare one would end pytest's session
            caught: BaseException = err
        assert isinstance(caught, RunInterrupted), caught
        assert "resume with: specfleet matrix resume m-1" in str(caught)
        assert store.get_matrix("m-1").status == "interrupted"


def test_the_embedded_fleet_and_its_load_line_count_the_cpus_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # `taskset -c 0 specfleet bench ...`: Ray was told every CPU of the machine (os.cpu_count),
    # and a failed start read `load 3.0 on 16 CPUs` for a command confined to one.
    from specfleet.workers.hardware import detect_host

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 2.0, 1.0))
    asked: dict = {}
    monkeypatch.setattr(fleet.ray, "init", lambda **kwargs: asked.update(kwargs))
    fleet._init_embedded(detect_host("h1"), None, str(tmp_path))
    assert asked["num_cpus"] == 1
    assert startfailures.load_text() == "load 3.0 on 1 of 16 CPUs; "
