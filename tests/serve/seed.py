"""A small exact store for the web view's HTTP tests: two comparable matrices (the second a
regression on one cell), a matrix whose texts try to inject HTML, and one still running."""

from __future__ import annotations

from datetime import UTC, datetime

from specfleet.jobs.run import RunSpec, Target
from specfleet.store import open_store
from specfleet.workers.conditions import HostConditions
from tests.store.factory import HOST_A, grid, result

XSS_SCRIPT = "<script>window.__xss = 1</script>"
XSS_IMG = '"><img src=x onerror="window.__xss = 2">'
XSS_TEXT = f"tell me {XSS_SCRIPT} and {XSS_IMG} now"
XSS_NAME = f"evil {XSS_SCRIPT}"
# Where tests reach an open view: it answers only a Host that names loopback.
LOOPBACK_URL = "http://127.0.0.1:8266"
BASE, NEXT, EVIL, LIVE = "base-000001", "next-000002", "evil-000003", "live-000004"
# graded is 1.5x plain in BASE and a clear slow-down (1.2x) in NEXT; plain is the same.
RATES = {
    BASE: {"plain": (10.0, 10.1, 9.9), "graded": (15.0, 15.1, 14.9)},
    NEXT: {"plain": (10.0, 10.1, 9.9), "graded": (12.0, 12.1, 11.9)},
}


THROTTLE_REASON = "CPU clock 1200 MHz is 40% of its 3000 MHz maximum"


def _conditions(mhz: float) -> dict:
    reading = HostConditions(at=0.0, platform="linux", cpu_governor="powersave", cpu_mhz=mhz,
                             cpu_max_mhz=3000.0, mem_available_gb=11.5).to_dict()
    return {"before": reading, "after": reading}


def _matrix(store, matrix_id: str, rates: dict) -> None:
    runs = grid(arms=("plain", "graded"), repeats=3, prompts=("edit_fn", "story"),
                prefix=matrix_id)
    store.create_matrix(matrix_id.split("-")[0], {"name": matrix_id.split("-")[0],
                                                  "repeats": 3}, runs, matrix_id=matrix_id)
    for i, run in enumerate(runs):
        throttled = matrix_id == BASE and i == 0  # one throttled run in BASE
        store.record_result(result(run, rates[run.arm][run.repeat]).model_copy(update={
            "conditions": _conditions(1200.0 if throttled else 2900.0), "throttled": throttled,
            "throttle_reason": THROTTLE_REASON if throttled else None}))
    store.finish_matrix(matrix_id, "done")


def _evil(store) -> None:
    target = Target(host="h<b>x</b>", engine="toy", device="cpu")
    runs = [RunSpec(run_key=f"evil-{arm}", matrix_id=EVIL, target=target, model="m1",
                    prompt_name="p<i>1</i>", prompt_text=XSS_TEXT, arm=arm, max_tokens=8)
            for arm in ("plain", "graded")]
    store.create_matrix(XSS_NAME, {"name": XSS_NAME, "prompts": [{"text": XSS_TEXT}]}, runs,
                        matrix_id=EVIL)
    for run in runs:
        store.record_result(result(run, 10.0, text=f"reply {XSS_IMG} {XSS_SCRIPT}"))
    store.finish_matrix(EVIL, "done")


def _live(store) -> None:
    runs = grid(arms=("plain", "graded"), repeats=1, prefix=LIVE)
    store.create_matrix("live", {"name": "live"}, runs, matrix_id=LIVE)
    store.record_result(result(runs[0], 10.0))


JOB = "gen-batch-000005"
JOB_MODEL = "g1"  # no matrix's model: the history pages stay the matrices'


def _job(store) -> None:
    """A finished generation job of two replies, one of them failed, one trying HTML."""
    runs = [RunSpec(run_key=f"job-{i}", matrix_id=None, target=HOST_A, model=JOB_MODEL,
                    prompt_name=name, prompt_text=f"say {name}", arm="graded", max_tokens=8)
            for i, name in enumerate(("hello", "line2"))]
    store.create_generation_job("batch", HOST_A, JOB_MODEL, runs, params={"policy": "graded"},
                                job_id=JOB)
    store.record_result(result(runs[0], 20.0, text=f"hi {XSS_SCRIPT}"))
    store.record_result(result(runs[1], status="failed").model_copy(
        update={"error": f"worker lost {XSS_IMG}"}))
    store.finish_generation_job(JOB, "failed")


def seed_store(url: str) -> None:
    """Fill an empty store at `url` with the four matrices, a generation job and a load
    series."""
    with open_store(url) as store:
        _matrix(store, BASE, RATES[BASE])
        _matrix(store, NEXT, RATES[NEXT])
        _evil(store)
        _live(store)
        _job(store)
        t = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
        store.record_load_samples(HOST_A.host, [
            {"t": t, "load1": 0.5, "cpu_util": 12.0},
            {"t": t.replace(minute=1), "load1": 1.5, "cpu_util": 40.0}], matrix_id=BASE)
