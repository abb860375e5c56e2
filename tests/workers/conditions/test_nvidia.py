"""NVIDIA sources: nvidia-smi CSV (recorded samples) and NVML imported lazily."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from specfleet.workers.conditions import HostConditions, check_memory, judge, nvidia
from specfleet.workers.conditions.nvidia import (
    SMI_QUERY,
    UTIL_QUERY,
    parse_nvidia_smi,
    parse_utilization,
    read_nvidia,
    read_nvml,
    read_utilization,
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


def test_reasons_nvidia_smi_gives_as_na_are_unknown_and_an_idle_clock_is_no_throttling(
        monkeypatch) -> None:
    text = fixture("nvidia_smi_gb10_no_reasons.csv")  # "[Not Supported]" in the reasons column
    (gb10,) = parse_nvidia_smi(text)
    assert gb10.throttle_reasons is None and gb10.sm_clock_mhz == 208.0
    monkeypatch.setattr(nvidia.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(nvidia, "read_nvml", lambda: "nvidia-ml-py is not installed")
    reading = read_nvidia(HostConditions(at=0.0, platform="linux"),
                          lambda cmd: text if cmd == SMI_QUERY else None)
    assert reading.missing == {"GPU 0 throttle reasons": "nvidia-smi does not report them"}
    assert not judge(reading).throttled
    assert HostConditions.from_dict(reading.to_dict()) == reading


class _NVMLError(Exception):
    pass


def _not_supported(*_):
    raise _NVMLError("Not Supported")


@pytest.fixture
def fake_nvml(monkeypatch) -> types.ModuleType:
    """A GB10 through NVML that idles at 208 of 3003 MHz and reports no clock-event reasons."""
    nvml = types.ModuleType("pynvml")
    nvml.__dict__.update(
        NVMLError=_NVMLError, NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"NVIDIA GB10",
        nvmlDeviceGetMemoryInfo=_not_supported, nvmlDeviceGetEnforcedPowerLimit=_not_supported,
        nvmlDeviceGetCurrentClocksEventReasons=_not_supported,
        nvmlDeviceGetClockInfo=lambda h, c: 208, nvmlDeviceGetMaxClockInfo=lambda h, c: 3003,
        nvmlDeviceGetPowerUsage=lambda h: 4000, nvmlDeviceGetTemperature=lambda h, t: 40,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=87, memory=30),
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(nvidia.shutil, "which", lambda name: f"/usr/bin/{name}")
    return nvml


def test_reasons_nvml_does_not_support_are_unknown_not_busy(fake_nvml) -> None:
    reading = read_nvidia(HostConditions(at=0.0, platform="linux"), lambda cmd: None)
    (gb10,) = reading.gpus
    assert gb10.throttle_reasons is None and (gb10.sm_clock_mhz, gb10.power_w) == (208.0, 4.0)
    assert reading.missing == {"GPU 0 throttle reasons": "nvml does not report them"}
    assert not judge(reading).throttled
    fake_nvml.nvmlDeviceGetCount = _not_supported  # an NVML error is a reason, not a crash
    assert read_nvml() == "NVML: Not Supported"


def test_utilization_through_nvml_else_nvidia_smi(fake_nvml) -> None:
    assert read_utilization(lambda cmd: None) == {0: 87.0}
    fake_nvml.nvmlDeviceGetUtilizationRates = _not_supported
    assert read_utilization(lambda cmd: None) == {}
    fake_nvml.nvmlInit = _not_supported  # NVML unusable: nvidia-smi's CSV instead
    smi = {tuple(UTIL_QUERY): "0, 3\n1, [N/A]\n2, 95\n"}
    assert read_utilization(lambda cmd: smi.get(tuple(cmd))) == {0: 3.0, 2: 95.0}
    assert read_utilization(lambda cmd: None) == {}  # nvidia-smi failed: no reading
    assert parse_utilization("garbage\n") == {}
