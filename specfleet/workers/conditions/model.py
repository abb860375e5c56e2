"""What a host's conditions reading holds: power, thermal state, clocks and memory.

One frozen `HostConditions` per reading, filled by the source modules (`linux.py`,
`macos.py`, `nvidia.py`); a field a source could not read stays None and `missing` says why.
Stored with every run as JSON (`to_dict` / `from_dict`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

PowerSource = Literal["ac", "battery"]


@dataclass(frozen=True)
class GpuReading:
    """One NVIDIA GPU (NVML or `nvidia-smi --query-gpu`); None where the driver says N/A."""

    index: int
    name: str
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    temperature_c: float | None = None
    # Active clock-event reasons, NVML names; None when the driver did not say (N/A, an
    # NVML error): unknown, not "none active".
    throttle_reasons: tuple[str, ...] | None = ()
    memory_used_mb: float | None = None
    memory_free_mb: float | None = None  # None on unified-memory GPUs (GB10 reports N/A)


@dataclass(frozen=True)
class ThermalZone:
    """One Linux thermal zone: its type, temperature and lowest passive/hot/critical trip."""

    name: str
    temp_c: float
    trip_c: float | None = None
    trip_type: str | None = None


@dataclass(frozen=True)
class CpuCap:
    """The Linux core whose policy ceiling (`scaling_max_freq`) is furthest below its own
    hardware maximum (`cpuinfo_max_freq`): cores of a big.LITTLE CPU have different ones."""

    cpu: int
    limit_mhz: float
    max_mhz: float


@dataclass(frozen=True)
class HostConditions:
    """One reading of a host's conditions (see the module docstring).

    Attributes:
        at: unix time of the reading.
        platform: "linux" or "darwin".
        power_source: "ac" or "battery" (macOS `pmset -g batt`).
        battery_percent: charge of the internal battery.
        low_power_mode: macOS Low Power Mode (`pmset -g`, `lowpowermode`).
        cpu_speed_limit_pct: macOS `pmset -g therm` CPU_Speed_Limit (100 = not limited).
        thermal_warning_level / performance_warning_level: macOS `pmset -g therm` levels
            (None when none has been recorded, which is the nominal state).
        thermal_pressure_level: macOS thermal pressure (`notifyutil -g
            com.apple.system.thermalpressurelevel`): 0 nominal, 1 moderate, 2 heavy,
            3 trapping, 4 sleeping.
        cpu_governor: Linux cpufreq scaling governor of cpu0.
        cpu_mhz: current frequency, mean over cores; cpu_max_mhz: hardware maximum, highest
        over cores; cpu_limit_mhz: the policy's ceiling (`scaling_max_freq`), lowest over
        cores; cpu_cap: the core furthest below its own maximum (what the clock rule
        judges; None in readings stored before it existed).
        thermal_zones: Linux thermal zones.
        mem_available_gb: memory a new model can use (Linux MemAvailable; macOS free +
            inactive + speculative pages); mem_total_gb: installed memory.
        gpus: NVIDIA GPUs.
        gpu_source: "nvml", "nvidia-smi" or None.
        missing: what could not be read -> why (e.g. "cpufreq": "no cpufreq in /sys ...").
        sample_ms: how long taking this reading took.
    """

    at: float
    platform: str
    power_source: PowerSource | None = None
    battery_percent: float | None = None
    low_power_mode: bool | None = None
    cpu_speed_limit_pct: float | None = None
    thermal_warning_level: int | None = None
    performance_warning_level: int | None = None
    thermal_pressure_level: int | None = None
    cpu_governor: str | None = None
    cpu_mhz: float | None = None
    cpu_max_mhz: float | None = None
    cpu_limit_mhz: float | None = None
    cpu_cap: CpuCap | None = None
    thermal_zones: tuple[ThermalZone, ...] = ()
    mem_available_gb: float | None = None
    mem_total_gb: float | None = None
    gpus: tuple[GpuReading, ...] = ()
    gpu_source: str | None = None
    missing: dict[str, str] = field(default_factory=dict)
    sample_ms: float = 0.0

    def merged(self, **parts: Any) -> HostConditions:
        """A copy with `parts` set; `missing` entries are added, not replaced."""
        missing = {**self.missing, **parts.pop("missing", {})}
        return replace(self, missing=missing, **parts)

    def to_dict(self) -> dict:
        """Plain JSON-able dict (tuples become lists)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> HostConditions:
        """Back from `to_dict` (unknown keys, e.g. from a newer specfleet, are ignored)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["thermal_zones"] = tuple(ThermalZone(**z) for z in data.get("thermal_zones", ()))
        values["cpu_cap"] = CpuCap(**data["cpu_cap"]) if data.get("cpu_cap") else None
        values["gpus"] = tuple(GpuReading(**{**g, "throttle_reasons": _reasons(g)})
                               for g in data.get("gpus", ()))
        return cls(**values)


def _reasons(gpu: dict) -> tuple[str, ...] | None:
    reasons = gpu.get("throttle_reasons", ())
    return None if reasons is None else tuple(reasons)


THERMAL_PRESSURE_NAMES = ("nominal", "moderate", "heavy", "trapping", "sleeping")


def thermal_pressure_name(level: int) -> str:
    """macOS's name of a thermal pressure level (`OSThermalPressureLevel`)."""
    return THERMAL_PRESSURE_NAMES[level] if 0 <= level < len(THERMAL_PRESSURE_NAMES) else str(level)


