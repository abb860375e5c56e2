"""macOS sources: pmset (battery, settings, therm) and vm_stat, from recorded samples."""

from __future__ import annotations

from specfleet.workers.conditions import HostConditions, judge, summary
from specfleet.workers.conditions.macos import (
    PMSET_BATT,
    PMSET_SETTINGS,
    PMSET_THERM,
    SYSCTL_MEMSIZE,
    THERMAL_PRESSURE,
    VM_STAT,
    parse_pmset_batt,
    parse_pmset_low_power,
    parse_pmset_therm,
    parse_thermal_pressure,
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


def test_powermode_is_low_power_only_at_1_not_high_power_2_or_automatic_0() -> None:
    high = fixture("pmset_settings_high_power.txt")  # `sudo pmset -a powermode 2`
    assert parse_pmset_low_power(high) is False
    assert parse_pmset_low_power(high.replace("powermode            2", "powermode 0")) is False
    assert parse_pmset_low_power(fixture("pmset_settings_powermode_low.txt")) is True


def test_pmset_therm_nominal_limited_and_warned() -> None:
    assert parse_pmset_therm(fixture("pmset_therm_nominal.txt")) == {}
    assert parse_pmset_therm(fixture("pmset_therm_limited.txt")) == {"cpu_speed_limit_pct": 35.0}
    assert parse_pmset_therm(fixture("pmset_therm_warning.txt")) == {"thermal_warning_level": 70}
    # The other spelling seen in the wild; a date on the next line is not a level.
    assert parse_pmset_therm("\tThermal Warning Level \t= 80\nNote: No performance warning "
                             "level has been recorded\n2026-11-30 06:12:01 +0000") == {
        "thermal_warning_level": 80}


def test_thermal_pressure_level_from_notifyutil() -> None:
    assert parse_thermal_pressure(fixture("notifyutil_thermal_nominal.txt")) == 0
    assert parse_thermal_pressure("com.apple.system.thermalpressurelevel 2\n") == 2
    assert parse_thermal_pressure("") is None and parse_thermal_pressure("garbage 7x") is None


def test_vm_stat_counts_free_inactive_and_speculative_pages() -> None:
    assert parse_vm_stat(fixture("vm_stat.txt")) == (65536 + 131072 + 65536) * 16384 / 2**30
    assert parse_vm_stat("garbage") is None


def _tools(batt: str, settings: str, therm: str, pressure: str | None = None):
    outputs = {tuple(PMSET_BATT): fixture(batt), tuple(PMSET_SETTINGS): fixture(settings),
               tuple(PMSET_THERM): fixture(therm), tuple(VM_STAT): fixture("vm_stat.txt"),
               tuple(SYSCTL_MEMSIZE): "17179869184\n", tuple(THERMAL_PRESSURE): pressure}
    return lambda cmd: outputs.get(tuple(cmd))


def test_a_mac_on_battery_in_low_power_mode_and_limited_is_throttled_for_each_reason() -> None:
    blank = HostConditions(at=0.0, platform="darwin")
    calm = read_macos(blank, _tools("pmset_batt_ac.txt", "pmset_settings_normal.txt",
                                    "pmset_therm_nominal.txt",
                                    fixture("notifyutil_thermal_nominal.txt")))
    assert (calm.power_source, calm.low_power_mode, calm.mem_total_gb) == ("ac", False, 16.0)
    assert calm.mem_available_gb == 4.0 and not judge(calm).throttled
    assert calm.thermal_pressure_level == 0 and "thermal pressure nominal" in summary(calm)
    assert set(calm.missing) == {"CPU speed limit"}  # the notes say nothing of it
    hot = read_macos(blank, _tools("pmset_batt_battery.txt", "pmset_settings_low_power.txt",
                                   "pmset_therm_limited.txt",
                                   "com.apple.system.thermalpressurelevel 1\n"))
    assert judge(hot).reasons == ("CPU_Speed_Limit 35%", "thermal pressure moderate",
                                  "on battery", "Low Power Mode on")
    assert "CPU speed limit" not in hot.missing


def test_apple_silicon_therm_notes_leave_the_speed_limit_unknown_not_nominal() -> None:
    blank = HostConditions(at=0.0, platform="darwin")
    # `pmset -g therm` on Apple Silicon prints only notes; notifyutil is missing or fails.
    reading = read_macos(blank, _tools("pmset_batt_ac.txt", "pmset_settings_high_power.txt",
                                       "pmset_therm_nominal.txt"))
    assert reading.cpu_speed_limit_pct is None and reading.thermal_pressure_level is None
    assert set(reading.missing) == {"CPU speed limit", "thermal pressure"}
    assert reading.low_power_mode is False and not judge(reading).throttled
    assert summary(reading).endswith("(not readable: CPU speed limit, thermal pressure)")


def test_a_failing_tool_leaves_its_fields_none_with_the_reason() -> None:
    reading = read_macos(HostConditions(at=0.0, platform="darwin"), lambda cmd: None)
    assert reading.power_source is None and reading.mem_available_gb is None
    assert reading.missing["pmset -g batt"] == "command failed" and "memory" in reading.missing
    assert reading.thermal_pressure_level is None and "thermal pressure" in reading.missing
