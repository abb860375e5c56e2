"""Host conditions: power, thermal state, clocks and memory, read before and after every run.

One module per source kind (`linux.py`: cpufreq, thermal zones, /proc/meminfo; `macos.py`:
pmset, vm_stat; `nvidia.py`: NVML or nvidia-smi), each parsing its tool's real output in
small pure functions; `sample.py` takes one reading; `judge.py` says whether a reading is
throttled (the rules and fractions are documented there) and whether a model fits in memory.
"""

from specfleet.workers.conditions.judge import (
    CLOCK_FRACTION_FLAG,
    MemoryCheck,
    Throttle,
    check_memory,
    judge,
    memory_needed_gb,
)
from specfleet.workers.conditions.model import (
    UNREADABLE_READING,
    CpuCap,
    GpuReading,
    HostConditions,
    ThermalZone,
    stored_summary,
    summary,
)
from specfleet.workers.conditions.sample import conditions_root, sample_conditions

__all__ = [
    "CLOCK_FRACTION_FLAG",
    "CpuCap",
    "GpuReading",
    "HostConditions",
    "MemoryCheck",
    "ThermalZone",
    "UNREADABLE_READING",
    "Throttle",
    "check_memory",
    "conditions_root",
    "judge",
    "memory_needed_gb",
    "sample_conditions",
    "stored_summary",
    "summary",
]