def _cpu_clocks(reading: HostConditions) -> str:
    cap = reading.cpu_cap
    shown: tuple[float | None, ...]
    if cap is None:  # stored before per-core caps: the lowest ceiling of any core, as then
        shown, labels = (reading.cpu_mhz, reading.cpu_limit_mhz, reading.cpu_max_mhz), "now/cap/max"
    else:  # a big.LITTLE CPU's small cores run below the big ones' max: no cap
        shown, labels = (reading.cpu_mhz, reading.cpu_max_mhz), "now/max"
    clocks = "/".join(f"{v:.0f}" for v in shown if v is not None)
    text = f"CPU {reading.cpu_governor or '?'} {clocks} MHz ({labels})"
    if cap is not None and cap.limit_mhz < cap.max_mhz:
        text += f", cpu{cap.cpu} capped at {cap.limit_mhz:.0f} of {cap.max_mhz:.0f} MHz"
    return text


def summary(reading: HostConditions) -> str:
    """One line a person reads: power, thermal state, clocks, memory free (what is known)."""
    parts = []
    if reading.power_source:
        battery = f" {reading.battery_percent:.0f}%" if reading.battery_percent is not None else ""
        parts.append("AC" if reading.power_source == "ac" else f"battery{battery}")
    if reading.low_power_mode is not None:
        parts.append(f"Low Power Mode {'on' if reading.low_power_mode else 'off'}")
    if reading.cpu_speed_limit_pct is not None:
        parts.append(f"CPU speed limit {reading.cpu_speed_limit_pct:.0f}%")
    if reading.thermal_pressure_level is not None:
        parts.append(f"thermal pressure {thermal_pressure_name(reading.thermal_pressure_level)}")
    if reading.cpu_governor or reading.cpu_max_mhz:
        parts.append(_cpu_clocks(reading))
    if reading.thermal_zones:
        hottest = max(reading.thermal_zones, key=lambda z: z.temp_c)
        parts.append(f"hottest zone {hottest.name} {hottest.temp_c:.0f} °C")
    for gpu in reading.gpus:
        power = (f" {gpu.power_w:.0f}/{gpu.power_cap_w:.0f} W"
                 if gpu.power_w is not None and gpu.power_cap_w is not None else "")
        clock = (f" {gpu.sm_clock_mhz:.0f}/{gpu.sm_clock_max_mhz:.0f} MHz"
                 if gpu.sm_clock_mhz is not None and gpu.sm_clock_max_mhz is not None else "")
        temp = f" {gpu.temperature_c:.0f} °C" if gpu.temperature_c is not None else ""
        parts.append(f"GPU{gpu.index}{clock}{power}{temp}")
    if reading.mem_available_gb is not None:
        parts.append(f"{reading.mem_available_gb:.1f} GB free")
    text = ", ".join(parts) or "nothing readable"
    return text + (f" (not readable: {', '.join(reading.missing)})" if reading.missing else "")


UNREADABLE_READING = "unreadable (not a reading specfleet stores)"


def stored_summary(conditions: dict | None, side: str) -> str | None:
    """The `summary` of a run's stored reading `side` ("before" or "after"); None when it has
    none; `UNREADABLE_READING` for one that does not read as specfleet writes it (a
    hand-edited store, another writer), which made the matrix page a 500."""
    reading = (conditions or {}).get(side)
    if not reading:
        return None
    try:
        return summary(HostConditions.from_dict(reading))
    except (AttributeError, TypeError, ValueError):
        return UNREADABLE_READING
