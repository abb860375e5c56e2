"""NVIDIA GPU conditions: NVML through `nvidia-ml-py` (imported only here, only when asked),
falling back to `nvidia-smi --query-gpu ... --format=csv,noheader,nounits`.

Fields per GPU: SM clock now and its maximum, power draw and cap, temperature, the active
clock-event (throttle) reasons and memory used / free. "[N/A]" / "[Not Supported]" (GB10's
unified memory, for one) become None; reasons the driver does not give are None (unknown),
never "none active". `read_utilization` reads each GPU's utilization for the quiet check.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from typing import TypeVar

from specfleet.workers.conditions.model import GpuReading, HostConditions

Runner = Callable[[list[str]], str | None]

# NVML's clock-event reason bits (nvml.h `nvmlClocksEventReason*`), in bit order.
THROTTLE_BITS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
SMI_FIELDS = (
    "index", "name", "clocks.sm", "clocks.max.sm", "power.draw", "power.limit",
    "temperature.gpu", "clocks_event_reasons.active", "memory.used", "memory.free",
)
SMI_QUERY = ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}",
             "--format=csv,noheader,nounits"]
UTIL_QUERY = ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
T = TypeVar("T")


def throttle_reasons(mask: int) -> tuple[str, ...]:
    """NVML's clock-event bitmask -> reason names (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_BITS)
    return (*names, f"0x{unknown:x}") if unknown else tuple(names)


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_nvidia_smi(text: str) -> tuple[GpuReading, ...]:
    """One CSV line per GPU in `SMI_FIELDS` order -> readings."""
    gpus = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(SMI_FIELDS) or not cols[0].isdigit():
            continue
        mask = cols[7]  # "[N/A]" / "[Not Supported]": unknown
        reasons = throttle_reasons(int(mask, 16)) if mask.lower().startswith("0x") else None
        gpus.append(GpuReading(
            index=int(cols[0]), name=cols[1], sm_clock_mhz=_number(cols[2]),
            sm_clock_max_mhz=_number(cols[3]), power_w=_number(cols[4]),
            power_cap_w=_number(cols[5]), temperature_c=_number(cols[6]),
            throttle_reasons=reasons, memory_used_mb=_number(cols[8]),
            memory_free_mb=_number(cols[9]),
        ))
    return tuple(gpus)


def _nvml_value(call: Callable, *args, scale: float = 1.0) -> float | None:
    import pynvml

    try:
        return call(*args) / scale
    except pynvml.NVMLError:
        return None  # not supported on this GPU (GB10 memory, some power fields)


def _nvml_gpu(index: int) -> GpuReading:
    import pynvml

    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = pynvml.nvmlDeviceGetName(handle)
    memory = None
    with contextlib.suppress(pynvml.NVMLError):
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    reasons_call = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = _nvml_value(reasons_call, handle)
    return GpuReading(
        index=index, name=name.decode() if isinstance(name, bytes) else str(name),
        sm_clock_mhz=_nvml_value(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
        sm_clock_max_mhz=_nvml_value(pynvml.nvmlDeviceGetMaxClockInfo, handle,
                                     pynvml.NVML_CLOCK_SM),
        power_w=_nvml_value(pynvml.nvmlDeviceGetPowerUsage, handle, scale=1000.0),
        power_cap_w=_nvml_value(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle, scale=1000.0),
        temperature_c=_nvml_value(pynvml.nvmlDeviceGetTemperature, handle,
                                  pynvml.NVML_TEMPERATURE_GPU),
        throttle_reasons=throttle_reasons(int(mask)) if mask is not None else None,
        memory_used_mb=memory.used / 2**20 if memory else None,
        memory_free_mb=memory.free / 2**20 if memory else None,
    )


def parse_utilization(text: str) -> dict[int, float]:
    """`UTIL_QUERY`'s CSV lines ("index, percent") -> {GPU index: utilization %}; N/A left out."""
    out = {}
    for line in text.splitlines():
        index, _, util = (c.strip() for c in line.partition(","))
        value = _number(util)
        if index.isdigit() and value is not None:
            out[int(index)] = value
    return out


def _nvml_util(index: int) -> tuple[int, float | None]:
    import pynvml

    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return index, float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    except pynvml.NVMLError:
        return index, None  # not supported, or the GPU fell off the bus


def _each_gpu(read: Callable[[int], T]) -> tuple[T, ...] | str:
    """`read(index)` of every GPU through NVML, or why NVML could not be used."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        return f"NVML: {err}"
    try:
        return tuple(read(i) for i in range(pynvml.nvmlDeviceGetCount()))
    except pynvml.NVMLError as err:
        return f"NVML: {err}"
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def read_nvml() -> tuple[GpuReading, ...] | str:
    """Every GPU through NVML, or why NVML could not be used."""
    return _each_gpu(_nvml_gpu)


def read_utilization(run: Runner) -> dict[int, float]:
    """Each NVIDIA GPU's utilization now (% of the driver's last sample period, 1/6 to 1 s,
    in which a kernel ran): NVML, else nvidia-smi; {} where none is readable."""
    if not shutil.which("nvidia-smi"):
        return {}  # no NVIDIA driver here
    nvml = _each_gpu(_nvml_util)
    if not isinstance(nvml, str):
        return {index: util for index, util in nvml if util is not None}
    text = run(UTIL_QUERY)
    return parse_utilization(text) if text else {}


def read_nvidia(reading: HostConditions, run: Runner) -> HostConditions:
    """`reading` with its GPUs from NVML, else nvidia-smi; nothing when neither exists."""
    if not shutil.which("nvidia-smi"):
        return reading  # the driver installs nvidia-smi beside NVML: no NVIDIA GPU here
    gpus, source = read_nvml(), "nvml"
    if isinstance(gpus, str):
        text = run(SMI_QUERY)
        why, gpus, source = gpus, (parse_nvidia_smi(text) if text else ()), "nvidia-smi"
        if not gpus:
            return reading.merged(missing={"gpu": f"{why}; nvidia-smi gave no GPU rows"})
    unknown = {f"GPU {g.index} throttle reasons": f"{source} does not report them"
               for g in gpus if g.throttle_reasons is None}
    return reading.merged(gpus=gpus, gpu_source=source, missing=unknown)
