"""HostWorker and host conditions (no Ray): readings stored around each run, the throttle
gate of the quiet check, `status()`'s conditions, and the memory check before a load."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specfleet.jobs.run import RunSpec, Target
from specfleet.models.registry import resolve_model
from specfleet.settings import CONDITIONS_ROOT
from specfleet.workers.hardware import detect_host
from specfleet.workers.host import HostWorker
from tests.engine.conftest import bundled_model  # noqa: F401 (the fetched bundled model)
from tests.workers.conditions.conftest import FIXTURES


def spec(key: str, engine: str = "toy", model: str = "script") -> RunSpec:
    return RunSpec(run_key=key, target=Target(host="box1", engine=engine, device="cpu"),
                   model=model, prompt_name="p", prompt_text="hello world " * 4, arm="plain",
                   max_tokens=8)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tree = tmp_path / "root"
    shutil.copytree(FIXTURES / "sysfs", tree)
    (tree / "sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq").write_text("3400000\n")
    return tree


def worker(tmp_path: Path, **kw) -> HostWorker:
    return HostWorker(info=detect_host("box1"), run_lock_path=str(tmp_path / "lock"),
                      quiet_pids=[], **kw)


def test_each_run_stores_its_conditions_before_and_after(tmp_path, root) -> None:
    w = worker(tmp_path, conditions_root=str(root))
    try:
        cool = w.run(spec("cool"))
        (root / "sys/class/thermal/thermal_zone0/temp").write_text("96000\n")
        hot = w.run(spec("hot"))
        check = w.quiet_check()
        status = w.status()
    finally:
        w.close()
    assert cool.status == "done" and cool.throttled is False and cool.throttle_reason is None
    for side in ("before", "after"):
        reading = cool.conditions[side]
        assert reading["cpu_governor"] == "performance" and reading["mem_available_gb"] == 20.0
        assert reading["sample_ms"] < 1000
    reason = "thermal zone x86_pkg_temp at 96.0 °C (passive trip 95.0 °C)"
    assert hot.throttled is True and hot.throttle_reason == reason
    assert not check.quiet and check.reason == f"host throttled: {reason}"
    assert status["conditions"]["throttled"] and status["conditions"]["reason"] == reason


def test_the_root_comes_from_the_documented_setting(tmp_path, root, monkeypatch) -> None:
    monkeypatch.setenv(CONDITIONS_ROOT.name, str(root))
    w = worker(tmp_path)
    try:
        reading = w.conditions()["reading"]
    finally:
        w.close()
    assert reading["cpu_max_mhz"] == 3400.0 and reading["thermal_zones"]


def test_a_model_bigger_than_free_memory_is_refused_in_one_line(tmp_path, bundled_model):  # noqa: F811
    # A real model folder: the bundled model's files plus a 64 GB sparse file (more than
    # this machine's memory); the worker reads the folder's real size and the real free
    # memory, and refuses before loading anything.
    source = resolve_model("smollm2-135m", "torch").path
    folder = tmp_path / "huge"
    folder.mkdir()
    for item in source.iterdir():
        (folder / item.name).symlink_to(item)
    with open(folder / "extra-shards.dat", "wb") as f:
        f.truncate(64 * 2**30)
    w = worker(tmp_path)
    try:
        result = w.run(spec("huge", engine="torch", model=str(folder)))
        loaded = w.status()["loaded_models"]
    finally:
        w.close()
    with open("/proc/meminfo") as f:
        free_gb = next(int(line.split()[1]) for line in f if "MemAvailable" in line) / 2**20
    assert result.status == "failed" and loaded == []
    message = result.error
    assert "\n" not in message and message.startswith(
        f"NotEnoughMemory: host box1: not loading {folder}: needs ")
    needed = float(message.split("needs ")[1].split(" GB")[0])
    free = float(message.split("), ")[1].split(" GB")[0])
    assert needed > 64 and message.endswith("GB host memory free")
    assert free == pytest.approx(free_gb, abs=2.0)  # other processes move it a little
