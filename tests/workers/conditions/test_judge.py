"""The throttle rules and the memory check on hand-made readings."""

from __future__ import annotations

import pytest

from specfleet.workers.conditions import (
    CLOCK_FRACTION_FLAG,
    CpuCap,
    GpuReading,
    HostConditions,
    check_memory,
    judge,
    memory_needed_gb,
)


def reading(**kw) -> HostConditions:
    return HostConditions(at=0.0, platform="linux", **kw)


def test_a_cpu_ceiling_at_the_fraction_passes_and_below_it_is_throttled() -> None:
    at_fraction = CpuCap(0, 1000 * CLOCK_FRACTION_FLAG, 1000.0)
    assert not judge(reading(cpu_cap=at_fraction)).throttled
    assert judge(reading(cpu_cap=CpuCap(3, 899.0, 1000.0))).reasons == (
        "CPU clock capped at 899 of 1000 MHz (cpu3)",)
    assert not judge(reading(cpu_max_mhz=1000.0, cpu_mhz=400.0)).throttled  # idle clock-down


def test_a_big_little_cpu_at_its_own_maxima_is_not_capped() -> None:
    # GB10: the A725 cores' 2808 MHz is the lowest ceiling, the X925 cores' 3900 the top max.
    gb10 = reading(cpu_max_mhz=3900.0, cpu_limit_mhz=2808.0, cpu_cap=CpuCap(0, 2808.0, 2808.0))
    assert not judge(gb10).throttled


def test_gpu_reasons_not_reported_are_unknown_not_busy() -> None:
    idle_clock = {"index": 0, "name": "NVIDIA GB10", "sm_clock_mhz": 208.0,
                  "sm_clock_max_mhz": 3003.0}
    assert not judge(reading(gpus=(GpuReading(**idle_clock, throttle_reasons=None),))).throttled
    assert judge(reading(gpus=(GpuReading(**idle_clock, throttle_reasons=()),))).reasons == (
        "GPU 0 SM clock 208 of 3003 MHz",)  # reported: no reason active, so busy


def test_thermal_pressure_from_moderate_up_is_throttled() -> None:
    assert not judge(reading(thermal_pressure_level=0)).throttled
    assert judge(reading(thermal_pressure_level=1)).reasons == ("thermal pressure moderate",)
    assert judge(reading(thermal_pressure_level=3)).reasons == ("thermal pressure trapping",)
    assert not judge(reading()).throttled  # unknown: no rule fires, `missing` says why


def test_reasons_of_before_and_after_are_merged_once() -> None:
    hot = reading(power_source="battery")
    assert judge(hot, None, hot).reasons == ("on battery",)
    assert judge().throttled is False


def test_the_memory_margin_is_a_share_with_a_floor() -> None:
    assert memory_needed_gb(2**30) == pytest.approx(2.0)
    assert memory_needed_gb(40 * 2**30) == pytest.approx(50.0)
    check = check_memory(40 * 2**30, reading(mem_available_gb=20.0), "cpu")
    assert (check.fits, check.needed_gb, check.free_gb, check.source) == (
        False, 50.0, 20.0, "host memory")
    assert check_memory(40 * 2**30, reading(), "cpu").fits  # unknown free memory: no refusal
