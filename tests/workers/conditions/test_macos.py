"""macOS sources: pmset (battery, settings, therm) and vm_stat, from recorded samples."""

from __future__ import annotations

from specfleet.workers.conditions import HostConditions, judge
from specfleet.workers.conditions.macos import (
    PMSET_BATT,
    PMSET_SETTINGS,
    PMSET_THERM,
    SYSCTL_MEMSIZE,
    VM_STAT,
    parse_pmset_batt,
    parse_pmset_low_power,
    parse_pmset_therm,
    parse_vm_stat,
    read_macos,
)
from tests.workers.conditions.conftest import fixture


def test_pmset_batt_gives_the_power_source_and_charge() -> None:
    assert parse_pmset_batt(fixture("pmset_batt_ac.txt")) == {"power_source": "ac",
                                                              "battery_percent": 84.0}
    assert parse_pmset_batt(fixture("pmset_batt_battery.txt"))["power_source"] == "battery"
    assert parse_pmset_batt(fixture("pmset_batt_desktop.txt")) == {"power_source": "ac"}


def test_pmset_settings_give_low_power_mode() -> None:
    assert parse_pmset_low_power(fixture("pmset_settings_low_power.txt")) is True
    assert parse_pmset_low_power(fixture("pmset_settings_normal.txt")) is False
    assert parse_pmset_low_power("System-wide power settings:\n sleep 1\n") is None


def test_pmset_therm_nominal_limited_and_warned() -> None:
    assert parse_pmset_therm(fixture("pmset_therm_nominal.txt")) == {}
    assert parse_pmset_therm(fixture("pmset_therm_limited.txt")) == {"cpu_speed_limit_pct": 35.0}
    assert parse_pmset_therm(fixture("pmset_therm_warning.txt")) == {"thermal_warning_level": 70}
    # The other spelling seen in the wild; a date on the next line is not a level.
    assert parse_pmset_therm("\tThermal Warning Level \t= 80\nNote: No performance warning "
                             "level has been recorded\n2026-11-30 06:12:01 +0000") == {
        "thermal_warning_level": 80}


def test_vm_stat_counts_free_inactive_and_speculative_pages() -> None:
    assert parse_vm_stat(fixture("vm_stat.txt")) == (65536 + 131072 + 65536) * 16384 / 2**30
    assert parse_vm_stat("garbage") is None


def _tools(batt: str, settings: str, therm: str):
    outputs = {tuple(PMSET_BATT): fixture(batt), tuple(PMSET_SETTINGS): fixture(settings),
               tuple(PMSET_THERM): fixture(therm), tuple(VM_STAT): fixture("vm_stat.txt"),
               tuple(SYSCTL_MEMSIZE): "17179869184\n"}
    return lambda cmd: outputs.get(tuple(cmd))


def test_a_mac_on_battery_in_low_power_mode_and_limited_is_throttled_for_each_reason() -> None:
    blank = HostConditions(at=0.0, platform="darwin")
    calm = read_macos(blank, _tools("pmset_batt_ac.txt", "pmset_settings_normal.txt",
                                    "pmset_therm_nominal.txt"))
    assert (calm.power_source, calm.low_power_mode, calm.mem_total_gb) == ("ac", False, 16.0)
    assert calm.mem_available_gb == 4.0 and not judge(calm).throttled and not calm.missing
    hot = read_macos(blank, _tools("pmset_batt_battery.txt", "pmset_settings_low_power.txt",
                                   "pmset_therm_limited.txt"))
    assert judge(hot).reasons == ("CPU_Speed_Limit 35%", "on battery", "Low Power Mode on")


def test_a_failing_tool_leaves_its_fields_none_with_the_reason() -> None:
    reading = read_macos(HostConditions(at=0.0, platform="darwin"), lambda cmd: None)
    assert reading.power_source is None and reading.mem_available_gb is None
    assert reading.missing["pmset -g batt"] == "command failed" and "memory" in reading.missing
