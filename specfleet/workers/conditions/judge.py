"""Whether a host can be trusted for a timed run now: the throttle rules, and the memory
check before a model loads.

A reading is **throttled** when any of these holds (each rule names itself in the reason):

* clocks: a CPU core's policy ceiling (`scaling_max_freq`) is below `CLOCK_FRACTION_FLAG`
  of that core's own hardware maximum, or a busy NVIDIA GPU (no `gpu_idle` reason) runs its
  SM clock below `CLOCK_FRACTION_FLAG` of its maximum. An idle CPU or GPU clocking down is
  not throttling; nor is a GPU whose reasons are unknown (N/A): the rule is skipped.
* thermal state not nominal: macOS CPU_Speed_Limit below 100, a thermal / performance
  warning level recorded, or thermal pressure at `THERMAL_PRESSURE_FLAG` (moderate) or
  above; a Linux thermal zone at or above its lowest passive / hot / critical trip point;
  an NVIDIA GPU with a thermal or hardware slowdown reason active.
* power: a Mac on battery, or in Low Power Mode.
"""

from __future__ import annotations

from dataclasses import dataclass

from specfleet.workers.conditions.model import HostConditions, thermal_pressure_name

CLOCK_FRACTION_FLAG = 0.9  # clocks below 90% of their maximum count as throttled
# macOS thermal pressure from "moderate" (1) up: Apple Silicon already lowers clocks there.
THERMAL_PRESSURE_FLAG = 1
# NVML reasons that mean the GPU is slowed down by heat or by a hardware brake.
GPU_SLOWDOWN_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                        "hw_power_brake_slowdown")
# Memory a model needs beyond its weights (KV cache, activations, the runtime): a share of
# its size, at least MEMORY_MARGIN_MIN_GB.
MEMORY_MARGIN_SHARE = 0.25
MEMORY_MARGIN_MIN_GB = 1.0


@dataclass(frozen=True)
class Throttle:
    """The verdict on one or more readings: throttled or not, and every reason why."""

    throttled: bool
    reasons: tuple[str, ...] = ()

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def _clock_reasons(c: HostConditions) -> list[str]:
    out = []
    cap = c.cpu_cap  # each core against its own max: big.LITTLE cores differ
    if cap is not None and cap.limit_mhz < CLOCK_FRACTION_FLAG * cap.max_mhz:
        out.append(f"CPU clock capped at {cap.limit_mhz:.0f} of {cap.max_mhz:.0f} MHz "
                   f"(cpu{cap.cpu})")
    for gpu in c.gpus:
        if gpu.throttle_reasons is None:
            continue  # idle or not is unknown: an idle GPU's low clock is no throttling
        busy = "gpu_idle" not in gpu.throttle_reasons
        now, top = gpu.sm_clock_mhz, gpu.sm_clock_max_mhz
        if busy and now and top and now < CLOCK_FRACTION_FLAG * top:
            out.append(f"GPU {gpu.index} SM clock {now:.0f} of {top:.0f} MHz")
    return out


def _thermal_reasons(c: HostConditions) -> list[str]:
    out = []
    if c.cpu_speed_limit_pct is not None and c.cpu_speed_limit_pct < 100:
        out.append(f"CPU_Speed_Limit {c.cpu_speed_limit_pct:.0f}%")
    if c.thermal_warning_level is not None:
        out.append(f"thermal warning level {c.thermal_warning_level}")
    if c.performance_warning_level is not None:
        out.append(f"performance warning level {c.performance_warning_level}")
    level = c.thermal_pressure_level
    if level is not None and level >= THERMAL_PRESSURE_FLAG:
        out.append(f"thermal pressure {thermal_pressure_name(level)}")
    for zone in c.thermal_zones:
        if zone.trip_c is not None and zone.temp_c >= zone.trip_c:
            out.append(f"thermal zone {zone.name} at {zone.temp_c:.1f} °C "
                       f"({zone.trip_type} trip {zone.trip_c:.1f} °C)")
    for gpu in c.gpus:
        slow = [r for r in gpu.throttle_reasons or () if r in GPU_SLOWDOWN_REASONS]
        if slow:
            out.append(f"GPU {gpu.index} {', '.join(slow)}")
    return out


def _power_reasons(c: HostConditions) -> list[str]:
    out = []
    if c.power_source == "battery":
        out.append("on battery")
    if c.low_power_mode:
        out.append("Low Power Mode on")
    return out


def judge(*readings: HostConditions | None) -> Throttle:
    """Throttled when any reading breaks a rule of the module docstring.

    Args:
        readings: e.g. the reading before a run and the one after it (None: not taken).

    Returns:
        A `Throttle` with each distinct reason once, in rule order.
    """
    reasons: list[str] = []
    for c in readings:
        if c is None:
            continue
        for reason in _clock_reasons(c) + _thermal_reasons(c) + _power_reasons(c):
            if reason not in reasons:
                reasons.append(reason)
    return Throttle(bool(reasons), tuple(reasons))


@dataclass(frozen=True)
class MemoryCheck:
    """Whether a model of `size_gb` fits the memory free now."""

    fits: bool
    needed_gb: float
    free_gb: float | None
    source: str  # "host memory" or "GPU <i> memory"


def memory_needed_gb(size_bytes: int) -> float:
    """The model's size plus its margin (MEMORY_MARGIN_SHARE, at least MEMORY_MARGIN_MIN_GB)."""
    size_gb = size_bytes / 2**30
    return size_gb + max(MEMORY_MARGIN_SHARE * size_gb, MEMORY_MARGIN_MIN_GB)


def check_memory(size_bytes: int, reading: HostConditions, device: str) -> MemoryCheck:
    """Does a model of `size_bytes` fit? On a CUDA device with its own memory, that GPU's
    free memory counts; elsewhere (CPU, Apple unified memory, GB10) the host's available
    memory. Unknown free memory never refuses (the check has nothing to judge by).
    """
    needed = memory_needed_gb(size_bytes)
    gpu = reading.gpus[0] if reading.gpus else None
    free: float | None
    if device == "cuda" and gpu is not None and gpu.memory_free_mb is not None:
        free, source = gpu.memory_free_mb / 1024, f"GPU {gpu.index} memory"
    else:
        free, source = reading.mem_available_gb, "host memory"
    return MemoryCheck(free is None or needed <= free, round(needed, 2),
                       None if free is None else round(free, 2), source)
