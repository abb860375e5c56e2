"""Linux CPU conditions from the kernel's own files: cpufreq, thermal zones, /proc/meminfo.

Each file kind is parsed by its own small function; `read_linux(root)` reads them under
`root` ("/" on a real host; a test points it at a directory tree it writes). A VM without
cpufreq or thermal zones gives None fields with the reason in `missing`, never an error.
"""

from __future__ import annotations

import os
from pathlib import Path
from statistics import fmean

from specfleet.workers.conditions.model import CpuCap, HostConditions, ThermalZone

CPU_DIR = "sys/devices/system/cpu"
THERMAL_DIR = "sys/class/thermal"
MEMINFO = "proc/meminfo"
_TRIP_TYPES = ("passive", "hot", "critical")  # "active" trips start fans: not a slowdown


def parse_meminfo(text: str) -> dict[str, float]:
    """`/proc/meminfo` -> {"MemTotal": GiB, "MemAvailable": GiB, ...} (kB lines only)."""
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            out[name.strip()] = int(parts[0]) / 2**20
    return out


def parse_cpufreq(files: dict[str, str]) -> dict[str, float | str]:
    """One cpu's cpufreq directory (file name -> text) -> governor and MHz values.

    Frequencies in cpufreq files are kHz; missing files are left out.
    """
    out: dict[str, float | str] = {}
    if "scaling_governor" in files:
        out["governor"] = files["scaling_governor"].strip()
    for name, key in (("scaling_cur_freq", "cur_mhz"), ("cpuinfo_max_freq", "max_mhz"),
                      ("scaling_max_freq", "limit_mhz")):
        text = files.get(name, "").strip()
        if text.isdigit():
            out[key] = int(text) / 1000.0
    return out


def parse_thermal_zone(files: dict[str, str]) -> ThermalZone | None:
    """One `thermal_zoneN` directory (file name -> text) -> a `ThermalZone`.

    Temperatures are millidegrees Celsius. The trip kept is the lowest passive, hot or
    critical trip point above 0 (where the kernel starts slowing the CPU down).
    """
    temp = files.get("temp", "").strip()
    if not temp.lstrip("-").isdigit():
        return None
    trips = []
    for name, text in files.items():
        if name.startswith("trip_point_") and name.endswith("_type"):
            kind = text.strip()
            value = files.get(name[: -len("_type")] + "_temp", "").strip()
            if kind in _TRIP_TYPES and value.lstrip("-").isdigit() and int(value) > 0:
                trips.append((int(value) / 1000.0, kind))
    trip = min(trips) if trips else (None, None)
    return ThermalZone(files.get("type", "?").strip() or "?", int(temp) / 1000.0, *trip)


_CPUFREQ_FILES = ("scaling_governor", "scaling_cur_freq", "cpuinfo_max_freq", "scaling_max_freq")


def _read_files(path: Path, names) -> dict[str, str]:
    """The named files of one sysfs directory that exist and can be read (some are root-only)."""
    out = {}
    for name in names:
        try:
            out[name] = (path / name).read_text(errors="replace")
        except OSError:
            continue
    return out


def _zone_files(path: Path) -> dict[str, str]:
    names = [n for n in os.listdir(path) if n.startswith("trip_point_")]
    return _read_files(path, ("type", "temp", *names))


def _cpu_dirs(root: Path) -> list[Path]:
    base = root / CPU_DIR
    cpus = sorted(base.glob("cpu[0-9]*/cpufreq"), key=lambda p: int(p.parent.name[3:]))
    return [p for p in cpus if p.is_dir()]


def worst_cap(cpus: dict[int, dict[str, float | str]]) -> CpuCap | None:
    """The core whose ceiling is lowest against its own hardware max (cores of a big.LITTLE
    CPU differ: GB10's Cortex-A725 cores top out below its Cortex-X925 cores)."""
    pairs = [(float(c["limit_mhz"]) / float(c["max_mhz"]), n, c) for n, c in cpus.items()
             if c.get("limit_mhz") and c.get("max_mhz")]
    if not pairs:
        return None
    _, cpu, worst = min(pairs, key=lambda p: (p[0], p[1]))
    return CpuCap(cpu, float(worst["limit_mhz"]), float(worst["max_mhz"]))


def read_cpufreq(root: Path) -> dict:
    """Governor (cpu0), mean current MHz, highest hardware max MHz, lowest policy ceiling,
    and the core whose ceiling is furthest below its own max (`worst_cap`)."""
    dirs = _cpu_dirs(root)
    if not dirs:
        return {"missing": {"cpufreq": f"no cpufreq under {root / CPU_DIR} (VM or no driver)"}}
    cpus = {int(d.parent.name[3:]): parse_cpufreq(_read_files(d, _CPUFREQ_FILES)) for d in dirs}
    # The MHz keys always hold floats (only "governor" is text); float() narrows the type.
    current = [float(c["cur_mhz"]) for c in cpus.values() if "cur_mhz" in c]
    maxima = [c["max_mhz"] for c in cpus.values() if "max_mhz" in c]
    limits = [c["limit_mhz"] for c in cpus.values() if "limit_mhz" in c]
    return {
        "cpu_governor": cpus[min(cpus)].get("governor"),
        "cpu_mhz": round(fmean(current), 1) if current else None,
        "cpu_max_mhz": max(maxima) if maxima else None,
        "cpu_limit_mhz": min(limits) if limits else None,
        "cpu_cap": worst_cap(cpus),
    }


def read_thermal(root: Path) -> dict:
    """Every thermal zone with a readable temperature."""
    base = root / THERMAL_DIR
    zones = [parse_thermal_zone(_zone_files(d)) for d in sorted(base.glob("thermal_zone*"))]
    zones = [z for z in zones if z is not None]
    if not zones:
        return {"missing": {"thermal": f"no thermal zones under {base}"}}
    return {"thermal_zones": tuple(zones)}


def read_memory(root: Path) -> dict:
    """MemAvailable and MemTotal from /proc/meminfo."""
    try:
        info = parse_meminfo((root / MEMINFO).read_text())
    except OSError as err:
        return {"missing": {"memory": f"{root / MEMINFO}: {err.strerror}"}}
    if "MemAvailable" not in info:
        return {"missing": {"memory": f"no MemAvailable in {root / MEMINFO}"}}
    return {"mem_available_gb": round(info["MemAvailable"], 3),
            "mem_total_gb": round(info.get("MemTotal", 0.0), 3) or None}


def read_linux(reading: HostConditions, root: str | Path = "/") -> HostConditions:
    """`reading` with the Linux CPU, thermal and memory fields read under `root`."""
    root = Path(root)
    for part in (read_cpufreq(root), read_thermal(root), read_memory(root)):
        reading = reading.merged(**part)
    return reading
