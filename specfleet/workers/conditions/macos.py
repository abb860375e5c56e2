"""macOS conditions from `pmset`, `notifyutil` and `vm_stat` (no root needed for any of them).

`pmset -g batt` gives the power source, `pmset -g` the Low Power Mode setting
(`lowpowermode 1`, or `powermode 1` where the Mac also has High Power Mode), `pmset -g therm`
the CPU speed limit and thermal / performance warning levels (Apple Silicon prints no
CPU_Speed_Limit: unknown there), `notifyutil -g com.apple.system.thermalpressurelevel` the
thermal pressure level, `vm_stat` the free pages and `sysctl -n hw.memsize` the installed
memory. `powermetrics` is not used: every sampler of it needs root.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from specfleet.workers.conditions.model import HostConditions

Runner = Callable[[list[str]], str | None]  # stdout of a command, None when it failed

PMSET_BATT = ["pmset", "-g", "batt"]
PMSET_SETTINGS = ["pmset", "-g"]
PMSET_THERM = ["pmset", "-g", "therm"]
THERMAL_PRESSURE = ["notifyutil", "-g", "com.apple.system.thermalpressurelevel"]
VM_STAT = ["vm_stat"]
SYSCTL_MEMSIZE = ["sysctl", "-n", "hw.memsize"]
_AVAILABLE_PAGES = ("Pages free", "Pages inactive", "Pages speculative")


def parse_pmset_batt(text: str) -> dict:
    """`pmset -g batt` -> power_source ("ac" / "battery") and battery_percent."""
    out: dict = {}
    source = re.search(r"Now drawing from '([^']+)'", text)
    if source:
        out["power_source"] = "battery" if "Battery" in source.group(1) else "ac"
    percent = re.search(r"InternalBattery.*?(\d+)%", text)
    if percent:
        out["battery_percent"] = float(percent.group(1))
    return out


def parse_pmset_low_power(text: str) -> bool | None:
    """`pmset -g` (current settings) -> whether Low Power Mode is on; None if not listed.

    `lowpowermode` is 0 or 1; `powermode` (Macs with High Power Mode) is 0 automatic,
    1 low power, 2 high power: only a 1 of either is Low Power Mode.
    """
    modes = re.findall(r"^\s*(?:lowpowermode|powermode)\s+(\d+)", text, re.MULTILINE)
    return None if not modes else "1" in modes


def parse_pmset_therm(text: str) -> dict:
    """`pmset -g therm` -> CPU speed limit (percent) and the recorded warning levels.

    "No thermal warning level has been recorded" is the nominal state (level None). Without
    a CPU_Speed_Limit line (Apple Silicon prints only notes) the limit is left out: unknown.
    """
    out: dict = {}
    limit = re.search(r"CPU_Speed_Limit\s*=\s*(\d+)", text)
    if limit:
        out["cpu_speed_limit_pct"] = float(limit.group(1))
    for kind in ("thermal", "performance"):
        level = re.search(rf"{kind} warning level[^\d\n]*(\d+)", text, re.IGNORECASE)
        if level and not re.search(rf"No {kind} warning level", text, re.IGNORECASE):
            out[f"{kind}_warning_level"] = int(level.group(1))
    return out


def parse_thermal_pressure(text: str) -> int | None:
    """`notifyutil -g com.apple.system.thermalpressurelevel` -> the level (0 nominal, 1
    moderate, 2 heavy, 3 trapping, 4 sleeping); None when the output holds none."""
    level = re.search(r"thermalpressurelevel\s+(\d+)\s*$", text.strip())
    return None if level is None else int(level.group(1))


def parse_vm_stat(text: str) -> float | None:
    """`vm_stat` -> GiB a new model can use: free + inactive + speculative pages."""
    page = re.search(r"page size of (\d+) bytes", text)
    if page is None:
        return None
    counts = dict(re.findall(r"^(Pages [a-z ]+):\s+(\d+)\.", text, re.MULTILINE))
    pages = sum(int(counts.get(name, 0)) for name in _AVAILABLE_PAGES)
    return pages * int(page.group(1)) / 2**30


def read_macos(reading: HostConditions, run: Runner) -> HostConditions:
    """`reading` with the power, thermal and memory fields from the tools above."""
    parts: dict = {"missing": {}}
    for cmd, parse in ((PMSET_BATT, parse_pmset_batt), (PMSET_THERM, parse_pmset_therm)):
        text = run(cmd)
        if text is None:
            parts["missing"][" ".join(cmd)] = "command failed"
        else:
            parts.update(parse(text))
    if "cpu_speed_limit_pct" not in parts:  # unknown, not 100: Apple Silicon prints only notes
        parts["missing"]["CPU speed limit"] = "`pmset -g therm` gives no CPU_Speed_Limit"
    settings = run(PMSET_SETTINGS)
    parts["low_power_mode"] = parse_pmset_low_power(settings) if settings else None
    if parts["low_power_mode"] is None:
        parts["missing"]["low power mode"] = "`pmset -g` lists no lowpowermode or powermode"
    pressure = run(THERMAL_PRESSURE)
    parts["thermal_pressure_level"] = parse_thermal_pressure(pressure) if pressure else None
    if parts["thermal_pressure_level"] is None:
        parts["missing"]["thermal pressure"] = f"`{' '.join(THERMAL_PRESSURE)}` gave no level"
    vm = run(VM_STAT)
    available = parse_vm_stat(vm) if vm else None
    if available is None:
        parts["missing"]["memory"] = "vm_stat gave no page counts"
    else:
        parts["mem_available_gb"] = round(available, 3)
    memsize = (run(SYSCTL_MEMSIZE) or "").strip()
    if memsize.isdigit():
        parts["mem_total_gb"] = round(int(memsize) / 2**30, 3)
    return reading.merged(**parts)
