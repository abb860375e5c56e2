"""The throttle rules and the memory check on hand-made readings."""

from __future__ import annotations

import pytest

from specfleet.workers.conditions import (
    CLOCK_FRACTION_FLAG,
    HostConditions,
    check_memory,
    judge,
    memory_needed_gb,
)


def reading(**kw) -> HostConditions:
    return HostConditions(at=0.0, platform="linux", **kw)


def test_a_cpu_ceiling_at_the_fraction_passes_and_below_it_is_throttled() -> None:
    assert not judge(reading(cpu_max_mhz=1000.0, cpu_limit_mhz=1000 * CLOCK_FRACTION_FLAG)).throttled
    assert judge(reading(cpu_max_mhz=1000.0, cpu_limit_mhz=899.0)).throttled
    assert not judge(reading(cpu_max_mhz=1000.0, cpu_mhz=400.0)).throttled  # idle clock-down


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
