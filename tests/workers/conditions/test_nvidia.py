"""NVIDIA sources: nvidia-smi CSV (recorded samples) and NVML imported lazily."""

from __future__ import annotations

import subprocess
import sys

from specfleet.workers.conditions import HostConditions, check_memory, judge
from specfleet.workers.conditions.nvidia import (
    SMI_QUERY,
    parse_nvidia_smi,
    read_nvml,
    throttle_reasons,
)
from tests.workers.conditions.conftest import fixture


def test_throttle_bits_decode_to_nvml_names() -> None:
    assert throttle_reasons(0) == ()
    assert throttle_reasons(0x60) == ("sw_thermal_slowdown", "hw_thermal_slowdown")
    assert throttle_reasons(0x1 | 0x1000) == ("gpu_idle", "0x1000")


def test_the_query_asks_for_every_field_in_csv_without_units() -> None:
    assert SMI_QUERY[-1] == "--format=csv,noheader,nounits"
    assert "clocks_event_reasons.active" in SMI_QUERY[1] and "memory.free" in SMI_QUERY[1]


def test_h100_rows_parse_and_an_idle_gpu_clocked_down_is_not_throttled() -> None:
    busy, idle = parse_nvidia_smi(fixture("nvidia_smi_h100.csv"))
    assert (busy.index, busy.name, busy.sm_clock_mhz, busy.power_w, busy.power_cap_w) == (
        0, "NVIDIA H100 80GB HBM3", 1980.0, 312.45, 700.0)
    assert busy.memory_free_mb == 40000.0 and busy.throttle_reasons == ()
    assert idle.sm_clock_mhz == 345.0 and idle.throttle_reasons == ("gpu_idle",)
    reading = HostConditions(at=0.0, platform="linux", gpus=(busy, idle), mem_available_gb=500)
    assert not judge(reading).throttled
    # A discrete GPU's own free memory decides, not the host's.
    assert not check_memory(45 * 2**30, reading, "cuda").fits
    assert check_memory(45 * 2**30, reading, "cpu").fits


def test_a_gb10_capped_and_hot_is_throttled_and_its_unified_memory_is_none() -> None:
    (gb10,) = parse_nvidia_smi(fixture("nvidia_smi_gb10.csv"))
    assert gb10.memory_used_mb is None and gb10.memory_free_mb is None and gb10.power_cap_w is None
    reading = HostConditions(at=0.0, platform="linux", gpus=(gb10,), mem_available_gb=100.0)
    assert judge(reading).reasons == (
        "GPU 0 SM clock 2200 of 3003 MHz", "GPU 0 sw_thermal_slowdown, hw_thermal_slowdown")
    assert check_memory(60 * 2**30, reading, "cuda").source == "host memory"


def test_nvml_is_imported_only_when_a_reading_asks_for_it() -> None:
    # A reading on a host without nvidia-smi (this one) never imports NVML.
    code = ("import sys; from specfleet.workers.conditions import sample_conditions; "
            "sample_conditions(); print('pynvml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert isinstance(read_nvml(), str | tuple)  # no GPU here: the reason NVML gave
