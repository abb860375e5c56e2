"""Host conditions stored with a run (migration 0003) on SQLite and PostgreSQL."""

from __future__ import annotations

from specfleet.workers.conditions import GpuReading, HostConditions, ThermalZone
from specfleet.workers.conditions.probe import run_fields
from tests.store.factory import result, spec


def test_conditions_and_the_throttled_flag_round_trip(store) -> None:
    planned = [spec("calm"), spec("hot", repeat=1)]
    store.create_matrix("c", {"name": "c"}, planned, matrix_id="c")
    calm = HostConditions(at=1.5, platform="linux", cpu_governor="performance",
                          mem_available_gb=20.0, missing={"cpufreq": "no cpufreq (VM)"})
    hot = HostConditions(at=2.5, platform="linux", mem_available_gb=19.0,
                         thermal_zones=(ThermalZone("x86_pkg_temp", 97.5, 95.0, "passive"),),
                         gpus=(GpuReading(0, "NVIDIA GB10", throttle_reasons=("gpu_idle",)),))
    store.record_result(result(planned[0]).model_copy(update=run_fields(calm, calm)))
    store.record_result(result(planned[1]).model_copy(update=run_fields(calm, hot)))
    rows = {r.run_key: r for r in store.runs(matrix="c")}
    assert rows["calm"].throttled is False and rows["calm"].throttle_reason is None
    assert HostConditions.from_dict(rows["calm"].conditions["before"]) == calm
    assert rows["hot"].throttled is True
    assert rows["hot"].throttle_reason == "thermal zone x86_pkg_temp at 97.5 °C (passive trip 95.0 °C)"
    assert HostConditions.from_dict(rows["hot"].conditions["after"]) == hot
