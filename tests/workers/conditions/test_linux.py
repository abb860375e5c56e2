"""Linux sources: cpufreq, thermal zones and /proc/meminfo, from fixtures and for real."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specfleet.workers.conditions import (
    CpuCap,
    HostConditions,
    judge,
    sample_conditions,
    stored_summary,
    summary,
)
from specfleet.workers.conditions.linux import (
    parse_cpufreq,
    parse_meminfo,
    parse_thermal_zone,
    read_linux,
)
from tests.workers.conditions.conftest import FIXTURES, fixture


def test_meminfo_gives_available_and_total_in_gib() -> None:
    info = parse_meminfo(fixture("sysfs/proc/meminfo"))
    assert info["MemAvailable"] == 20.0 and info["MemTotal"] == pytest.approx(23.538, abs=1e-3)
    assert "HugePages_Total" not in info  # a count, not kB


def test_cpufreq_files_give_governor_and_mhz() -> None:
    files = {"scaling_governor": "schedutil\n", "scaling_cur_freq": "1200000\n",
             "cpuinfo_max_freq": "3400000\n", "scaling_max_freq": "3400000\n"}
    assert parse_cpufreq(files) == {"governor": "schedutil", "cur_mhz": 1200.0,
                                    "max_mhz": 3400.0, "limit_mhz": 3400.0}
    assert parse_cpufreq({}) == {}


def test_a_thermal_zone_keeps_its_lowest_slowdown_trip_not_a_fan_trip() -> None:
    zone = parse_thermal_zone({"type": "acpitz\n", "temp": "27800\n",
                               "trip_point_0_type": "active\n", "trip_point_0_temp": "20000\n",
                               "trip_point_1_type": "critical\n", "trip_point_1_temp": "119000\n"})
    assert (zone.name, zone.temp_c, zone.trip_c, zone.trip_type) == ("acpitz", 27.8, 119.0,
                                                                     "critical")
    assert parse_thermal_zone({"type": "x", "temp": "unreadable"}) is None


def test_a_fixture_tree_reads_like_a_host_and_a_capped_cpu_is_throttled() -> None:
    reading = read_linux(HostConditions(at=0.0, platform="linux"), FIXTURES / "sysfs")
    assert reading.cpu_governor == "performance"
    assert (reading.cpu_mhz, reading.cpu_max_mhz, reading.cpu_limit_mhz) == (3100.0, 3400.0,
                                                                               2000.0)
    assert [z.name for z in reading.thermal_zones] == ["x86_pkg_temp", "acpitz"]
    assert reading.mem_available_gb == 20.0 and not reading.missing
    assert reading.cpu_cap == CpuCap(1, 2000.0, 3400.0)
    assert judge(reading).reasons == ("CPU clock capped at 2000 of 3400 MHz (cpu1)",)
    assert "CPU performance 3100/3400 MHz (now/max), cpu1 capped at 2000 of 3400 MHz" in (
        summary(reading))
    assert HostConditions.from_dict(reading.to_dict()) == reading


def _big_little(root: Path) -> Path:
    """A GB10's cpufreq: cpu0-9 Cortex-A725 (max 2808 MHz), cpu10-19 Cortex-X925 (3900)."""
    for cpu in range(20):
        khz = "3900000\n" if cpu >= 10 else "2808000\n"
        files = {"cpuinfo_max_freq": khz, "scaling_max_freq": khz, "scaling_cur_freq": khz,
                 "scaling_governor": "performance\n"}
        folder = root / f"sys/devices/system/cpu/cpu{cpu}/cpufreq"
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text)
    return folder.parent.parent


def test_a_big_little_cpu_is_judged_core_by_core(tmp_path: Path) -> None:
    cpus = _big_little(tmp_path)
    blank = HostConditions(at=0.0, platform="linux")
    uncapped = read_linux(blank, tmp_path)
    assert (uncapped.cpu_max_mhz, uncapped.cpu_limit_mhz) == (3900.0, 2808.0)  # as stored before
    assert uncapped.cpu_cap == CpuCap(0, 2808.0, 2808.0) and not judge(uncapped).throttled
    assert summary(uncapped).startswith("CPU performance 3354/3900 MHz (now/max) (")  # no cap
    (cpus / "cpu12/cpufreq/scaling_max_freq").write_text("3000000\n")
    capped = read_linux(blank, tmp_path)
    assert judge(capped).reasons == ("CPU clock capped at 3000 of 3900 MHz (cpu12)",)


def test_a_reading_stored_before_per_core_caps_still_reads() -> None:
    old = {"at": 0.0, "platform": "linux", "cpu_governor": "performance", "cpu_mhz": 3100.0,
           "cpu_max_mhz": 3400.0, "cpu_limit_mhz": 2000.0, "gpus": [
               {"index": 0, "name": "NVIDIA GB10", "throttle_reasons": ["gpu_idle"]}]}
    reading = HostConditions.from_dict(old)
    assert reading.cpu_cap is None and reading.gpus[0].throttle_reasons == ("gpu_idle",)
    assert stored_summary({"before": old}, "before").startswith(
        "CPU performance 3100/2000/3400 MHz (now/cap/max)")


def test_a_hot_zone_is_throttled_until_it_cools(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "sysfs", root)
    (root / "sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq").write_text("3400000\n")
    temp = root / "sys/class/thermal/thermal_zone0/temp"
    assert not judge(sample_conditions(str(root))).throttled
    temp.write_text("97500\n")
    verdict = judge(sample_conditions(str(root)))
    assert verdict.reason == "thermal zone x86_pkg_temp at 97.5 °C (passive trip 95.0 °C)"


def test_this_machine_is_read_for_real() -> None:
    reading = sample_conditions("/")
    with open("/proc/meminfo") as f:
        total_kb = next(int(line.split()[1]) for line in f if line.startswith("MemTotal:"))
    assert reading.mem_total_gb == pytest.approx(total_kb / 2**20, abs=1e-3)
    assert 0 < reading.mem_available_gb <= reading.mem_total_gb
    # A VM may lack cpufreq or thermal zones: then the fields are None and `missing` says why.
    has_cpufreq = any(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq"))
    assert (reading.cpu_max_mhz is not None) == has_cpufreq or "cpufreq" in reading.missing
    if not has_cpufreq:
        assert reading.cpu_governor is None and "cpufreq" in reading.missing
    has_zones = any(Path("/sys/class/thermal").glob("thermal_zone*/temp"))
    assert bool(reading.thermal_zones) == has_zones or "thermal" in reading.missing
    assert HostConditions.from_dict(reading.to_dict()) == reading
